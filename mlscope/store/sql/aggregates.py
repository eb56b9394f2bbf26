"""The SQL of the store's aggregations, run where the data is: the comparison table (from the
`compare_keys` summary, or counted by GROUP BY when a filter cuts across keys), the upkeep
of `compare_keys` as evaluations succeed, and the layer breakdown's totals, all on
the measurements' summary columns and SQLAlchemy's JSON operators (SQLite and PostgreSQL alike).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Unpack

from sqlalchemy import (
    CTE,
    ColumnElement,
    Insert,
    Row,
    Select,
    Subquery,
    Text,
    and_,
    case,
    cast,
    func,
    insert,
    or_,
    select,
)
from sqlalchemy.engine import Connection
from sqlalchemy.orm import aliased

from mlscope.contract.workload import workload_key
from mlscope.store.records import CompareFilter, LayerTotal, MeasurementRecord, compare_row, workload_view
from mlscope.store.sql.engine import upsert_into
from mlscope.store.sql.tables import CompareKeyRow, EvaluationRow, MeasurementRow, SpanRow, SystemRow

__all__ = [
    "JSONTexts",
    "backfill_compare_keys",
    "compare_key_rows",
    "compare_query",
    "compare_result",
    "layer_totals",
    "upsert_compare_key_rows",
]

_KEYS = CompareKeyRow.__table__.c
_KEY_COLUMNS = (
    "model_name",
    "framework_name",
    "system_id",
    "device",
    "scenario",
    "batch_size",
    "workload_key",
)


def _bytewise(expression: Any, dialect: str) -> Any:
    """`expression` compared by code point, as Python compares strings: PostgreSQL's collation "C";
    SQLite's default collation (BINARY) already is."""
    return expression.collate("C") if dialect == "postgresql" else expression


def _in(column: Any, values: Sequence[Any]) -> list[ColumnElement[bool]]:
    return [column.in_(values)] if values else []


# ----- the comparison table ------------------------------------------------------------------------


def _summary_keys(where: CompareFilter) -> Subquery:
    """The keys `compare_keys` holds for filters on key columns only: one row per key, O(keys)."""
    conditions = [
        *_in(_KEYS.model_name, where.models),
        *_in(_KEYS.framework_name, where.frameworks),
        *_in(_KEYS.system_id, where.system_ids),
        *_in(_KEYS.scenario, where.scenarios),
        *_in(_KEYS.batch_size, where.batch_sizes),
    ]
    return (
        select(
            *(_KEYS[name] for name in _KEY_COLUMNS),
            _KEYS.runs,
            _KEYS.latest_evaluation_id.label("evaluation_id"),
        )
        .where(*conditions)
        .subquery("keys")
    )


def _conditions(where: CompareFilter, e: Any, m: Any) -> list[ColumnElement[bool]]:
    """The succeeded measurements `where` draws on, on evaluations `e` joined with measurements `m`."""
    conditions = [
        e.status == "succeeded",
        *_in(e.id, where.ids),
        *_in(e.model_name, where.models),
        *_in(e.framework_name, where.frameworks),
        *_in(e.system_id, where.system_ids),
        *_in(m.scenario, where.scenarios),
        *_in(m.batch_size, where.batch_sizes),
    ]
    if where.since is not None:
        conditions.append(e.created_at >= where.since)
    if where.until is not None:
        conditions.append(e.created_at < where.until)
    return conditions


