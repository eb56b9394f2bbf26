"""The Python client's reads of history series (docs/history.md): a series with its change points,
the series a filter selects, and the regressions since a date. A mixin of `Client`, which sends the
requests (`_get`)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from datetime import datetime
from typing import Any

__all__ = ["HistoryReads"]


class HistoryReads(ABC):
    """`Client.history`, `Client.history_series` and `Client.regressions`."""

    @abstractmethod
    def _get(self, path: str, query: Mapping[str, Any]) -> Any:
        """The JSON answer of GET /api/v1`path` with `query` (None values left out, datetimes as ISO
        8601).

        Raises:
            ApiError: the API answered with an error.
        """

    def history(
        self,
        *,
        model: str,
        framework: str,
        system_id: str | None = None,
        device: str | None = None,
        scenario: str | None = None,
        batch_size: int | None = None,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        limit: int | None = None,
        **more: Any,
    ) -> dict[str, Any]:
        """How a model on a framework performed over time: {model, framework, manifest_sha256,
        framework_version, system_id, device, scenario, batch_size, points, change_points,
        detection}, a point {evaluation_id, created_at, system_id, device, manifest_sha256,
        framework_version, median_ms, ci_low_ms, ci_high_ms, p99_ms, throughput, valid} per succeeded
        evaluation, oldest first. scenario and batch_size default to the API's (single_stream, 1);
        since and until are aware datetimes or ISO 8601 text; limit keeps the latest points. `more`:
        manifest_sha256, framework_version, significance, min_segment, valid_only.

        Raises:
            ApiError: 422 naming an invalid argument.
        """
        query = {
            "model": model,
            "framework": framework,
            "system_id": system_id,
            "device": device,
            "scenario": scenario,
            "batch_size": batch_size,
            "since": since,
            "until": until,
            "limit": limit,
            **more,
        }
        series: dict[str, Any] = self._get("/history", query)
        return series

    def history_series(self, **filters: Any) -> list[dict[str, Any]]:
        """The history series a filter selects (model, framework, manifest_sha256, framework_version,
        system_id, device, scenario, batch_size, since, until), each {its key..., points, first_at,
        last_at}.

        Raises:
            ApiError: 422 naming an invalid filter.
        """
        found: list[dict[str, Any]] = self._get("/history/series", filters)
        return found

    def regressions(self, *, since: datetime | str, **filters: Any) -> dict[str, Any]:
        """The series that got slower since `since`: {since, until, threshold, series, too_short,
        regressions}; filters until, threshold, model, framework, system_id, significance, valid_only,
        min_segment.

        Raises:
            ApiError: 422 naming an invalid argument.
        """
        found: dict[str, Any] = self._get("/history/regressions", {"since": since, **filters})
        return found
