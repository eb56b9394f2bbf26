"""Every pooled PostgreSQL connection busy past the pool's timeout is the store's trouble, said as
StoreUnavailable naming the store (the API's 503), not SQLAlchemy's own TimeoutError (a 500): while a
server hangs, every request's connection is busy failing, and the next caller must hear so."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, text

from mlscope.contract.errors import StoreUnavailable
from mlscope.store.sql.engine import _BoundedPool, engine_url, report_unavailable


def test_a_pool_with_every_connection_taken_answers_store_unavailable(postgres_url: str) -> None:
    # Given a one-connection pool of the store's kind, its connection taken
    engine = create_engine(
        engine_url(postgres_url), poolclass=_BoundedPool, pool_size=1, max_overflow=0, pool_timeout=0.2
    )
    report_unavailable(engine, "postgresql://the-store")
    try:
        for attempt in ("first", "after dispose"):
            with engine.connect() as holding:
                holding.execute(text("SELECT 1"))
                # When another caller asks for a connection
                with pytest.raises(StoreUnavailable) as failure:
                    engine.connect()
                # Then it is told the store did not answer, by name, and nothing was kept
                message = failure.value.message
                assert "postgresql://the-store" in message and "nothing of it was kept" in message, attempt
                assert "busy" in message, attempt
            # ... also once the pool was replaced (dispose() swaps in a new one)
            engine.dispose()
    finally:
        engine.dispose()
