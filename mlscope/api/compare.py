"""/api/v1/compare: the side-by-side table of succeeded evaluations, as JSON or CSV (streamed)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from flask import Response, request
from flask.views import MethodView

from mlscope.api import diff
from mlscope.api.blueprint import ApiBlueprint
from mlscope.api.context import context
from mlscope.api.problems import ApiProblem
from mlscope.api.schemas import CompareQuerySchema, CompareSchema
from mlscope.api.streams import CSV_MIMETYPE, csv_lines
from mlscope.contract.cost import parse_prices
from mlscope.store.errors import AmbiguousEvaluationId, EvaluationNotFound
from mlscope.store.records import COMPARE_COLUMNS

__all__ = ["blp", "comparison_rows", "rows_to_csv"]

blp = ApiBlueprint(
    "compare",
    __name__,
    url_prefix="/api/v1",
    description="Compare evaluations across models, frameworks and systems.",
)
blp.register_blueprint(diff.blp)


def _cells(rows: Iterable[dict[str, Any]]) -> Iterator[list[Any]]:
    return ([row.get(column) for column in COMPARE_COLUMNS] for row in rows)


def rows_to_csv(rows: Sequence[dict[str, Any]]) -> str:
    """The comparison as CSV: a header of COMPARE_COLUMNS, `reasons` joined by "; "."""
    return "".join(csv_lines(COMPARE_COLUMNS, _cells(rows)))


def _resolve(prefixes: Sequence[str]) -> list[str]:
    store = context().store
    resolved = []
    for index, prefix in enumerate(prefixes):
        try:
            resolved.append(store.resolve_id(prefix))
        except (EvaluationNotFound, AmbiguousEvaluationId) as exc:
            raise ApiProblem.for_field(422, f"ids.{index}", exc.message) from None
    return resolved


def comparison_rows(query: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows GET /compare answers for `query` (loaded by CompareQuerySchema): the store's comparison,
    priced. The dashboard's comparison page draws these same rows.

    Raises:
        ApiProblem: 422 naming the id that matches no evaluation (or several).
        UserError: naming a malformed price.
    """
    prices = parse_prices(query.get("price_per_hour") or (), "price_per_hour")
    rows = context().store.compare(
        ids=_resolve(query.get("ids") or ()),
        models=query.get("models") or (),
        frameworks=query.get("frameworks") or (),
        system_ids=query.get("systems") or (),
        batch_sizes=query.get("batch_sizes") or (),
        scenarios=query.get("scenarios") or (),
        since=query.get("since"),
        until=query.get("until"),
    )
    return prices.price_rows(rows)


def _wants_csv(query: dict[str, Any]) -> bool:
    if "format" in query:
        return bool(query["format"] == "csv")
    return request.accept_mimetypes.best_match(["application/json", CSV_MIMETYPE]) == CSV_MIMETYPE


@blp.route("/compare")
class Compare(MethodView):
    @blp.arguments(CompareQuerySchema, location="query")
    @blp.response(200, CompareSchema)
    @blp.alt_response(
        200,
        success=True,
        content_type=CSV_MIMETYPE,
        schema={"type": "string"},
        description="format=csv or Accept: text/csv: a header row of the columns, then one line per row",
    )
    def get(self, query: dict[str, Any]) -> Any:
        """Compare succeeded evaluations side by side

        One row per (model, framework, system, device, scenario, batch size, workload), from the
        latest evaluation of each, the model also by its display name (`hf:gpt2[n_layer=2]`); every
        filter narrows the evaluations drawn on. `price_per_hour` prices
        the rows recorded without a price (their cost columns are null otherwise).
        """
        rows = comparison_rows(query)
        if _wants_csv(query):
            return Response(csv_lines(COMPARE_COLUMNS, _cells(rows)), mimetype=CSV_MIMETYPE)
        return {"columns": list(COMPARE_COLUMNS), "rows": rows}
