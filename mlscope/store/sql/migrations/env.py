"""Alembic's environment for the SQL store: runs the revisions in versions/ on the connection the
store hands over in `config.attributes["connection"]`, inside the transaction the store has begun
(so a failed upgrade rolls back whole); SQLite in batch mode, where ALTER TABLE is limited.
"""

from __future__ import annotations

from alembic import context

from mlscope.store.sql.tables import Base


def _run() -> None:
    connection = context.config.attributes.get("connection")
    if connection is None:
        raise RuntimeError(
            "mlscope's migrations run on a connection the store hands over: use `mlscope store upgrade`"
        )
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


_run()
