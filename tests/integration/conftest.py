"""Fixtures of the integration suite: a real farm on each broker.

`farm` starts nothing by itself; a test starts the api and the workers it needs. It is parametrized
over Redis and RabbitMQ, so every farm test passes on both brokers. The store is the real
PostgreSQL (a database made for the session by the contract suite's `postgres_url` fixture).
Unreachable services skip locally and fail in CI (env CI=true), where a skip would pass unnoticed.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.contract.conftest import (
    emptied_postgres,
    postgres_url,  # noqa: F401 - a fixture, used by name
)
from tests.fixtures.docker_engine import unavailable as _unavailable
from tests.fixtures.private_postgres import private_postgres  # noqa: F401 - a fixture, used by name
from tests.integration.farm import Farm, RabbitVhost, empty_redis_db


@pytest.fixture(params=["redis", "rabbitmq"])
def farm(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    shared_cache: Path,
) -> Iterator[Farm]:
    """A farm on the real broker named by the parameter, on the session's PostgreSQL database (empty
    at the start and emptied afterwards); its processes are stopped afterwards."""
    with emptied_postgres(request.getfixturevalue("postgres_url")) as store_url:
        yield from _farm_on(request.param, store_url, tmp_path, shared_cache)


def _farm_on(broker: str, store_url: str, tmp_path: Path, shared_cache: Path) -> Iterator[Farm]:
    import redis

    try:
        empty_redis_db()
    except redis.RedisError as exc:
        _unavailable(f"Redis at 127.0.0.1:6379 is unreachable: {exc}")
    if broker == "redis":
        from tests.integration.farm import REDIS_URL

        made = Farm(broker_url=REDIS_URL, store_url=store_url, tmp=tmp_path, cache_dir=shared_cache)
        try:
            yield made
        finally:
            made.stop()
        return
    if shutil.which("rabbitmqctl") is None:
        _unavailable("rabbitmqctl is not installed: RabbitMQ cannot be given a virtual host per test")
    with RabbitVhost() as broker_url:
        made = Farm(broker_url=broker_url, store_url=store_url, tmp=tmp_path, cache_dir=shared_cache)
        try:
            yield made
        finally:
            made.stop()


@pytest.fixture
def app(store: Any) -> Iterator[Any]:
    """The API app on the module's `store` fixture, its agent registry closed afterwards. A module
    whose app is made otherwise (its own settings, a token) defines its own `app`, which wins."""
    from mlscope.api import create_app
    from mlscope.contract.settings import load_settings

    made = create_app(load_settings(), store=store)
    yield made
    made.extensions["mlscope"].agents.close()


@pytest.fixture
def http(app: Any) -> Any:
    """A test client of the module's `app` (this suite's, or the module's own)."""
    return app.test_client()


@pytest.fixture
def served(app: Any) -> Iterator[str]:
    """The module's `app` on a free local port, served by werkzeug's threaded server in a thread."""
    import threading

    from werkzeug.serving import make_server

    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    thread.join()
