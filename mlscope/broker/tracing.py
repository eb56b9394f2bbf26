"""Where finished spans go besides the store: an OTLP/HTTP endpoint (Jaeger) when
MLSCOPE_OTLP_ENDPOINT is set. The api and the worker call it; the predictor runtime never does (its
spans travel back to the worker with the result).

OpenTelemetry's SDK is imported only when an endpoint is configured (`pip install 'mlscope[otlp]'`).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from mlscope.contract.settings import Settings

if TYPE_CHECKING:
    from mlscope.broker.otlp import OtlpExporter

__all__ = ["export_spans"]

# One exporter per endpoint for the life of the process: its HTTP session is reused across jobs,
# and the lock keeps the api's request threads from sharing it at once.
_exporters: dict[str, OtlpExporter] = {}
_lock = threading.Lock()


def export_spans(settings: Settings, spans: Sequence[dict[str, Any]]) -> bool:
    """Send spans (the store's shape) to the configured OTLP endpoint.

    Returns:
        True when they were accepted; False when no endpoint is configured or the endpoint failed
        (the exporter logs why; a trace that Jaeger misses is still in the store).
    """
    if not settings.otlp_endpoint or not spans:
        return False
    from mlscope.broker.otlp import OtlpExporter

    with _lock:
        exporter = _exporters.get(settings.otlp_endpoint)
        if exporter is None:
            exporter = _exporters[settings.otlp_endpoint] = OtlpExporter(settings.otlp_endpoint)
        return exporter.export(list(spans))
