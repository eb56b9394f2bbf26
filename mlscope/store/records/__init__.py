"""What a Store keeps, in a form every backend shares: the records backends read and write, the checks
that turn a caller's input into records, and the public (JSON) shape records are served in.

Backends never see unchecked input and never build the public shape themselves, so every backend
accepts and returns exactly the same things. One module per resource: `evaluations` (evaluations and
their measurements), `sections` (the accuracy and parity an evaluation may carry), `spans` (traced
spans and layer breakdowns), `compare` (the comparison table);
`values` holds the checks they share.
"""

from __future__ import annotations

from mlscope.contract.names import ACTIVE_STATUSES, STATUSES, TERMINAL_STATUSES, TRACE_LEVELS
from mlscope.store.records.compare import (
    COMPARE_COLUMNS,
    CompareFilter,
    check_batch_size,
    compare_row,
    compare_rows,
    workload_view,
)
from mlscope.store.records.evaluations import (
    PLAIN_CODEC,
    RAW_CODEC,
    EvaluationFilter,
    EvaluationRecord,
    MeasurementRecord,
    check_cold_start,
    check_error,
    check_filter,
    check_framework,
    check_measurements,
    check_model,
    check_system,
    evaluation_to_dict,
    pack_latencies,
    subsample_latencies,
    summary_columns,
    unpack_latencies,
)
from mlscope.store.records.sections import check_accuracy, check_energy, check_memory, check_parity
from mlscope.store.records.spans import (
    SPAN_GROUPINGS,
    SPAN_LEVELS,
    LayerTotal,
    SpanRecord,
    check_span,
    check_spans,
    check_trace_id,
    layer_rows,
    span_group_key,
    span_to_dict,
)
from mlscope.store.records.values import (
    INT64_MAX,
    INT64_MIN,
    check_aware,
    check_choice,
    check_int,
    check_object,
    check_optional_text,
    check_text,
    json_safe,
)

__all__ = [
    "ACTIVE_STATUSES",
    "COMPARE_COLUMNS",
    "INT64_MAX",
    "INT64_MIN",
    "PLAIN_CODEC",
    "RAW_CODEC",
    "SPAN_GROUPINGS",
    "SPAN_LEVELS",
    "STATUSES",
    "TERMINAL_STATUSES",
    "TRACE_LEVELS",
    "CompareFilter",
    "EvaluationFilter",
    "EvaluationRecord",
    "LayerTotal",
    "MeasurementRecord",
    "SpanRecord",
    "check_accuracy",
    "check_aware",
    "check_batch_size",
    "check_choice",
    "check_cold_start",
    "check_energy",
    "check_error",
    "check_filter",
    "check_framework",
    "check_int",
    "check_measurements",
    "check_memory",
    "check_model",
    "check_object",
    "check_optional_text",
    "check_parity",
    "check_span",
    "check_spans",
    "check_system",
    "check_text",
    "check_trace_id",
    "compare_row",
    "compare_rows",
    "evaluation_to_dict",
    "json_safe",
    "layer_rows",
    "pack_latencies",
    "span_group_key",
    "span_to_dict",
    "subsample_latencies",
    "summary_columns",
    "unpack_latencies",
    "workload_view",
]
