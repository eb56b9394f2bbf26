"""`Client`: one method per resource of the HTTP API, its uploads and history reads mixed in."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from types import TracebackType
from typing import Any
from urllib.parse import quote

import requests

from mlscope.client.errors import ApiError
from mlscope.client.history import HistoryReads
from mlscope.client.uploads import UploadMethods
from mlscope.contract.errors import UserError
from mlscope.contract.settings import Settings, client_token, load_settings

__all__ = ["TERMINAL_STATUSES", "ApiError", "Client", "WaitTimeout"]

TERMINAL_STATUSES = frozenset({"succeeded", "failed", "cancelled"})
_V1 = "/api/v1"


class WaitTimeout(UserError, TimeoutError):
    """`Client.wait` gave up before every evaluation had ended.

    Attributes:
        pending: the ids that had not ended.
    """

    def __init__(self, message: str, pending: list[str]) -> None:
        super().__init__(message, field="timeout_s")
        self.pending = pending


def _problem(response: requests.Response) -> dict[str, Any]:
    try:
        document = response.json()
    except ValueError:
        document = None
    if isinstance(document, dict):
        return document
    text = " ".join(response.text.split())[:200]
    return {"title": response.reason, "status": response.status_code, "detail": text or response.reason}


def _param(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple, set, frozenset)):
        return ",".join(str(item) for item in value)
    return value


def _params(filters: Mapping[str, Any]) -> dict[str, Any]:
    """The query parameters of `filters`, leaving out the unset ones: None, and an empty list or text
    (no filter; the API refuses an empty list parameter, which would be one empty item)."""
    return {
        name: _param(value)
        for name, value in filters.items()
        if value is not None and not (isinstance(value, (str, list, tuple, set, frozenset)) and not value)
    }


class Client(UploadMethods, HistoryReads):
    """A connection to one mlscope API (its uploads in client/uploads.py, its history reads in
    client/history.py).

    Args:
        api_url: the API's base URL; `settings.api_url` (MLSCOPE_API_URL) when None.
        token: the bearer token for writes (and reads, where the API asks); when None, the
            environment's MLSCOPE_API_TOKEN, else the first of `settings.api_tokens`
            (MLSCOPE_API_TOKENS), else none.
        settings: where the defaults come from; `load_settings()` when needed and None.
        timeout_s: how long one HTTP request may take.

    Raises:
        UserError: the settings are invalid (only when they are read).
    """

    def __init__(
        self,
        api_url: str | None = None,
        token: str | None = None,
        *,
        settings: Settings | None = None,
        timeout_s: float = 30,
    ) -> None:
        if api_url is None or token is None:
            settings = settings if settings is not None else load_settings()
        if api_url is None:
            assert settings is not None
            api_url = settings.api_url
        if token is None:
            assert settings is not None
            token = client_token(settings)
        self.api_url = api_url.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s
        self._session = requests.Session()

    # ----- plumbing --------------------------------------------------------------------------------

    def _request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        data: Any = None,
        content_type: str | None = None,
        accept: str = "application/json",
        also_ok: Iterable[int] = (),
        timeout: float | tuple[float, float] | None = None,
    ) -> requests.Response:
        headers = {"Accept": accept}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        if content_type is not None:
            headers["Content-Type"] = content_type
        try:
            response = self._session.request(
                method,
                self.api_url + path,
                params=params,
                json=body,
                data=data,
                headers=headers,
                timeout=self.timeout_s if timeout is None else timeout,
            )
        except requests.ConnectionError:
            raise UserError(
                f"cannot reach the mlscope API at {self.api_url}: "
                "is `mlscope api` running? (set MLSCOPE_API_URL)"
            ) from None
        except requests.Timeout:
            raise UserError(
                f"{method} {path}: the mlscope API at {self.api_url} "
                f"did not answer within {self.timeout_s:g}s"
            ) from None
        except requests.RequestException as exc:
            raise UserError(
                f"cannot call the mlscope API at {self.api_url!r}: {exc} (set MLSCOPE_API_URL)",
                field="api_url",
            ) from None
        if response.status_code >= 400 and response.status_code not in also_ok:
            raise ApiError(method, path, response.status_code, _problem(response))
        return response

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self._request(method, path, **kwargs)
        try:
            return response.json()
        except ValueError:
            raise ApiError(
                method,
                path,
                response.status_code,
                {"detail": f"the answer is not JSON: {' '.join(response.text.split())[:200]}"},
            ) from None

    def _get(self, path: str, query: Mapping[str, Any]) -> Any:
        return self._json("GET", f"{_V1}{path}", params=_params(query))

    # ----- evaluations -----------------------------------------------------------------------------

    def submit(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """Submit one evaluation (the EvaluationRequest fields, e.g. scenarios ["server"], load {"qps":
        20}); returns {id, status, queue, target, warnings, served_by, links}: served_by names the live
        agents consuming the job's queue (empty: none can run it yet; None: the registry was unreadable).

        Raises:
            ApiError: the request is invalid (422, naming the field), no or a wrong token (401),
                writes are disabled (403), the broker is down (503).
        """
        accepted: dict[str, Any] = self._json("POST", f"{_V1}/evaluations", body=dict(request))
        return accepted

    def submit_batch(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Submit a matrix {models, frameworks, targets, fan_out, ...}; returns {evaluations, skipped,
        warnings, compare_url}.

        Raises:
            ApiError: as `submit`.
        """
        accepted: dict[str, Any] = self._json("POST", f"{_V1}/evaluations/batch", body=dict(body))
        return accepted

    def evaluation(self, id: str, raw: bool = False) -> dict[str, Any]:
        """One evaluation by id or unique prefix; `raw` adds each measurement's latencies_ns.

        Raises:
            ApiError: 404 when no evaluation has this id, 422 when a prefix is ambiguous.
        """
        params = {"raw": "true"} if raw else None
        evaluation: dict[str, Any] = self._json(
            "GET", f"{_V1}/evaluations/{quote(id, safe='')}", params=params
        )
        return evaluation

    def evaluations(self, **filters: Any) -> dict[str, Any]:
        """A page of evaluations: filters model, framework, system, status, since, until (aware
        datetimes or ISO 8601 text), limit, offset, cursor (the previous page's next_cursor); returns
        {items, total, limit, offset, next_cursor}, next_cursor None on the last page."""
        page: dict[str, Any] = self._json("GET", f"{_V1}/evaluations", params=_params(filters))
        return page

    def cancel(self, id: str) -> dict[str, Any]:
        """Cancel an evaluation; returns {id, status, cancelled}."""
        cancelled: dict[str, Any] = self._json("DELETE", f"{_V1}/evaluations/{quote(id, safe='')}")
        return cancelled

    def wait(
        self,
        ids: Iterable[str],
        *,
        poll_s: float = 0.5,
        timeout_s: float | None = None,
        on_update: Callable[[dict[str, dict[str, Any]]], None] | None = None,
    ) -> list[dict[str, Any]]:
        """Poll until every evaluation has ended (succeeded, failed or cancelled).

        Args:
            ids: evaluation ids (or unique prefixes).
            poll_s: seconds between rounds.
            timeout_s: give up after this long; None waits as long as it takes.
            on_update: called after each round with id → the evaluation as last read.

        Returns:
            The ended evaluations, in the order of `ids`.

        Raises:
            WaitTimeout: a UserError (and a TimeoutError) naming the evaluations still running.
            ApiError: an id is unknown.
        """
        wanted = list(dict.fromkeys(ids))
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        current: dict[str, dict[str, Any]] = {}
        while True:
            for id in wanted:
                if current.get(id, {}).get("status") not in TERMINAL_STATUSES:
                    current[id] = self.evaluation(id)
            if on_update is not None:
                on_update(dict(current))
            pending = [id for id in wanted if current[id]["status"] not in TERMINAL_STATUSES]
            if not pending:
                return [current[id] for id in wanted]
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    states = ", ".join(f"{id} ({current[id]['status']})" for id in pending)
                    raise WaitTimeout(
                        f"{len(pending)} evaluation(s) had not ended after {timeout_s:g}s: {states}", pending
                    )
                time.sleep(min(poll_s, left))
            else:
                time.sleep(poll_s)

    def trace(
        self,
        id: str,
        *,
        format: str = "json",
        level: str | None = None,
        limit: int | None = None,
        offset: int | None = None,
    ) -> dict[str, Any]:
        """An evaluation's trace: format "json" gives a page of spans {evaluation_id, trace_id,
        trace_level, level, count, total, limit, offset, spans} (`level`, `limit`, `offset` narrow
        it); "chrome" the whole trace in the Chrome Trace Event Format {traceEvents,
        displayTimeUnit, otherData} (narrowed by `level`), to save as a file for Perfetto.

        Raises:
            ApiError: 404 when no evaluation has this id, 422 naming an invalid argument.
        """
        params = _params({"format": format, "level": level, "limit": limit, "offset": offset})
        trace: dict[str, Any] = self._json(
            "GET", f"{_V1}/evaluations/{quote(id, safe='')}/trace", params=params
        )
        return trace

    def layers(
        self, id: str, *, group_by: str | None = None, top: int | None = None, level: str | None = None
    ) -> dict[str, Any]:
        """Where an evaluation's traced inferences spent their time: {evaluation_id, trace_level,
        group_by, top, hotspot_level, rows, hotspots, kernels}; `group_by` is layer_type, name or
        layer, `top` the hotspots per batch size, `level` their pass (LIBRARY or FRAMEWORK).

        Raises:
            ApiError: 404 when no evaluation has this id, 422 naming an invalid argument.
        """
        params = _params({"group_by": group_by, "top": top, "level": level})
        layers: dict[str, Any] = self._json(
            "GET", f"{_V1}/evaluations/{quote(id, safe='')}/layers", params=params
        )
        return layers

    # ----- comparison ------------------------------------------------------------------------------

    def compare(self, **filters: Any) -> dict[str, Any]:
        """The comparison table {columns, rows}: filters ids, models, frameworks, systems,
        batch_sizes, scenarios (lists or comma-separated text), since, until; price_per_hour
        ("PRICE" or "SYSTEM=PRICE" items) prices the rows recorded without a price."""
        table: dict[str, Any] = self._json(
            "GET", f"{_V1}/compare", params={**_params(filters), "format": "json"}
        )
        return table

    def diff(self, a: str, b: str, **options: Any) -> dict[str, Any]:
        """B against A, point by point (GET /compare/diff): each an evaluation id or a filter such as
        `model=resnet18,framework=onnxruntime`; options threshold, confidence, same_system,
        allow_different (compare a pair that measured different workloads, listing the differences)."""
        answer: dict[str, Any] = self._json(
            "GET", f"{_V1}/compare/diff", params={**_params(options), "a": a, "b": b}
        )
        return answer

    def compare_csv(self, **filters: Any) -> str:
        """The comparison table as CSV text; filters as `compare`."""
        params = {**_params(filters), "format": "csv"}
        return self._request("GET", f"{_V1}/compare", params=params, accept="text/csv").text

    # ----- catalog and operations ------------------------------------------------------------------

    def models(self, **filters: Any) -> list[dict[str, Any]]:
        """Every model (the manifests, then the catalogue's architectures): {name, task, description,
        frameworks, version, family, origin}; filters task, framework, family, search."""
        models: list[dict[str, Any]] = self._json("GET", f"{_V1}/models", params=_params(filters))
        return models

    def model(self, name: str) -> dict[str, Any]:
        """One model's manifests: {name, manifests: {framework: manifest}}; for an uploaded model
        (`sha256:<hex>`), its description, as `upload_model` answers it.

        Raises:
            ApiError: 404 when unknown (with close names).
        """
        model: dict[str, Any] = self._json("GET", f"{_V1}/models/{quote(name, safe='')}")
        return model

    def frameworks(self) -> list[dict[str, Any]]:
        """Every registered framework: {name, display, installed_here, served_by}."""
        frameworks: list[dict[str, Any]] = self._json("GET", f"{_V1}/frameworks")
        return frameworks

    def agents(self) -> list[dict[str, Any]]:
        """The live agents, each with seconds_since_heartbeat."""
        agents: list[dict[str, Any]] = self._json("GET", f"{_V1}/agents")
        return agents

    def queues(self) -> list[dict[str, Any]]:
        """Known queues: {queue, depth, consumers}."""
        queues: list[dict[str, Any]] = self._json("GET", f"{_V1}/queues")
        return queues

    def health(self) -> dict[str, Any]:
        """The health document; a degraded API (503) answers it too, with status "degraded"."""
        health: dict[str, Any] = self._json("GET", f"{_V1}/health", also_ok=(503,))
        return health

    # ----- lifetime --------------------------------------------------------------------------------

    def close(self) -> None:
        self._session.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
