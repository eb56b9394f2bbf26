"""The Mongo store under a server that stops answering: every call that reaches the server ends in
StoreUnavailable (what the API answers 503 for, and the worker's spool keeps writes on), never in a
bare pymongo error. No MongoDB server can run here: the store opens on mongomock, then every
collection it holds is swapped for one that raises what pymongo raises when no server answers."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from pymongo.errors import AutoReconnect, ServerSelectionTimeoutError

from mlscope.contract.errors import StoreUnavailable
from mlscope.store.mongo import MongoStore
from tests.contract.builders import COLD_START, make_measurement, make_system, run_to
from tests.contract.mongomock_store import SharedMongomockClient

REFUSED = (
    "127.0.0.1:27017: [Errno 111] Connection refused (configured timeouts: socketTimeoutMS: 20000.0ms), "
    "Timeout: 3.0s, Topology Description: <TopologyDescription ...>"
)


class GoneCollection:
    """A collection whose server has gone: each call raises `error`."""

    def __init__(self, name: str, error: Exception) -> None:
        self.name = name
        self.error = error

    def __getattr__(self, attribute: str) -> Any:
        def call(*_args: Any, **_kwargs: Any) -> Any:
            raise self.error

        return call


class GoneDatabase:
    def __init__(self, error: Exception) -> None:
        self.error = error

    def __getitem__(self, name: str) -> GoneCollection:
        return GoneCollection(name, self.error)


@pytest.fixture(params=[ServerSelectionTimeoutError(REFUSED), AutoReconnect("connection reset by peer")])
def gone(request: pytest.FixtureRequest) -> Iterator[tuple[MongoStore, str]]:
    database = f"mlscope_unit_{uuid.uuid4().hex[:12]}"
    with MongoStore(f"mongodb://127.0.0.1:27017/{database}", client_class=SharedMongomockClient) as store:
        evaluation_id = run_to(store, "running")
        error: Exception = request.param
        store._db = GoneDatabase(error)  # type: ignore[assignment]
        for name in ("_systems", "_evaluations", "_chunks", "_spans"):
            setattr(store, name, GoneCollection(name, error))
        yield store, evaluation_id
    SharedMongomockClient().drop_database(database)


def test_every_call_is_store_unavailable_naming_the_store(gone: tuple[MongoStore, str]) -> None:
    store, evaluation_id = gone
    calls = {
        "get_evaluation": lambda: store.get_evaluation(evaluation_id),
        "list_evaluations": lambda: store.list_evaluations(),
        "count_evaluations": lambda: store.count_evaluations(),
        "compare": lambda: store.compare(),
        "get_spans": lambda: store.get_spans(evaluation_id),
        "finish_evaluation": lambda: store.finish_evaluation(
            evaluation_id,
            system=make_system(),
            framework={"name": "pytorch", "version": "2.3.0"},
            cold_start=COLD_START,
            measurements=[make_measurement()],
        ),
        "fail_evaluation": lambda: store.fail_evaluation(
            evaluation_id, error={"type": "X", "message": "m", "phase": "load"}
        ),
    }
    for name, call in calls.items():
        with pytest.raises(StoreUnavailable) as failure:
            call()
        message = failure.value.message
        assert "127.0.0.1:27017" in message and "nothing of it was kept" in message, name
        assert "Topology Description" not in message, name
