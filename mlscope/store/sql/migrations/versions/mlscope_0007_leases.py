"""Schema 7: the queue an evaluation's job was sent to, how many times it was started, and the lease
its runner renews while it runs, as columns of `evaluations`; and an index on (status,
lease_expires_at), by which a sweeper finds the running evaluations whose runner stopped renewing.

Every evaluation stored before gets attempts 0 (the column's server default; how often it was started
was never kept) and no queue and no lease: an evaluation left running by an older mlscope holds no
lease, so it is never taken for one whose runner died.

A column or index that exists already (a database made by a development build) is kept as it is.

Revision ID: mlscope_0007
Revises: mlscope_0006
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "mlscope_0007"
down_revision: str | None = "mlscope_0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEX = "ix_evaluations_status_lease_expires"


def _columns() -> list[sa.Column[object]]:
    # Written out here, not taken from tables.py, so that a later change there cannot change this step.
    return [
        sa.Column("queue", sa.String(255), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("lease_owner", sa.String(255), nullable=True),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
    ]


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    existing = {column["name"] for column in inspector.get_columns("evaluations")}
    missing = [column for column in _columns() if column.name not in existing]
    if missing:
        with op.batch_alter_table("evaluations") as batch:
            for column in missing:
                batch.add_column(column)
    if INDEX not in {index["name"] for index in inspector.get_indexes("evaluations")}:
        op.create_index(INDEX, "evaluations", ["status", "lease_expires_at"])


def downgrade() -> None:
    op.drop_index(INDEX, table_name="evaluations")
    with op.batch_alter_table("evaluations") as batch:
        for column in reversed(_columns()):
            batch.drop_column(column.name)
