"""The OpenAPI document is the truth: schemathesis runs against a real `mlscope api` process with every
check it has, and finds nothing.

The server is the one users run (waitress, a real SQLite store, the real Redis as broker and agent
registry, a write token), so what is checked is what answers on the wire: status codes documented per
operation, problem documents as application/problem+json, 405 with the right Allow header, schema-valid
requests accepted and schema-violating ones refused. Writes really enqueue jobs on Redis database
OPENAPI_REDIS_DB (no worker takes them), emptied before and after.

The run is the `st` command line in a subprocess with a fixed seed and a fixed budget of examples per
operation, positive and negative, so a failure is reproduced by running the printed command again.
openapi_hooks.py holds a 422 to a schema-valid request to the fields JSON Schema cannot judge.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import requests

from tests.fixtures.services import emptied_redis
from tests.integration.farm import free_port, wait_until

OPENAPI_REDIS_DB = 14
REDIS_URL = f"redis://127.0.0.1:6379/{OPENAPI_REDIS_DB}"
TOKEN = "openapi-test-token"
SEED = 21
# Per operation and generation mode; with the coverage and stateful phases, the run takes about a
# minute on two cores.
EXAMPLES_PER_OPERATION = 25
# The defaults (schemathesis' POSITIVE_DATA_ACCEPTANCE_EXPECTED_STATUSES) and 422, which
# openapi_hooks.refused_only_for_what_must_exist then holds to the fields the schema cannot judge.
# use_after_free (ST301) is excluded: it takes a DELETE to remove the resource, but DELETE
# /api/v1/evaluations/{id} cancels the evaluation and keeps its record (as the document says), so
# reading it afterwards answers 200 by design.
CONFIG = """\
[checks.positive_data_acceptance]
expected-statuses = ["2xx", "3xx", "401", "403", "404", "409", "422", "429"]
"""
ST = Path(sys.executable).with_name("st")


@pytest.fixture
def redis_db() -> Iterator[redis.Redis]:
    yield from emptied_redis(REDIS_URL)


@pytest.fixture
def api_url(mlscope_env: dict[str, str], redis_db: redis.Redis, tmp_path: Path) -> Iterator[str]:
    """A real `mlscope api` process on a free port; its log is printed if the test fails."""
    port = free_port()
    env = {
        **mlscope_env,
        "MLSCOPE_BROKER_URL": REDIS_URL,
        "MLSCOPE_REGISTRY_URL": REDIS_URL,
        "MLSCOPE_API_TOKENS": TOKEN,
    }
    log_path = tmp_path / "api.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "mlscope", "api", "--port", str(port)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
        )
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        assert process.poll() is None, f"mlscope api exited:\n{log_path.read_text(errors='replace')}"
        return _answers(f"{url}/api/v1/health")

    try:
        wait_until(up, 60, "the api to answer")
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        print(log_path.read_text(errors="replace")[-5000:])


def _answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=5).status_code == 200
    except requests.RequestException:
        return False


def test_the_live_api_does_what_its_openapi_document_says(
    api_url: str, tmp_path: Path, mlscope_env: dict[str, str]
) -> None:
    # Given the live API and schemathesis configured with every check (but use_after_free, above)
    config = tmp_path / "schemathesis.toml"
    config.write_text(CONFIG)
    command = [
        str(ST),
        "--config-file",
        str(config),
        "run",
        f"{api_url}/api/openapi.json",
        "--checks",
        "all",
        "--exclude-checks",
        "use_after_free",
        "--mode",
        "all",
        "--seed",
        str(SEED),
        "--max-examples",
        str(EXAMPLES_PER_OPERATION),
        "--header",
        f"Authorization: Bearer {TOKEN}",
        "--generation-database",
        "none",
        "--suppress-health-check",
        "all",
        "--request-timeout",
        "30",
        "--no-color",
    ]
    env = {**mlscope_env, "SCHEMATHESIS_HOOKS": "tests.integration.openapi_hooks"}

    # When it runs every phase against it
    run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)

    # Then it finds no failure (each one printed, reproducible with the seed)
    report = run.stdout + run.stderr
    print(report[-20000:])
    assert "Seed: " in report, report[-3000:]
    assert run.returncode == 0, f"schemathesis found failures (seed {SEED}):\n{report[-20000:]}"
