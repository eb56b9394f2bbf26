"""/api/v1/health and /api/v1/metrics: whether the farm's parts answer, and Prometheus metrics."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from flask import Response
from flask.views import MethodView

from mlscope.api.blueprint import ApiBlueprint
from mlscope.api.context import ApiContext, context, redact_url
from mlscope.api.schemas import HealthSchema
from mlscope.broker.app import broker_ping

__all__ = ["CHECK_TIMEOUT_S", "blp", "check_health"]

# Each dependency gets this long to answer; the checks run at once, so /health answers within it.
CHECK_TIMEOUT_S = 3.0

blp = ApiBlueprint("ops", __name__, url_prefix="/api/v1", description="Health and metrics.")


def _checks(ctx: ApiContext) -> dict[str, Callable[[], Any]]:
    return {
        "broker": lambda: broker_ping(ctx.celery, timeout_s=CHECK_TIMEOUT_S),
        "store": lambda: ctx.store.count_evaluations(),
        "registry": lambda: len(ctx.agents.live()),
    }


def check_health(ctx: ApiContext) -> tuple[dict[str, Any], bool]:
    """Check the broker, the store and the agent registry at once, each bounded by CHECK_TIMEOUT_S.

    Returns:
        The health document and whether every part answered. Its `parts` maps each part to
        {"ok", "url", "error"} and `down` names those that did not answer, so a 503 says which
        part to look at.
    """
    urls = {"broker": ctx.broker_url, "store": ctx.store_url, "registry": ctx.agents.url}
    document: dict[str, Any] = {}
    results: dict[str, Any] = {}
    executor = ThreadPoolExecutor(max_workers=3, thread_name_prefix="mlscope-api-health")
    deadline = time.monotonic() + CHECK_TIMEOUT_S + 0.5
    try:
        futures = {name: executor.submit(check) for name, check in _checks(ctx).items()}
        for name, future in futures.items():
            report: dict[str, Any] = {"ok": True}
            if urls[name] is not None:
                report["url"] = redact_url(urls[name])
            try:
                results[name] = future.result(timeout=max(0.0, deadline - time.monotonic()))
            except FutureTimeout:
                report.update(ok=False, error=f"no answer within {CHECK_TIMEOUT_S:g}s")
            except Exception as exc:  # any failure means the part is down
                report.update(ok=False, error=f"{type(exc).__name__}: {exc}")
            document[name] = report
    finally:
        executor.shutdown(wait=False)
    down = [name for name, report in document.items() if not report["ok"]]
    # The parts also stand at the top level, where clients of earlier versions read them.
    health = {"status": "degraded" if down else "ok", **document, "agents": results.get("registry")}
    return {**health, "parts": document, "down": down}, not down


@blp.route("/health")
class Health(MethodView):
    @blp.response(200, HealthSchema)
    @blp.alt_response(503, schema=HealthSchema, description="A dependency is down: status is degraded")
    def get(self) -> tuple[dict[str, Any], int]:
        """Check the broker, the store and the agent registry

        Always open, even when reads need a token. A 503 names the parts that are down (`down`,
        and `parts` says why) and carries `Retry-After`.
        """
        document, healthy = check_health(context())
        return document, 200 if healthy else 503


@blp.route("/metrics")
class Metrics(MethodView):
    @blp.response(200, content_type="text/plain; version=0.0.4", description="Prometheus text format")
    def get(self) -> Response:
        """Prometheus metrics

        Requests by method, endpoint and status; request latency; evaluations by status; live
        agents; queue depths; whether each dependency answered.
        """
        return context().metrics.render()
