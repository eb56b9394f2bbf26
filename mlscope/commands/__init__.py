"""The CLI verbs that do work, each imported only when its verb runs (so `mlscope --help` is fast)."""