def _counted_keys(where: CompareFilter, dialect: str) -> CTE:
    """Per key of the measurements `where` draws on: how many (`runs`), and the latest one's evaluation
    (`evaluation_id`: the greatest finished_at, then the greatest id by code point) and finish.

    PostgreSQL: one GROUP BY pass counts and finds the latest finish, and each key's latest evaluation
    is then looked up by its finish (indexed). Ranking every row with a window instead sorts them
    all, which at a million evaluations is several times slower. SQLite, which keeps no
    statistics unless told to ANALYZE, looks the latest up through a listing index instead: there
    the window is the faster, and is kept.
    """
    if dialect != "postgresql":
        return _ranked_keys(where, dialect)
    e, m = EvaluationRow, MeasurementRow
    key = (e.model_name, e.framework_name, e.system_id, e.device, m.scenario, m.batch_size, m.workload_key)
    counted = (
        select(*key, func.count().label("runs"), func.max(e.finished_at).label("finished_at"))
        .join_from(e, m, m.evaluation_id == e.id)
        .where(*_conditions(where, e, m))
        .group_by(*key)
        .subquery("counted")
    )
    e2, m2 = aliased(EvaluationRow, name="tied"), aliased(MeasurementRow, name="tied_measurements")
    latest = (
        select(func.max(_bytewise(e2.id, dialect)))
        .join_from(
            e2,
            m2,
            and_(
                m2.evaluation_id == e2.id,
                m2.scenario == counted.c.scenario,
                m2.batch_size == counted.c.batch_size,
                m2.workload_key == counted.c.workload_key,
            ),
        )
        .where(
            e2.finished_at == counted.c.finished_at,
            e2.model_name == counted.c.model_name,
            e2.framework_name == counted.c.framework_name,
            e2.system_id == counted.c.system_id,
            e2.device == counted.c.device,
            *_conditions(where, e2, m2),
        )
        .scalar_subquery()
    )
    # On PostgreSQL an id again (not a "C" text), which the primary key's index can look up.
    evaluation_id = latest.collate("default") if dialect == "postgresql" else latest
    keys = select(
        *(counted.c[name] for name in _KEY_COLUMNS),
        counted.c.runs,
        evaluation_id.label("evaluation_id"),
        counted.c.finished_at,
    ).cte("keys")
    # Materialized: computed once and joined as the few rows it is. Inlined, PostgreSQL estimated one
    # row from it and joined by scanning every evaluation and measurement.
    return keys.prefix_with("MATERIALIZED")


def _ranked_keys(where: CompareFilter, dialect: str) -> CTE:
    """`_counted_keys` by ranking every measurement of a key (rank 1: the greatest finished_at, then
    id) and counting them with window functions."""
    e, m = EvaluationRow, MeasurementRow
    partition = (
        e.model_name,
        e.framework_name,
        e.system_id,
        e.device,
        m.scenario,
        m.batch_size,
        m.workload_key,
    )
    latest_first = (e.finished_at.desc().nulls_last(), _bytewise(e.id, dialect).desc())
    ranked = (
        select(
            *partition,
            func.count().over(partition_by=partition).label("runs"),
            e.id.label("evaluation_id"),
            e.finished_at.label("finished_at"),
            func.row_number().over(partition_by=partition, order_by=latest_first).label("rank"),
        )
        .join_from(e, m, m.evaluation_id == e.id)
        .where(*_conditions(where, e, m))
        .subquery("ranked")
    )
    return (
        select(
            *(ranked.c[name] for name in _KEY_COLUMNS),
            ranked.c.runs,
            ranked.c.evaluation_id,
            ranked.c.finished_at,
        )
        .where(ranked.c.rank == 1)
        .cte("keys")
    )


