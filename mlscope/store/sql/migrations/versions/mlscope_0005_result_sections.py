"""Schema 5: the result sections `accuracy` and `parity` (records.sections) as JSON columns of
`evaluations`, NULL when an evaluation did not measure them, which is every evaluation stored before:
nothing to backfill.

A column that exists already (a database made by a development build) is kept as it is.

Revision ID: mlscope_0005
Revises: mlscope_0004
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "mlscope_0005"
down_revision: str | None = "mlscope_0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

NAMES = ("accuracy", "parity")


def upgrade() -> None:
    existing = {column["name"] for column in sa.inspect(op.get_bind()).get_columns("evaluations")}
    with op.batch_alter_table("evaluations") as batch:
        for name in NAMES:
            if name not in existing:
                batch.add_column(sa.Column(name, sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("evaluations") as batch:
        for name in reversed(NAMES):
            batch.drop_column(name)
