"""Schema 3: aggregation in the database. The table `compare_keys` (per model, framework, system,
device, scenario and batch size: how many succeeded evaluations measured it and which finished last),
kept by every finish, so that an unfiltered comparison reads one row per key instead of every
measurement; filled here once from the succeeded evaluations stored. And the indexes the listings,
history series and id prefixes read: (model_name, framework_name, created_at, id) on evaluations, and
on PostgreSQL a varchar_pattern_ops index on evaluations.id for LIKE 'prefix%'.

Revision ID: mlscope_0003
Revises: mlscope_0002
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "mlscope_0003"
down_revision: str | None = "mlscope_0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The backfill as this revision wrote it, frozen here rather than imported from the store's live code,
# which may change with later schemas: per key, the succeeded evaluations counted and the latest kept
# (finished last, then greatest id byte by byte). {collate} is PostgreSQL's byte order for the id.
_BACKFILL = """
INSERT INTO compare_keys (model_name, framework_name, system_id, device, scenario, batch_size, runs,
                          latest_evaluation_id, latest_finished_at)
SELECT model_name, framework_name, system_id, device, scenario, batch_size, runs, evaluation_id,
       finished_at
FROM (
    SELECT e.model_name, e.framework_name, e.system_id, e.device, m.scenario, m.batch_size,
           count(*) OVER key_window AS runs,
           e.id AS evaluation_id, e.finished_at,
           row_number() OVER (key_window ORDER BY e.finished_at DESC NULLS LAST, e.id{collate} DESC)
               AS rank
    FROM evaluations AS e JOIN measurements AS m ON m.evaluation_id = e.id
    WHERE e.status = 'succeeded'
    WINDOW key_window AS (
        PARTITION BY e.model_name, e.framework_name, e.system_id, e.device, m.scenario, m.batch_size
    )
) AS ranked
WHERE rank = 1
"""


def upgrade() -> None:
    bind = op.get_bind()
    op.create_table(
        "compare_keys",
        sa.Column("model_name", sa.String(255), nullable=False),
        sa.Column("framework_name", sa.String(64), nullable=False),
        sa.Column("system_id", sa.String(128), nullable=False),
        sa.Column("device", sa.String(64), nullable=False),
        sa.Column("scenario", sa.String(32), nullable=False),
        sa.Column("batch_size", sa.Integer(), nullable=False),
        sa.Column("runs", sa.Integer(), nullable=False),
        sa.Column("latest_evaluation_id", sa.String(64), nullable=False),
        sa.Column("latest_finished_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["latest_evaluation_id"], ["evaluations.id"]),
        sa.PrimaryKeyConstraint(
            "model_name", "framework_name", "system_id", "device", "scenario", "batch_size"
        ),
    )
    op.create_index(
        "ix_evaluations_model_framework_created",
        "evaluations",
        ["model_name", "framework_name", "created_at", "id"],
    )
    if bind.dialect.name == "postgresql":
        op.create_index(
            "ix_evaluations_id_pattern", "evaluations", ["id"], postgresql_ops={"id": "varchar_pattern_ops"}
        )
    collate = ' COLLATE "C"' if bind.dialect.name == "postgresql" else ""
    bind.execute(sa.text(_BACKFILL.format(collate=collate)))


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        op.drop_index("ix_evaluations_id_pattern", table_name="evaluations")
    op.drop_index("ix_evaluations_model_framework_created", table_name="evaluations")
    op.drop_table("compare_keys")
