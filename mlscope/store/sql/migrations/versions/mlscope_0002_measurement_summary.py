"""Schema 2 of the measurements: the summary in columns of its own (sample_count, mean_ms, median_ms,
p90_ms, p95_ms, p99_ms, ci_low_ms, ci_high_ms, valid) and how the raw latencies are kept (raw_codec,
raw_count), backfilled for every stored row from its latency_ms and validity JSON
(the summary as this revision defines it, frozen here: the store's live records.summary_columns may
change with later schemas) and its raw bytes (0.1.0 packed them as int64 little-endian: 8 bytes each).

A column that exists already (a database made by a development build between 0.1.0 and this
revision) is kept as it is, and a row whose raw_codec is set already is not backfilled again.

Revision ID: mlscope_0002
Revises: mlscope_0001
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "mlscope_0002"
down_revision: str | None = "mlscope_0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Rows read and written per round trip: bounded memory whatever the store's size.
BATCH_ROWS = 500


def _new_columns() -> list[sa.Column[Any]]:
    """The columns this revision adds, new objects each time (a Column belongs to one table)."""
    return [
        sa.Column("raw_codec", sa.String(16), nullable=True),
        sa.Column("raw_count", sa.Integer(), nullable=True),
        sa.Column("sample_count", sa.Integer(), nullable=True),
        sa.Column("mean_ms", sa.Float(), nullable=True),
        sa.Column("median_ms", sa.Float(), nullable=True),
        sa.Column("p90_ms", sa.Float(), nullable=True),
        sa.Column("p95_ms", sa.Float(), nullable=True),
        sa.Column("p99_ms", sa.Float(), nullable=True),
        sa.Column("ci_low_ms", sa.Float(), nullable=True),
        sa.Column("ci_high_ms", sa.Float(), nullable=True),
        sa.Column("valid", sa.Boolean(), nullable=True),
    ]


NAMES = tuple(column.name for column in _new_columns())

_measurements = sa.table(
    "measurements",
    sa.column("id", sa.Integer()),
    sa.column("latency_ms", sa.JSON()),
    sa.column("validity", sa.JSON()),
    sa.column("latencies_ns", sa.LargeBinary()),
    *(sa.column(column.name, column.type) for column in _new_columns()),
)


def upgrade() -> None:
    bind = op.get_bind()
    existing = {column["name"] for column in sa.inspect(bind).get_columns("measurements")}
    with op.batch_alter_table("measurements") as batch:
        for column in _new_columns():
            if column.name not in existing:
                batch.add_column(column)
    backfilled = _backfill(bind)
    config = op.get_context().config
    if config is not None:
        config.attributes["mlscope.backfilled"] = config.attributes.get("mlscope.backfilled", 0) + backfilled


def _backfill(bind: sa.Connection) -> int:
    m = _measurements.c
    query = (
        sa.select(m.id, m.latency_ms, m.validity, sa.func.length(m.latencies_ns))
        .where(m.raw_codec.is_(None))
        .order_by(m.id)
        .limit(BATCH_ROWS)
    )
    update = (
        sa.update(_measurements)
        .where(m.id == sa.bindparam("row_id"))
        .values({name: sa.bindparam(f"new_{name}") for name in NAMES})
    )
    done, last = 0, None
    while True:
        rows = bind.execute(query if last is None else query.where(m.id > last)).all()
        if not rows:
            return done
        changes = []
        for row_id, latency_ms, validity, raw_bytes in rows:
            summary = _summary_columns(
                latency_ms if isinstance(latency_ms, dict) else {},
                validity if isinstance(validity, dict) else {},
            )
            values = {
                "raw_codec": None if raw_bytes is None else "int64le",
                "raw_count": None if raw_bytes is None else int(raw_bytes) // 8,
                **summary,
            }
            changes.append({"row_id": row_id, **{f"new_{name}": values[name] for name in NAMES}})
        bind.execute(update, changes)
        done += len(changes)
        last = rows[-1][0]


def _summary_columns(latency_ms: dict[str, Any], validity: dict[str, Any]) -> dict[str, Any]:
    def number(value: Any) -> float | None:
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None

    ci = latency_ms.get("median_ci")
    low, high = (ci[0], ci[1]) if isinstance(ci, list | tuple) and len(ci) == 2 else (None, None)
    count = latency_ms.get("count")
    return {
        "sample_count": int(count) if isinstance(count, int) and not isinstance(count, bool) else None,
        "mean_ms": number(latency_ms.get("mean")),
        "median_ms": number(latency_ms.get("median")),
        "p90_ms": number(latency_ms.get("p90")),
        "p95_ms": number(latency_ms.get("p95")),
        "p99_ms": number(latency_ms.get("p99")),
        "ci_low_ms": number(low),
        "ci_high_ms": number(high),
        "valid": bool(validity.get("valid")) if "valid" in validity else None,
    }


def downgrade() -> None:
    with op.batch_alter_table("measurements") as batch:
        for name in reversed(NAMES):
            batch.drop_column(name)
