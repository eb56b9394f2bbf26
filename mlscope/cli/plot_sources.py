"""Where `mlscope plot` reads results: the local store (the default, as `mlscope results` and `mlscope
diff` read it) or a farm's API (`--api URL`, through the Python client). Both answer the same four
questions, in the store's public shapes, with the same selectors: an evaluation id or unique prefix
(several, comma-separated, where a chart draws several), or a filter `model=resnet18,framework=
onnxruntime[,system=...,device=...,scenario=...,batch_size=...]` as `mlscope diff` takes it
(mlscope.analysis.diff_report.parse_filter).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from mlscope.analysis.diff_report import (
    matches_filter,
    measures_filter,
    newest_succeeded,
    parse_filter,
    pick_evaluation,
)
from mlscope.contract.errors import UserError
from mlscope.contract.workload import workload_key

if TYPE_CHECKING:
    from mlscope.client import Client
    from mlscope.store import Store

__all__ = ["ApiSource", "PlotSource", "StoreSource", "is_filter", "split_ids"]

# The argument's name in the errors (what `mlscope plot --help` calls it).
SELECTOR = "ID|FILTER"
# Evaluations a filter looks through, newest first, for the latest of each setup.
_SCANNED = 1000
_PAGE = 100


def is_filter(selector: str) -> bool:
    return "=" in selector


def split_ids(selector: str) -> list[str]:
    """`a1b2c3d4,e5f6a7b8` → the ids (or prefixes) in it.

    Raises:
        UserError: an empty one.
    """
    ids = [part.strip() for part in selector.split(",")]
    if not all(ids):
        raise UserError(
            f"{SELECTOR} {selector!r}: an empty id: expected ids (or unique prefixes) separated by commas, "
            "or a filter like model=resnet18,framework=onnxruntime",
            field=SELECTOR,
        )
    return ids


def _setup(evaluation: Mapping[str, Any]) -> tuple[Any, ...]:
    """What makes two evaluations the same setup: the latest of each is drawn. The workloads it
    measured are part of it (contract.workload.workload_key, per scenario), as in the comparison
    table: a model run with two `--config`s is two setups, the later not hiding the earlier."""
    framework = evaluation.get("framework") or {}
    scenarios = {str(m.get("scenario")) for m in evaluation.get("measurements") or []}
    return (
        evaluation["model"]["name"],
        framework.get("name"),
        framework.get("version"),
        (evaluation.get("system") or {}).get("id"),
        evaluation.get("device"),
        tuple(sorted(workload_key(evaluation, scenario) for scenario in scenarios)),
    )


def _narrowed(evaluation: Mapping[str, Any], wanted: dict[str, str]) -> dict[str, Any]:
    """The evaluation with only the measurements at the filter's scenario and batch size."""
    kept = [m for m in evaluation.get("measurements") or [] if measures_filter(m, wanted)]
    return {**evaluation, "measurements": kept}


def _rows_matching(rows: list[dict[str, Any]], wanted: dict[str, str]) -> list[dict[str, Any]]:
    """Comparison rows on the system (an id prefix, as the filter means it) and device `wanted` names."""
    return [
        row
        for row in rows
        if (row.get("system_id") or "").startswith(wanted.get("system", ""))
        and row.get("device") == wanted.get("device", row.get("device"))
    ]


class PlotSource(AbstractContextManager["PlotSource"]):
    """Results to plot, wherever they are kept."""

    @abstractmethod
    def evaluation(self, selector: str) -> dict[str, Any]:
        """One succeeded evaluation with its raw latencies: by id or prefix, or the latest matching a
        filter (narrowed to the filter's scenario and batch size).

        Raises:
            UserError (field "ID|FILTER"): an unknown or unsucceeded evaluation, a filter nothing matches.
        """

    @abstractmethod
    def evaluations(self, selector: str, limit: int) -> tuple[list[dict[str, Any]], int]:
        """Succeeded evaluations: the ids given, or the latest of each setup matching a filter (at most
        `limit`); and how many more setups matched than were returned."""

    @abstractmethod
    def spans(self, evaluation_id: str) -> list[dict[str, Any]]:
        """Every span of the evaluation, ordered by start."""

    @abstractmethod
    def compare_rows(self, selector: str) -> list[dict[str, Any]]:
        """Comparison rows of the evaluations the ids name, or of those the filter matches."""

    def _latest_per_setup(
        self, found: Iterator[Mapping[str, Any]], wanted: dict[str, str], limit: int
    ) -> tuple[list[dict[str, Any]], int]:
        latest: dict[tuple[Any, ...], dict[str, Any]] = {}
        for evaluation in found:
            if matches_filter(evaluation, wanted):
                latest.setdefault(_setup(evaluation), _narrowed(evaluation, wanted))
        if not latest:
            described = ",".join(f"{k}={v}" for k, v in wanted.items())
            raise UserError(f"{SELECTOR}: no succeeded evaluation matches {described}", field=SELECTOR)
        chosen = list(latest.values())
        return chosen[:limit], max(len(chosen) - limit, 0)

    @staticmethod
    def _compare_filters(wanted: dict[str, str]) -> dict[str, Any]:
        return {
            "models": [wanted["model"]] if "model" in wanted else [],
            "frameworks": [wanted["framework"]] if "framework" in wanted else [],
            "batch_sizes": [int(wanted["batch_size"])] if "batch_size" in wanted else [],
            "scenarios": [wanted["scenario"]] if "scenario" in wanted else [],
        }


