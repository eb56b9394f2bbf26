"""The test scheduler's scopes (tests/conftest.py): a module that uses the farm or a fixed Redis
database shares one scope, so those tests never run at once; one that only borrows the farm module's
helpers runs in a scope of its own, beside them."""

from __future__ import annotations

import pytest

from tests.conftest import REPO, SHARED_SCOPE, uses_the_farm_or_a_fixed_database, xdist_scope_of


@pytest.mark.parametrize(
    "text",
    [
        "from tests.integration.farm import Farm\n",
        "def test_x(farm: Farm) -> None: ...\n",
        "def test_x(make_farm: Any) -> None: ...\n",
        "def test_x(shared_store_farm: Any) -> None: ...\n",
        "from tests.integration.farm import REDIS_URL\n",
        "_REDIS_DB = 13\n",
        'URL = "redis://127.0.0.1:6379/13"\n',
    ],
)
def test_a_module_using_the_farm_or_a_fixed_database_shares_the_one_scope(text: str) -> None:
    assert uses_the_farm_or_a_fixed_database(text)


@pytest.mark.parametrize(
    "text",
    [
        "from tests.integration.farm import free_port, wait_until\n",
        '"""Runs as it would on a farm, with its own broker."""\nIMAGES = ("mlscope-farm",)\n',
    ],
)
def test_a_module_borrowing_only_the_farm_helpers_is_not_shared(text: str) -> None:
    assert not uses_the_farm_or_a_fixed_database(text)


def test_the_modules_that_run_farms_share_one_scope_and_the_container_ones_have_their_own() -> None:
    names = (
        "test_farm.py",
        "test_chaos.py",
        "test_recovery.py",
        "test_docker_lockdown.py",
        "test_compose_stack.py",
    )
    scope = {name: xdist_scope_of(REPO / "tests" / "integration" / name) for name in names}
    assert scope["test_farm.py"] == scope["test_chaos.py"] == scope["test_recovery.py"] == SHARED_SCOPE
    assert scope["test_docker_lockdown.py"] == "integration/test_docker_lockdown.py"
    assert scope["test_compose_stack.py"] == "integration/test_compose_stack.py"