def compare_query(where: CompareFilter, dialect: str) -> Select[Unpack[tuple[Any, ...]]]:
    """The comparison rows for `where`, in the table's order, for `compare_result`.

    Filters on key columns alone read the `compare_keys` summary; ids and times (which cut across
    keys and change their counts) count the measurements they select (`_counted_keys`).
    """
    keys = (
        _counted_keys(where, dialect)
        if where.ids or where.since is not None or where.until is not None
        else _summary_keys(where)
    )
    e, m, s = EvaluationRow, MeasurementRow, SystemRow
    system_id = keys.c.system_id
    return (
        select(
            keys.c.model_name,
            e.display_name,
            keys.c.framework_name,
            e.framework_version,
            system_id,
            _json_text(s.data["hostname"]),
            _json_text(s.data[("agent", "id")]),
            _json_text(s.data["instance_type"]),
            _json_text(s.data[("cpu", "model")]),
            keys.c.device,
            keys.c.scenario,
            keys.c.batch_size,
            m.median_ms,
            m.p90_ms,
            m.p99_ms,
            m.ci_low_ms,
            m.ci_high_ms,
            m.throughput,
            m.sample_count,
            m.valid,
            _json_text(m.validity["reasons"]),
            keys.c.runs,
            keys.c.evaluation_id,
            e.finished_at,
            # What a row shows of the evaluation's result sections; compare_row turns a different
            # parity into an invalid row.
            _json_text(e.accuracy["top1"]),
            _json_text(e.accuracy["top5"]),
            _json_text(e.parity["verdict"]),
            _json_text(e.parity["against"]),
            # The server scenario's rates, from the measurement's load section (None without one).
            _json_text(m.extra[("load", "target_qps")]),
            _json_text(m.extra[("load", "achieved_qps")]),
            _json_text(m.extra[("load", "search", "max_qps")]),
            # The cost section whole (None without one): as an object its numbers come back as
            # written, where SQLite would give a scalar path's float to 15 digits only.
            _json_text(m.extra["cost"]),
            keys.c.workload_key,
        )
        .select_from(keys)
        .join(e, e.id == keys.c.evaluation_id)
        .join(
            m,
            and_(
                m.evaluation_id == keys.c.evaluation_id,
                m.scenario == keys.c.scenario,
                m.batch_size == keys.c.batch_size,
            ),
        )
        .outerjoin(s, s.id == system_id)
        # records.compare_rows' order: model, display name, scenario, batch size, fastest first
        # (unmeasured last), then framework, system, device and workload, every string by code point.
        .order_by(
            _bytewise(keys.c.model_name, dialect),
            _bytewise(func.coalesce(e.display_name, keys.c.model_name), dialect),
            _bytewise(keys.c.scenario, dialect),
            keys.c.batch_size,
            m.median_ms.is_(None),
            m.median_ms,
            _bytewise(keys.c.framework_name, dialect),
            _bytewise(func.coalesce(system_id, ""), dialect),
            _bytewise(keys.c.device, dialect),
            _bytewise(keys.c.workload_key, dialect),
        )
    )


def _json_text(value: Any) -> Any:
    # JSON values come back as their text, parsed once per distinct text by JSONTexts: a table of
    # thousands of rows repeats a few hostnames and reasons.
    return cast(value, Text)


class JSONTexts(dict[str | None, Any]):
    """The values of JSON texts, each text parsed once."""

    def __missing__(self, text: str | None) -> Any:
        value = self[text] = None if text is None else json.loads(text)
        return value


def compare_result(row: Row[Unpack[tuple[Any, ...]]], texts: JSONTexts) -> dict[str, Any]:
    """One row of `compare_query` as records.compare_row formats it, its JSON texts read through
    `texts`."""
    model, display_name, *rest = tuple(row)
    values = (model, *rest)
    (model, framework, framework_version, system_id, hostname, agent_id, instance_type) = values[:7]
    cpu, device, scenario = values[7:10]
    (batch_size, median, p90, p99, ci_low, ci_high, throughput, count, valid, reasons) = values[10:20]
    runs, evaluation_id, finished_at = values[20:23]
    top1, top5, verdict, against = (texts[text] for text in values[23:27])
    target_qps, achieved_qps, max_qps = (texts[text] for text in values[27:30])
    cost, workload = texts[values[30]], values[31]
    return compare_row(
        model=model,
        # NULL only for a row written between its evaluation's insert and schema 8's backfill.
        display_name=display_name or model,
        workload_key=workload,
        framework=framework,
        framework_version=framework_version,
        system_id=system_id,
        system={
            "hostname": texts[hostname],
            "agent": {"id": texts[agent_id]},
            "instance_type": texts[instance_type],
            "cpu": {"model": texts[cpu]},
        },
        device=device,
        measurement={
            "scenario": scenario,
            "batch_size": batch_size,
            "latency_ms": {
                "median": median,
                "p90": p90,
                "p99": p99,
                "median_ci": [ci_low, ci_high],
                "count": count,
            },
            "throughput": throughput,
            "validity": {"valid": valid, "reasons": texts[reasons]},
            "load": {"target_qps": target_qps, "achieved_qps": achieved_qps, "search": {"max_qps": max_qps}},
            "cost": cost,
        },
        runs=runs,
        evaluation_id=evaluation_id,
        finished_at=None if finished_at is None else finished_at.isoformat(),
        accuracy={"top1": top1, "top5": top5},
        parity={"verdict": verdict, "against": against},
    )


