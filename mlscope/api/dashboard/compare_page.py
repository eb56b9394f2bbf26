"""/compare: models × frameworks × systems side by side. The form's state is the URL's query (so a
comparison is shared by sharing its URL), the rows are the ones GET /api/v1/compare answers for the
same query (one function computes both), and the CSV link is that API's CSV: the download matches the
JSON by construction.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from flask import Blueprint, render_template, request, url_for

from mlscope.api.compare import comparison_rows
from mlscope.api.context import context
from mlscope.api.dashboard.blueprint import PageError, parse_query
from mlscope.api.dashboard.figures import comparison_chart
from mlscope.api.problems import ApiProblem
from mlscope.api.schemas import CompareQuerySchema
from mlscope.contract.system_ids import machine_id, stack_id
from mlscope.runtime.frameworks import FRAMEWORKS

__all__ = ["COMPARE_LISTS", "compare", "register"]

# The query fields that hold lists: a multi-select repeats them, a text field separates them by commas.
COMPARE_LISTS = ("ids", "models", "frameworks", "systems", "batch_sizes", "scenarios", "price_per_hour")
_KEPT = (*COMPARE_LISTS, "since", "until")


def _api_query() -> dict[str, str]:
    """The page's query as the JSON API reads it: each list one comma-separated value."""
    kept: dict[str, str] = {}
    for key in _KEPT:
        values = [v.strip() for v in request.args.getlist(key) if v.strip()]
        if values:
            kept[key] = ",".join(values)
    return kept


def compare() -> str:
    """The comparison page: the form, the grouped bars, the table and the CSV link."""
    query = parse_query(CompareQuerySchema(), lists=COMPARE_LISTS)
    query.pop("format", None)
    try:
        rows = comparison_rows(query)
    except ApiProblem as problem:  # an id that matches no evaluation: the page's filter is at fault
        raise PageError(400, problem.detail, problem.errors) from None
    chosen = _api_query()
    api_url, page_url = url_for("compare.Compare"), url_for("dashboard.compare")
    selected = {key: set(value.split(",")) for key, value in chosen.items()}
    return render_template(
        "dashboard/compare.html",
        rows=rows,
        chart=comparison_chart(rows),
        chosen=chosen,
        selected=selected,
        frameworks=sorted(FRAMEWORKS),
        machines=_machines(),
        csv_url=f"{api_url}?{urlencode({**chosen, 'format': 'csv'})}",
        json_url=f"{api_url}?{urlencode(chosen)}" if chosen else api_url,
        share_url=f"{page_url}?{urlencode(chosen)}" if chosen else page_url,
    )


def _machines() -> list[dict[str, Any]]:
    """The stored systems as the form offers them, grouped by machine and software stack
    (contract.system_ids; docs/history.md): one group per pair, {"label", "systems": [{"id",
    "label"}]}, the systems of one machine measured by several hosts, agents or containers together."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for system in context().store.list_systems():
        agent = (system.get("agent") or {}).get("id")
        label = " · ".join(str(part) for part in (agent, system.get("hostname")) if part)
        pair = (system.get("machine_id") or machine_id(system), system.get("stack_id") or stack_id(system))
        groups.setdefault(pair, []).append(
            {"id": system["id"], "label": f"{label} ({system['id'][:8]})" if label else system["id"]}
        )
    return [
        {"label": f"machine {machine[:8]} · stack {stack[:8]}", "systems": systems}
        for (machine, stack), systems in sorted(groups.items())
    ]


def register(pages: Blueprint) -> None:
    """Adds this module's pages to the dashboard's blueprint (mlscope.api.dashboard registers them)."""
    pages.add_url_rule("/compare", view_func=compare)
