"""SIGTERM and SIGINT as Ctrl-C: how a long-running command of mlscope's is asked to stop.

A process started with SIGINT ignored (a background job of a non-interactive shell, a test runner's
worker, some supervisors) inherits the ignore, and Python then leaves it so: Ctrl-C's signal would
not end it at all. SIGTERM (what `docker stop`, Kubernetes and systemd send) would end it at once,
skipping its clean-up. Both raise KeyboardInterrupt instead, once: a second signal while the first
one's clean-up runs is ignored, so the clean-up is not broken off half done. SIGKILL still ends the
process at once.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

__all__ = ["interrupt_on_signals"]


def interrupt_on_signals() -> None:
    """From now on the first SIGTERM or SIGINT raises KeyboardInterrupt in the main thread (a no-op
    outside it, where Python cannot set handlers)."""
    if threading.current_thread() is not threading.main_thread():
        return

    def handler(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