def compare_key_rows(
    evaluation: EvaluationRow, measurements: Sequence[MeasurementRecord]
) -> list[dict[str, Any]]:
    """The `compare_keys` rows a newly succeeded evaluation's measurements add (for
    `upsert_compare_key_rows`): one more run per key, the evaluation as the key's latest.

    Keys come in one order (scenario, batch size), so concurrent finishers of one model never lock
    them crosswise.
    """
    workload = workload_view(
        evaluation.model_name, evaluation.model_version, evaluation.request, evaluation.manifest
    )
    return [
        {
            "model_name": evaluation.model_name,
            "framework_name": evaluation.framework_name,
            "system_id": evaluation.system_id,
            "device": evaluation.device,
            "scenario": m.scenario,
            "batch_size": m.batch_size,
            "workload_key": workload_key(workload, m.scenario),
            "runs": 1,
            "latest_evaluation_id": evaluation.id,
            "latest_finished_at": evaluation.finished_at,
        }
        for m in sorted(measurements, key=lambda m: (m.scenario, m.batch_size))
    ]


def upsert_compare_key_rows(dialect: str) -> Insert:
    """The statement that adds rows (distinct keys, each with its `runs` and latest evaluation; run
    with the rows as parameters, many at once) to `compare_keys`: runs add up, and the latest stays
    the one that finished last (then: greatest id).

    The rows are parameters, not values compiled into the statement: it is compiled once and cached,
    which would otherwise be most of what a bulk import of many keys spends."""
    statement = upsert_into(dialect, CompareKeyRow.__table__)
    new = statement.excluded
    newer = or_(
        new.latest_finished_at > _KEYS.latest_finished_at,
        and_(
            new.latest_finished_at == _KEYS.latest_finished_at,
            _bytewise(new.latest_evaluation_id, dialect) > _bytewise(_KEYS.latest_evaluation_id, dialect),
        ),
    )
    return statement.on_conflict_do_update(
        index_elements=list(_KEY_COLUMNS),
        set_={
            "runs": _KEYS.runs + new.runs,
            "latest_evaluation_id": case((newer, new.latest_evaluation_id), else_=_KEYS.latest_evaluation_id),
            "latest_finished_at": case((newer, new.latest_finished_at), else_=_KEYS.latest_finished_at),
        },
    )


def backfill_compare_keys(dialect: str) -> Insert:
    """The statement that fills an empty `compare_keys` from the succeeded evaluations stored: what
    a deleting prune runs to count again what is left (the table must be empty)."""
    keys = _counted_keys(CompareFilter(), dialect)
    latest = select(
        *(keys.c[name] for name in _KEY_COLUMNS), keys.c.runs, keys.c.evaluation_id, keys.c.finished_at
    )
    return insert(CompareKeyRow).from_select(
        [*_KEY_COLUMNS, "runs", "latest_evaluation_id", "latest_finished_at"], latest
    )


# ----- the layer breakdown -------------------------------------------------------------------------


def layer_totals(
    connection: Connection, evaluation_id: str, *, level: str, group_by: str
) -> tuple[list[LayerTotal], int | None]:
    """Store._layer_totals as two GROUP BYs: the spans of `level` per group (records.span_group_key:
    the name, or attributes.layer_type falling back to it), and the MODEL-level total."""
    duration = func.sum(SpanRow.end_ns - SpanRow.start_ns)
    key: Any = SpanRow.name
    if group_by == "layer_type":
        key = func.coalesce(SpanRow.attributes["layer_type"].as_string(), SpanRow.name)
    groups = (
        select(key.label("key"), func.count(), duration)
        .where(SpanRow.evaluation_id == evaluation_id, SpanRow.level == level)
        .group_by(key)
    )
    totals = [LayerTotal(str(k), int(calls), int(total)) for k, calls, total in connection.execute(groups)]
    model = select(func.count(), duration).where(
        SpanRow.evaluation_id == evaluation_id, SpanRow.level == "MODEL"
    )
    spans, model_total = connection.execute(model).one()
    return totals, int(model_total) if spans else None
