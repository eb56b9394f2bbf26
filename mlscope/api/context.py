"""What every view works with: the store, the Celery app, the agent and model registries, the settings.

One `ApiContext` per app, kept on `app.extensions["mlscope"]`; views reach it through `context()`.
Also the small helpers several views share: a call bounded in time, and a URL safe to show.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar
from urllib.parse import urlsplit, urlunsplit

from celery import Celery
from flask import Flask, Response, current_app

from mlscope.contract.settings import Settings
from mlscope.registry.agents import AgentRegistry, LiveCache
from mlscope.registry.models import ModelRegistry
from mlscope.store import Store

__all__ = ["ApiContext", "AppMetrics", "bounded", "context", "redact_url"]

T = TypeVar("T")


class AppMetrics(Protocol):
    """What the app factory and the routes ask of the app's metrics (mlscope.api.metrics.ApiMetrics,
    which reads the context: so the context names this, not that)."""

    def watch(self, ctx: ApiContext) -> None:
        """Report the farm's state of `ctx` at every scrape."""

    def init_app(self, app: Flask) -> None:
        """Count and time every request of `app`."""

    def render(self) -> Response:
        """The text exposition of every metric."""


@dataclass
class ApiContext:
    """The parts one API app serves from.

    Attributes:
        settings: the settings it was built from.
        store: where evaluations are recorded; the SQL store is safe to share between request threads.
        celery: the Celery app jobs are sent through.
        agents: the live workers, in Redis.
        models: the manifests that can be evaluated.
        metrics: the app's own Prometheus registry and instruments.
        store_url: the store's URL when the app opened it from settings (shown by /health), else None.
        live: `agents`' live agents for routing, re-read only when the registry's generation moves
            (or after a second): a submission costs one registry read, whatever the fleet's size.
    """

    settings: Settings
    store: Store
    celery: Celery
    agents: AgentRegistry
    models: ModelRegistry
    metrics: AppMetrics
    store_url: str | None = None
    live: LiveCache = field(init=False)

    def __post_init__(self) -> None:
        self.live = LiveCache(self.agents)

    @property
    def broker_url(self) -> str:
        """The URL the Celery app sends to."""
        return str(self.celery.conf.broker_url or self.settings.broker_url)


def context() -> ApiContext:
    """The current app's ApiContext."""
    found: ApiContext = current_app.extensions["mlscope"]
    return found


def bounded(call: Callable[[], T], timeout_s: float) -> T:
    """`call()`, or TimeoutError when it has not returned within `timeout_s`.

    The call runs in a thread of its own that is abandoned on timeout (it ends when its own socket
    timeout does), so a dependency that hangs cannot hold a request for longer than `timeout_s`.

    Raises:
        TimeoutError: the call took longer; whatever `call` raises otherwise.
    """
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mlscope-api-bounded")
    try:
        future = executor.submit(call)
        try:
            return future.result(timeout=timeout_s)
        except FutureTimeout:
            raise TimeoutError(f"no answer within {timeout_s:g}s") from None
    finally:
        executor.shutdown(wait=False)


def redact_url(url: Any) -> str:
    """`url` without its password: `redis://:secret@host:6379/0` → `redis://host:6379/0`."""
    text = str(url)
    try:
        parts = urlsplit(text)
    except ValueError:
        return text.split("@")[-1]
    if parts.password is None:
        return text
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    netloc = f"{parts.username}@{host}" if parts.username else host
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
