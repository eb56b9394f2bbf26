"""Prometheus metrics of one API app, in a registry of its own (never the process-global one, so two
apps in one process, as in tests, count apart).

Request counts and latencies are recorded as requests end; the farm's state (evaluations by status,
live agents, queue depths, which dependencies answer) is read when Prometheus scrapes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, TypeVar

from flask import Flask, Response, g, request
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from mlscope.api.context import bounded
from mlscope.broker.app import queue_depths
from mlscope.store.records import STATUSES

if TYPE_CHECKING:
    from mlscope.api.context import ApiContext

__all__ = ["SCRAPE_TIMEOUT_S", "ApiMetrics"]

# Each dependency read during a scrape gets this long; Prometheus's own scrape timeout is 10 s.
SCRAPE_TIMEOUT_S = 3.0
logger = logging.getLogger("mlscope.api")
T = TypeVar("T")


class _FarmCollector(Collector):
    """Reads the farm's state at scrape time; a dependency that does not answer reports up=0."""

    def __init__(self, ctx: ApiContext) -> None:
        self._ctx = ctx

    def _read(self, component: str, up: GaugeMetricFamily, call: Callable[[], T]) -> T | None:
        try:
            value = bounded(call, SCRAPE_TIMEOUT_S)
        except Exception as exc:  # a scrape reports what it can
            logger.warning("metrics: cannot read the %s: %s", component, exc)
            up.add_metric([component], 0)
            return None
        up.add_metric([component], 1)
        return value

    def collect(self) -> Iterator[Metric]:
        ctx = self._ctx
        up = GaugeMetricFamily("mlscope_component_up", "Whether a dependency answered", labels=["component"])
        counts = self._read(
            "store", up, lambda: {status: ctx.store.count_evaluations(status=status) for status in STATUSES}
        )
        if counts is not None:
            family = GaugeMetricFamily("mlscope_evaluations", "Evaluations by status", labels=["status"])
            for status, count in counts.items():
                family.add_metric([status], count)
            yield family
        state = self._read("registry", up, lambda: (ctx.agents.live(), sorted(ctx.agents.known_queues())))
        if state is not None:
            live, queues = state
            yield GaugeMetricFamily("mlscope_agents_live", "Live agents (workers)", value=len(live))
            depths = self._read("broker", up, lambda: queue_depths(ctx.celery, queues))
            if depths is not None:
                family = GaugeMetricFamily("mlscope_queue_depth", "Jobs waiting per queue", labels=["queue"])
                for queue, depth in sorted(depths.items()):
                    family.add_metric([queue], depth)
                yield family
        yield up


class ApiMetrics:
    """The app's registry, its request instruments, and the farm collector once `watch` is called."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.requests = Counter(
            "mlscope_api_requests",
            "HTTP requests answered",
            ["method", "endpoint", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "mlscope_api_request_duration_seconds",
            "Time to answer an HTTP request",
            ["method", "endpoint"],
            registry=self.registry,
        )

    def watch(self, ctx: ApiContext) -> None:
        """Report the farm's state of `ctx` at every scrape."""
        self.registry.register(_FarmCollector(ctx))

    def init_app(self, app: Flask) -> None:
        """Count and time every request of `app`."""
        app.before_request(_start_timer)

        @app.after_request
        def _observe(response: Response) -> Response:
            # The route's pattern, not the path: ids in paths would make one series per evaluation.
            endpoint = request.url_rule.rule if request.url_rule is not None else "unmatched"
            self.requests.labels(request.method, endpoint, str(response.status_code)).inc()
            started = g.get("mlscope_started")
            if started is not None:
                self.latency.labels(request.method, endpoint).observe(time.perf_counter() - started)
            return response

    def render(self) -> Response:
        """The text exposition of every metric."""
        return Response(generate_latest(self.registry), content_type=CONTENT_TYPE_LATEST)


def _start_timer() -> None:
    g.mlscope_started = time.perf_counter()
