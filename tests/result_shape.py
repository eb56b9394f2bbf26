"""The result shape fixed by docs/design.md's "Result shape", written out once for every test that pins it.
Kept apart from the code on purpose: a change to the code's shape must fail a test."""

RESULT_KEYS = frozenset(
    {
        "id",
        "status",
        "model",
        "framework",
        "system",
        "runner",
        "device",
        "trace_level",
        "trace_id",
        # Added with leases (schema 7): where its job was queued (null: run in place), how often started.
        "queue",
        "attempts",
        "cold_start",
        "measurements",
        # The model as users read it, with its overrides (`hf:gpt2[n_layer=2]`), derived on read.
        "display_name",
        "error",
        "created_at",
        "started_at",
        "finished_at",
    }
)
LATENCY_KEYS = frozenset(
    {
        "count",
        "mean",
        "median",
        "p90",
        "p95",
        "p99",
        "p999",
        "min",
        "max",
        "stdev",
        "iqr",
        "cv",
        "trimmed_mean",
        "median_ci",
    }
)
