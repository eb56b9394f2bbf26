"""The API against generated requests: schemathesis reads /api/openapi.json and builds, for every
operation, requests from its schema and requests that break it (wrong types, missing fields, odd
strings). Whatever comes in, the answer is never a 5xx, and every error is a problem document.

Writes carry the test's bearer token, so generated bodies reach the validation and, when valid, the
real store and the real Redis (the app and its Redis database come from test_api.py's fixtures).
schemathesis's pytest plugin does not run under this pytest, so the test walks the operations itself.
"""

from __future__ import annotations

import pytest
import schemathesis
from flask import Flask
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis.errors import Unsatisfiable
from schemathesis.generation import GenerationMode

from tests.integration.test_api import TOKEN, app, redis_db, settings  # noqa: F401 - fixtures, by name

# The app comes by getfixturevalue (its Redis database among its fixtures): the marker says so.
pytestmark = pytest.mark.redis

PROBLEM = "application/problem+json"
EXAMPLES_PER_OPERATION = 20


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=lambda m: m.value)
def test_no_generated_request_gets_a_server_error(
    request: pytest.FixtureRequest, mode: GenerationMode
) -> None:
    flask_app: Flask = request.getfixturevalue("app")
    schema = schemathesis.openapi.from_wsgi("/api/openapi.json", flask_app)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 12  # every resource of /api/v1 is documented

    unbreakable: list[str] = []
    for operation in operations:

        @given(case=operation.as_strategy(generation_mode=mode))
        @hypothesis_settings(
            max_examples=EXAMPLES_PER_OPERATION,
            deadline=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
            database=None,
        )
        def call(case: schemathesis.Case) -> None:
            case.headers = {**(case.headers or {}), "Authorization": f"Bearer {TOKEN}"}
            response = case.call()
            what = (case.method, case.formatted_path, case.query, case.body)
            assert response.status_code < 500, (what, response.text[:500])
            if response.status_code >= 400:
                content_type = (response.headers.get("content-type") or [""])[0]
                assert content_type.startswith(PROBLEM), (what, response.text[:300])
                assert "Traceback" not in response.text

        try:
            call()
        except Unsatisfiable:
            # An operation with no parameters and no body (GET /health) has no request that breaks it.
            assert mode is GenerationMode.NEGATIVE, operation.label
            unbreakable.append(operation.label)
    # Every operation that takes a body or query parameters got broken requests.
    for label in ("POST /api/v1/evaluations", "POST /api/v1/evaluations/batch", "GET /api/v1/evaluations"):
        assert label not in unbreakable
    assert "GET /api/v1/compare" not in unbreakable
