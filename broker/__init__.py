"""mlscope.broker: the contract shared by whoever asks for an evaluation (CLI, API) and whoever
runs it (the pipeline, workers). The Celery app, queue names and routing join it with the farm."""

from mlscope.broker.contract import DEVICE_PATTERN, RUNNERS, TRACE_LEVELS, EvaluationRequest, parse_request

__all__ = ["DEVICE_PATTERN", "RUNNERS", "TRACE_LEVELS", "EvaluationRequest", "parse_request"]
