"""The dashboard's list pages: the overview (the farm's live agents and queues, recent evaluations),
the evaluations with their filters, the model catalogue and the submit form.

Each reads the store and the registries through the same ApiContext, and the same listing functions,
as the JSON API; filters are loaded by the API's own query schemas.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlencode

from flask import Blueprint, render_template, request

from mlscope.api.catalog import model_listing, queue_listing
from mlscope.api.context import context
from mlscope.api.dashboard.blueprint import PageError, parse_query, status_view
from mlscope.api.evaluations import list_filters
from mlscope.api.problems import ApiProblem
from mlscope.api.schemas import ListQuerySchema, ModelQuerySchema
from mlscope.api.submit import LiveAgents
from mlscope.contract.names import STATUSES, TRACE_LEVELS
from mlscope.contract.result import result_validity
from mlscope.contract.workload import display_name
from mlscope.runtime.frameworks import FRAMEWORKS

__all__ = ["MEDIANS_SHOWN", "MODELS_PER_PAGE", "RECENT_EVALUATIONS", "register"]

RECENT_EVALUATIONS = 10
MODELS_PER_PAGE = 100
_LIST_FILTERS = ("model", "framework", "system", "status")
# The list's median column names at most this many points of an evaluation, then how many more it has.
MEDIANS_SHOWN = 4


def _medians(measurements: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """An evaluation's median latency per point, as the list's median column shows it: each point's
    batch size (and scenario, when it has several) and median in ms, an invalid point marked so."""
    scenarios = {m.get("scenario") for m in measurements}
    shown = []
    for measurement in measurements[:MEDIANS_SHOWN]:
        batch = f"batch {measurement.get('batch_size')}"
        shown.append(
            {
                "label": batch if len(scenarios) == 1 else f"{measurement.get('scenario')} {batch}",
                "median": (measurement.get("latency_ms") or {}).get("median"),
                "valid": (measurement.get("validity") or {}).get("valid") is True,
            }
        )
    return {"points": shown, "more": max(0, len(measurements) - MEDIANS_SHOWN)}


def _validity_view(evaluation: Mapping[str, Any]) -> dict[str, Any]:
    """The list's validity column: "valid", "valid" with the reasons it is doubtful, or "NOT VALID"
    with why (every point invalid, parity different); "–" for an evaluation that has not succeeded
    (its status says why)."""
    if evaluation.get("status") != "succeeded":
        return {"label": "–", "css": "plain", "reasons": []}
    validity = result_validity(evaluation)
    if not validity["valid"]:
        return {"label": "NOT VALID", "css": "bad", "reasons": validity["reasons"]}
    return {"label": "valid", "css": "warn" if validity["reasons"] else "ok", "reasons": validity["reasons"]}


def _rows(evaluations: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Evaluations as the list tables show them (without their measurements, which can be many)."""
    rows = []
    for evaluation in evaluations:
        system = evaluation.get("system") or {}
        agent = (system.get("agent") or {}).get("id")
        rows.append(
            {
                "id": evaluation["id"],
                "model": display_name(evaluation),
                "framework": (evaluation.get("framework") or {}).get("name"),
                "system": agent or system.get("hostname") or system.get("id") or "",
                "device": evaluation.get("device"),
                "points": len(evaluation.get("measurements") or []),
                "medians": _medians(evaluation.get("measurements") or []),
                "validity": _validity_view(evaluation),
                "created_at": evaluation.get("created_at"),
                "status": status_view(evaluation),
            }
        )
    return rows


def _system_label(system: dict[str, Any]) -> str:
    """`agent-1 (1a2b3c4d)`: its agent (or host) and its id's start, as the system filter lists it."""
    return f"{(system.get('agent') or {}).get('id') or system.get('hostname')} ({system['id'][:8]})"


def _agents() -> list[dict[str, Any]]:
    now = time.time()
    return [
        {
            **agent.to_dict(),
            "seconds_since_heartbeat": max(0.0, now - agent.heartbeat_at),
        }
        for agent in context().agents.live()
    ]


def overview() -> str:
    """The farm at a glance: live agents with capabilities and current job, queue depths, and the
    latest evaluations."""
    store = context().store
    try:
        queues: list[dict[str, Any]] | None = queue_listing()
        queue_error = None
    except ApiProblem as problem:  # the broker is down: the rest of the page still says something
        queues, queue_error = None, problem.detail
    recent, _ = store.page_evaluations(limit=RECENT_EVALUATIONS)
    counts = {status: store.count_evaluations(status=status) for status in STATUSES}
    return render_template(
        "dashboard/overview.html",
        agents=_agents(),
        queues=queues,
        queue_error=queue_error,
        rows=_rows(recent),
        counts=counts,
    )


