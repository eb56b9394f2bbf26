"""Schema 8: one comparison row per workload. Two evaluations of one model name that measured different
workloads (another `--config`, input shape, rate or token count) were one row of the comparison table,
the later hiding the other. This revision adds `measurements.workload_key` (the workload the
measurement measured: contract.workload.workload_key of its evaluation and scenario) and
`evaluations.display_name` (the model with its options, `hf:gpt2[n_layer=2]`), backfills both for every
stored row from its evaluation's request and manifest, and makes `compare_keys` again with the
workload key in its primary key, counted afresh from the succeeded evaluations.

The backfill computes the key with the live contract.workload, not a copy frozen here: the key is only
of use if the rows stored before equal the rows this mlscope writes, key for key. Rows whose key is set
already (a database made by a development build) are not backfilled again; a column that exists
already is kept.

Revision ID: mlscope_0008
Revises: mlscope_0007
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

from mlscope.contract.workload import display_name, workload_key

revision: str = "mlscope_0008"
down_revision: str | None = "mlscope_0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Evaluations read and written per round trip: bounded memory whatever the store's size.
BATCH_EVALUATIONS = 500

_evaluations = sa.table(
    "evaluations",
    sa.column("id", sa.String()),
    sa.column("model_name", sa.String()),
    sa.column("model_version", sa.String()),
    sa.column("request", sa.JSON()),
    sa.column("manifest", sa.JSON()),
    sa.column("display_name", sa.String()),
)
_measurements = sa.table(
    "measurements",
    sa.column("id", sa.Integer()),
    sa.column("evaluation_id", sa.String()),
    sa.column("scenario", sa.String()),
    sa.column("workload_key", sa.String()),
)

# compare_keys counted from the succeeded evaluations, as schema 3's backfill with the workload key
# added to the key: per key the succeeded evaluations counted and the latest kept (finished last,
# then greatest id byte by byte). {key} is the key's columns, {collate} PostgreSQL's byte order.
_COUNT = """
INSERT INTO compare_keys ({key}, runs, latest_evaluation_id, latest_finished_at)
SELECT {key}, runs, evaluation_id, finished_at
FROM (
    SELECT e.model_name, e.framework_name, e.system_id, e.device, m.scenario, m.batch_size{measured},
           count(*) OVER key_window AS runs,
           e.id AS evaluation_id, e.finished_at,
           row_number() OVER (key_window ORDER BY e.finished_at DESC NULLS LAST, e.id{collate} DESC)
               AS rank
    FROM evaluations AS e JOIN measurements AS m ON m.evaluation_id = e.id
    WHERE e.status = 'succeeded'
    WINDOW key_window AS (
        PARTITION BY e.model_name, e.framework_name, e.system_id, e.device, m.scenario,
                     m.batch_size{measured}
    )
) AS ranked
WHERE rank = 1
"""
_KEY = ("model_name", "framework_name", "system_id", "device", "scenario", "batch_size")


def _compare_keys(with_workload: bool) -> None:
    """Makes `compare_keys` (schema 8's, or schema 3's without the workload key) and counts it."""
    key = [*_KEY, "workload_key"] if with_workload else list(_KEY)
    op.create_table(
        "compare_keys",
        sa.Column("model_name", sa.String(255), nullable=False),
        sa.Column("framework_name", sa.String(64), nullable=False),
        sa.Column("system_id", sa.String(128), nullable=False),
        sa.Column("device", sa.String(64), nullable=False),
        sa.Column("scenario", sa.String(32), nullable=False),
        sa.Column("batch_size", sa.Integer(), nullable=False),
        *([sa.Column("workload_key", sa.String(16), nullable=False)] if with_workload else []),
        sa.Column("runs", sa.Integer(), nullable=False),
        sa.Column("latest_evaluation_id", sa.String(64), nullable=False),
        sa.Column("latest_finished_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["latest_evaluation_id"], ["evaluations.id"]),
        sa.PrimaryKeyConstraint(*key),
    )
    bind = op.get_bind()
    collate = ' COLLATE "C"' if bind.dialect.name == "postgresql" else ""
    measured = ", m.workload_key" if with_workload else ""
    bind.execute(sa.text(_COUNT.format(key=", ".join(key), measured=measured, collate=collate)))


def _backfill(bind: sa.Connection) -> int:
    """Sets display_name and every measurement's workload_key, a batch of evaluations at a time (in
    id order); returns how many measurements were keyed."""
    e, m = _evaluations.c, _measurements.c
    query = (
        sa.select(e.id, e.model_name, e.model_version, e.request, e.manifest)
        .order_by(e.id)
        .limit(BATCH_EVALUATIONS)
    )
    name_update = sa.update(_evaluations).where(e.id == sa.bindparam("row_id"))
    key_update = sa.update(_measurements).where(m.id == sa.bindparam("row_id"))
    keyed, last = 0, None
    while True:
        rows = bind.execute(query if last is None else query.where(e.id > last)).all()
        if not rows:
            return keyed
        views: dict[str, dict[str, Any]] = {
            id: {
                "model": {"name": name, "version": version},
                "request": request if isinstance(request, dict) else {},
                "manifest": manifest if isinstance(manifest, dict) else {},
            }
            for id, name, version, request, manifest in rows
        }
        names = [{"row_id": id, "new_display_name": display_name(view)} for id, view in views.items()]
        bind.execute(name_update.values(display_name=sa.bindparam("new_display_name")), names)
        unkeyed = bind.execute(
            sa.select(m.id, m.evaluation_id, m.scenario).where(
                m.evaluation_id.in_(list(views)), m.workload_key.is_(None)
            )
        ).all()
        if unkeyed:
            keys = [
                {"row_id": row_id, "new_workload_key": workload_key(views[evaluation_id], scenario)}
                for row_id, evaluation_id, scenario in unkeyed
            ]
            bind.execute(key_update.values(workload_key=sa.bindparam("new_workload_key")), keys)
            keyed += len(keys)
        last = rows[-1][0]


def upgrade() -> None:
    bind = op.get_bind()
    inspector = sa.inspect(bind)
    for table, column in (
        ("evaluations", sa.Column("display_name", sa.String(), nullable=True)),
        ("measurements", sa.Column("workload_key", sa.String(16), nullable=True)),
    ):
        if column.name not in {c["name"] for c in inspector.get_columns(table)}:
            with op.batch_alter_table(table) as batch:
                batch.add_column(column)
    _backfill(bind)
    op.drop_table("compare_keys")
    _compare_keys(with_workload=True)


def downgrade() -> None:
    op.drop_table("compare_keys")
    _compare_keys(with_workload=False)
    with op.batch_alter_table("measurements") as batch:
        batch.drop_column("workload_key")
    with op.batch_alter_table("evaluations") as batch:
        batch.drop_column("display_name")
