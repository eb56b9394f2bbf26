"""The baseline: exactly the schema mlscope 0.1.0 created (tables systems, evaluations, measurements and
spans, with their keys and indexes), written out so that it never follows later changes to tables.py.

A database mlscope 0.1.0 made has this schema and no alembic_version table; `mlscope store upgrade`
stamps it with this revision before applying the ones after it.

Revision ID: mlscope_0001
Revises: (none)
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "mlscope_0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "systems",
        sa.Column("id", sa.String(128), nullable=False),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.Column("saved_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "evaluations",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("model_name", sa.String(255), nullable=False),
        sa.Column("model_version", sa.String(255), nullable=True),
        sa.Column("manifest_sha256", sa.String(64), nullable=True),
        sa.Column("framework_name", sa.String(64), nullable=False),
        sa.Column("framework_version", sa.String(64), nullable=True),
        sa.Column("system_id", sa.String(128), nullable=True),
        sa.Column("runner", sa.String(32), nullable=False),
        sa.Column("device", sa.String(64), nullable=False),
        sa.Column("trace_level", sa.String(16), nullable=False),
        sa.Column("trace_id", sa.String(64), nullable=True),
        sa.Column("cold_start", sa.JSON(), nullable=True),
        sa.Column("framework_details", sa.JSON(), nullable=True),
        sa.Column("error", sa.JSON(), nullable=True),
        sa.Column("request", sa.JSON(), nullable=False),
        sa.Column("manifest", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.ForeignKeyConstraint(["system_id"], ["systems.id"]),
    )
    op.create_index("ix_evaluations_created_at_id", "evaluations", ["created_at", "id"])
    op.create_index("ix_evaluations_framework_name", "evaluations", ["framework_name"])
    op.create_index("ix_evaluations_model_name", "evaluations", ["model_name"])
    op.create_index("ix_evaluations_status", "evaluations", ["status"])
    op.create_index("ix_evaluations_system_id", "evaluations", ["system_id"])
    op.create_table(
        "measurements",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("evaluation_id", sa.String(64), nullable=False),
        sa.Column("scenario", sa.String(32), nullable=False),
        sa.Column("batch_size", sa.Integer(), nullable=False),
        sa.Column("latency_ms", sa.JSON(), nullable=False),
        sa.Column("throughput", sa.Float(), nullable=True),
        sa.Column("validity", sa.JSON(), nullable=False),
        sa.Column("extra", sa.JSON(), nullable=False),
        sa.Column("latencies_ns", sa.LargeBinary(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("evaluation_id", "scenario", "batch_size"),
        sa.ForeignKeyConstraint(["evaluation_id"], ["evaluations.id"], ondelete="CASCADE"),
    )
    op.create_table(
        "spans",
        sa.Column("evaluation_id", sa.String(64), nullable=False),
        sa.Column("span_id", sa.String(16), nullable=False),
        sa.Column("trace_id", sa.String(32), nullable=False),
        sa.Column("parent_id", sa.String(16), nullable=True),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("level", sa.String(16), nullable=False),
        sa.Column("start_ns", sa.BigInteger(), nullable=False),
        sa.Column("end_ns", sa.BigInteger(), nullable=False),
        sa.Column("attributes", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("evaluation_id", "span_id"),
        sa.ForeignKeyConstraint(["evaluation_id"], ["evaluations.id"], ondelete="CASCADE"),
    )
    op.create_index(
        "ix_spans_evaluation_level_start", "spans", ["evaluation_id", "level", "start_ns", "span_id"]
    )
    op.create_index("ix_spans_evaluation_start", "spans", ["evaluation_id", "start_ns", "span_id"])
    op.create_index("ix_spans_trace_id", "spans", ["trace_id"])


def downgrade() -> None:
    for table in ("spans", "measurements", "evaluations", "systems"):
        op.drop_table(table)