def evaluations() -> str:
    """Evaluations, newest first, filtered by model, framework, system and status; queued and running
    rows follow their status live (dashboard.js polls the JSON API)."""
    query = parse_query(ListQuerySchema())
    store = context().store
    filters = list_filters(query)
    limit, offset = query["limit"], query["offset"]
    items, _ = store.page_evaluations(**filters, limit=limit, offset=offset)
    total = store.count_evaluations(**filters)
    kept = {key: request.args[key] for key in (*_LIST_FILTERS, "since", "until") if request.args.get(key)}

    def page_url(start: int) -> str:
        return "?" + urlencode({**kept, "limit": limit, "offset": start})

    return render_template(
        "dashboard/evaluations.html",
        rows=_rows(items),
        total=total,
        limit=limit,
        offset=offset,
        filters=kept,
        statuses=STATUSES,
        frameworks=sorted(FRAMEWORKS),
        systems=[(system["id"], _system_label(system)) for system in store.list_systems()],
        previous_url=page_url(max(0, offset - limit)) if offset > 0 else None,
        next_url=page_url(offset + limit) if offset + limit < total else None,
    )


def models() -> str:
    """The model catalogue, with GET /api/v1/models's filters (task, framework, family, search)."""
    query = parse_query(ModelQuerySchema(), own=("page",))
    page = request.args.get("page", "1")
    if not page.isdigit() or int(page) < 1:
        raise PageError(400, f"page: {page!r} is not a page number", {"page": ["must be an integer ≥ 1"]})
    number = int(page)
    listed = model_listing(query)
    start = (number - 1) * MODELS_PER_PAGE
    kept = {
        key: request.args[key] for key in ("task", "framework", "family", "search") if request.args.get(key)
    }
    more = start + MODELS_PER_PAGE < len(listed)
    return render_template(
        "dashboard/models.html",
        models=listed[start : start + MODELS_PER_PAGE],
        total=len(listed),
        start=start,
        filters=kept,
        tasks=sorted({m["task"] for m in model_listing({})}),
        frameworks=sorted(FRAMEWORKS),
        previous_url="?" + urlencode({**kept, "page": number - 1}) if number > 1 else None,
        next_url="?" + urlencode({**kept, "page": number + 1}) if more else None,
    )


def _framework_choices(live: LiveAgents) -> list[dict[str, Any]]:
    """The frameworks the form offers: those live agents serve first (most agents first), then the
    others, each with the live agents that have it."""
    choices = [
        {"name": name, "served_by": sorted(agent.id for agent in live.agents if name in agent.frameworks)}
        for name in FRAMEWORKS
    ]
    return sorted(choices, key=lambda c: (not c["served_by"], -len(c["served_by"]), c["name"]))


def submit() -> str:
    """The submit form: dashboard.js posts it, with the bearer token the user typed, to
    POST /api/v1/evaluations, which validates it; field errors come back from its problem document.

    The frameworks live agents serve come first and the first of them is chosen, unless the query
    names one; the others are marked as served by no live agent, and the page says so while one is
    chosen (dashboard.js asks again before sending a job no live agent can run)."""
    ctx = context()
    manifests = sorted(name for name, origin, _ in ctx.models.listing() if origin == "manifest")
    live = LiveAgents.read(ctx.live)
    choices = _framework_choices(live)
    asked = request.args.get("framework", "")
    chosen = asked if asked in FRAMEWORKS else choices[0]["name"]
    return render_template(
        "dashboard/submit.html",
        models=manifests,
        frameworks=choices,
        registry_error=live.error,
        trace_levels=TRACE_LEVELS,
        model=request.args.get("model", ""),
        framework=chosen,
        chosen_served=next(c["served_by"] for c in choices if c["name"] == chosen),
    )


def register(pages: Blueprint) -> None:
    """Adds this module's pages to the dashboard's blueprint (mlscope.api.dashboard registers them)."""
    pages.add_url_rule("/", view_func=overview)
    pages.add_url_rule("/evaluations", view_func=evaluations)
    pages.add_url_rule("/models", view_func=models)
    pages.add_url_rule("/submit", view_func=submit)
