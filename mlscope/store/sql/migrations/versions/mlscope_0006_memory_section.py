"""Schema 6: the result section `memory` (records.sections) as a JSON column of `evaluations`, NULL
when an evaluation did not measure it, which is every evaluation stored before: nothing to backfill.
(A measurement's `energy` and `cost` sections travel in its `extra` JSON and need no column.)

A column that exists already (a database made by a development build) is kept as it is.

Revision ID: mlscope_0006
Revises: mlscope_0005
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "mlscope_0006"
down_revision: str | None = "mlscope_0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

NAME = "memory"


def upgrade() -> None:
    existing = {column["name"] for column in sa.inspect(op.get_bind()).get_columns("evaluations")}
    if NAME not in existing:
        with op.batch_alter_table("evaluations") as batch:
            batch.add_column(sa.Column(NAME, sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("evaluations") as batch:
        batch.drop_column(NAME)