class StoreSource(PlotSource):
    """The store the settings name (MLSCOPE_STORE_URL)."""

    def __init__(self) -> None:
        from mlscope.contract.settings import load_settings
        from mlscope.store import open_store

        self.store: Store = open_store(load_settings().store_url)

    def __exit__(self, *exc: object) -> None:
        self.store.close()

    def evaluation(self, selector: str) -> dict[str, Any]:
        picked = pick_evaluation(self.store, selector, side=SELECTOR)
        return {**picked.evaluation, "measurements": picked.measurements()}

    def evaluations(self, selector: str, limit: int) -> tuple[list[dict[str, Any]], int]:
        if not is_filter(selector):
            return [self.evaluation(id) for id in split_ids(selector)], 0
        wanted = parse_filter(selector, SELECTOR)
        newest = newest_succeeded(self.store, wanted, scanned=_SCANNED, page_size=_PAGE)
        return self._latest_per_setup(newest, wanted, limit)

    def spans(self, evaluation_id: str) -> list[dict[str, Any]]:
        from mlscope.store import iter_spans

        return list(iter_spans(self.store, evaluation_id))

    def compare_rows(self, selector: str) -> list[dict[str, Any]]:
        if not is_filter(selector):
            ids = [self.store.resolve_id(id) for id in split_ids(selector)]
            return self.store.compare(ids=ids)
        wanted = parse_filter(selector, SELECTOR)
        return _rows_matching(self.store.compare(**self._compare_filters(wanted)), wanted)


class ApiSource(PlotSource):
    """A farm's API at `api_url`, read with the Python client (its token from the settings)."""

    def __init__(self, api_url: str) -> None:
        from mlscope.client import Client

        self.client: Client = Client(api_url=api_url)

    def __exit__(self, *exc: object) -> None:
        self.client.close()

    def _succeeded(self, id: str) -> dict[str, Any]:
        evaluation = self.client.evaluation(id, raw=True)
        if evaluation["status"] != "succeeded":
            raise UserError(
                f"{SELECTOR}: evaluation {evaluation['id']} is {evaluation['status']}: only succeeded "
                "evaluations can be plotted",
                field=SELECTOR,
            )
        return evaluation

    def _newest(self, wanted: dict[str, str]) -> Iterator[dict[str, Any]]:
        cursor = None
        for _ in range(_SCANNED // _PAGE):
            page = self.client.evaluations(
                model=wanted.get("model"),
                framework=wanted.get("framework"),
                status="succeeded",
                limit=_PAGE,
                cursor=cursor,
            )
            yield from page["items"]
            cursor = page.get("next_cursor")
            if cursor is None:
                return

    def evaluation(self, selector: str) -> dict[str, Any]:
        if not is_filter(selector.strip()):
            return self._succeeded(selector.strip())
        wanted = parse_filter(selector.strip(), SELECTOR)
        (latest,), _ = self._latest_per_setup(self._newest(wanted), wanted, 1)
        return _narrowed(self._succeeded(latest["id"]), wanted)

    def evaluations(self, selector: str, limit: int) -> tuple[list[dict[str, Any]], int]:
        if not is_filter(selector):
            return [self._succeeded(id) for id in split_ids(selector)], 0
        wanted = parse_filter(selector, SELECTOR)
        return self._latest_per_setup(self._newest(wanted), wanted, limit)

    def spans(self, evaluation_id: str) -> list[dict[str, Any]]:
        from mlscope.store.paging import SPAN_BATCH_SIZE

        spans: list[dict[str, Any]] = []
        while True:
            page = self.client.trace(evaluation_id, limit=SPAN_BATCH_SIZE, offset=len(spans))
            spans += page["spans"]
            if not page["spans"] or len(spans) >= page.get("total", len(spans)):
                return spans

    def compare_rows(self, selector: str) -> list[dict[str, Any]]:
        if not is_filter(selector):
            ids = [self._succeeded(id)["id"] for id in split_ids(selector)]
            rows: list[dict[str, Any]] = self.client.compare(ids=ids)["rows"]
            return rows
        wanted = parse_filter(selector, SELECTOR)
        return _rows_matching(self.client.compare(**self._compare_filters(wanted))["rows"], wanted)
