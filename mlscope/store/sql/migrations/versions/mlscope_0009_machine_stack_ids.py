"""Schema 9: one machine, one id. Adds `evaluations.machine_id` and `evaluations.stack_id`
(contract.system_ids: the hardware, and the software stack, an evaluation ran on), indexed, and fills
them for every stored evaluation that has a system, from its system's stored description and the image
its framework details record. History series group by them instead of the system id, which also
hashes the host's name and the farm agent (docs/history.md).

The fill computes the ids with the live contract.system_ids, not a copy frozen here: they are only of
use if the rows stored before equal the rows this mlscope writes. Rows whose ids are set already are
not filled again; a column that exists already is kept.

Revision ID: mlscope_0009
Revises: mlscope_0008
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

from mlscope.contract.system_ids import system_ids

revision: str = "mlscope_0009"
down_revision: str | None = "mlscope_0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Evaluations read and written per round trip: bounded memory whatever the store's size.
BATCH_EVALUATIONS = 500

_evaluations = sa.table(
    "evaluations",
    sa.column("id", sa.String()),
    sa.column("system_id", sa.String()),
    sa.column("framework_details", sa.JSON()),
    sa.column("machine_id", sa.String()),
    sa.column("stack_id", sa.String()),
)
_systems = sa.table("systems", sa.column("id", sa.String()), sa.column("data", sa.JSON()))
_COLUMNS = ("machine_id", "stack_id")


def _fill(bind: sa.Connection) -> int:
    """Sets machine_id and stack_id of every evaluation with a system and neither, a batch at a time
    (in id order); returns how many were filled."""
    e, s = _evaluations.c, _systems.c
    query = (
        sa.select(e.id, e.system_id, e.framework_details)
        .where(e.system_id.is_not(None), e.machine_id.is_(None))
        .order_by(e.id)
        .limit(BATCH_EVALUATIONS)
    )
    update = (
        sa.update(_evaluations)
        .where(e.id == sa.bindparam("row_id"))
        .values(machine_id=sa.bindparam("new_machine_id"), stack_id=sa.bindparam("new_stack_id"))
    )
    filled, last = 0, None
    while True:
        rows = bind.execute(query if last is None else query.where(e.id > last)).all()
        if not rows:
            return filled
        wanted = sorted({system_id for _, system_id, _ in rows})
        systems: dict[str, Any] = dict(bind.execute(sa.select(s.id, s.data).where(s.id.in_(wanted))).all())
        values = []
        for id, system_id, details in rows:
            system = systems.get(system_id)
            if not isinstance(system, dict):
                continue
            machine, stack = system_ids(system, details if isinstance(details, dict) else None)
            values.append({"row_id": id, "new_machine_id": machine, "new_stack_id": stack})
        if values:
            bind.execute(update, values)
            filled += len(values)
        last = rows[-1][0]


def upgrade() -> None:
    bind = op.get_bind()
    present = {c["name"] for c in sa.inspect(bind).get_columns("evaluations")}
    missing = [name for name in _COLUMNS if name not in present]
    if missing:
        with op.batch_alter_table("evaluations") as batch:
            for name in missing:
                batch.add_column(sa.Column(name, sa.String(16), nullable=True))
    indexed = {index["name"] for index in sa.inspect(bind).get_indexes("evaluations")}
    for name in _COLUMNS:
        if f"ix_evaluations_{name}" not in indexed:
            op.create_index(f"ix_evaluations_{name}", "evaluations", [name])
    _fill(bind)


def downgrade() -> None:
    for name in _COLUMNS:
        op.drop_index(f"ix_evaluations_{name}", table_name="evaluations")
    with op.batch_alter_table("evaluations") as batch:
        for name in reversed(_COLUMNS):
            batch.drop_column(name)
