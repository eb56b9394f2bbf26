"""The bricks service through the Python API (`mlscope.bricks`) and the HTTP API (POST
/api/v1/bricks/estimates), on the real ONNX Runtime and a real (SQLite) store: the library measures a
small MLP's bricks and the MLP whole; the API, which measures nothing, composes an estimate from what
is stored, and says what is missing before anything is. Measurements are short (min_seconds 0)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import onnxruntime  # noqa: F401 - the project installs it: a missing install fails here, never skips
import pytest
from flask import Flask
from flask.testing import FlaskClient

import mlscope
from mlscope.api import create_app
from mlscope.contract.errors import UserError
from mlscope.contract.settings import load_settings
from mlscope.runtime.system import capture_system, system_id
from mlscope.store import open_store
from tests.fixtures.brick_graphs import mlp

pytestmark = pytest.mark.slow

TOKEN = "bricks-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
PATH = "/api/v1/bricks/estimates"
QUICK: dict[str, Any] = {"runner": "inline", "min_seconds": 0, "max_seconds": 2, "min_count": 10}


@pytest.fixture
def app(mlscope_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[Flask]:
    monkeypatch.setenv("MLSCOPE_API_TOKENS", TOKEN)
    with open_store(mlscope_env["MLSCOPE_STORE_URL"]) as store:
        made = create_app(load_settings(), store=store)
        yield made
        made.extensions["mlscope"].agents.close()


def _this_system(app: Flask) -> str:
    """This machine's system, stored (as a run here stores it), and its id."""
    system = capture_system()
    return str(app.extensions["mlscope"].store.save_system({**system, "id": system_id(system)}))


def test_the_library_estimates_a_small_mlp_from_its_bricks(
    mlscope_env: dict[str, str], tmp_path: Path
) -> None:
    # Given a small MLP file
    model = mlp(tmp_path / "lib.onnx", [64, 64, 16], seed=4)
    # When the Python API runs bricks on it, with short whole-model measurements
    reports, summary = mlscope.bricks(model, threads=1, **QUICK)
    # Then one report with an estimate from its bricks beside the latency measured whole
    (report,) = reports
    assert report["model"] == str(model) and report["framework"]["name"] == "onnxruntime"
    assert report["estimate_ms"] > 0 and report["measured_ms"] > 0
    assert report["bricks"]["measured_now"] == report["bricks"]["unique"] > 0
    assert summary["summary"] is True and summary["models"] == 1 and summary["estimated"] == 1


def test_the_library_refuses_a_framework_without_bricks_naming_the_supported_ones(
    mlscope_env: dict[str, str], tmp_path: Path
) -> None:
    with pytest.raises(UserError) as refused:
        mlscope.bricks(str(tmp_path / "x.onnx"), framework="tensorflow")
    assert refused.value.field == "framework"
    assert "'tensorflow'" in refused.value.message and "onnxruntime and pytorch" in refused.value.message


def test_the_api_composes_an_estimate_from_stored_bricks_only(
    app: Flask, http: FlaskClient, tmp_path: Path
) -> None:
    # Given a small MLP uploaded to the API, and this machine's system stored, but none of its bricks
    model = mlp(tmp_path / "api.onnx", [64, 64, 16], seed=5)
    uploaded = http.post(
        "/api/v1/models?filename=api.onnx",
        data=model.read_bytes(),
        headers={**AUTH, "Content-Type": "application/octet-stream"},
    )
    assert uploaded.status_code == 201, uploaded.get_json()
    system = _this_system(app)
    body = {"model": uploaded.get_json()["ref"], "system": system, "threads": 1}
    # When the API is asked for its estimate
    answer = http.post(PATH, json=body, headers=AUTH)
    # Then nothing is covered: no estimate, and every brick it needs is named missing
    assert answer.status_code == 200, answer.get_json()
    empty = answer.get_json()
    assert empty["coverage"] == 0 and empty["estimate_ms"] is None, empty
    assert empty["fallback"] is None, empty["fallback"]
    assert empty["bricks"]["found"] == 0 and empty["bricks"]["needed"] == empty["bricks"]["unique"] + 2
    assert len(empty["missing"]) == empty["bricks"]["needed"] > 2
    assert all(name.startswith("brick-") for name in empty["missing"])
    assert empty["system_id"] == system and empty["framework"]["name"] == "onnxruntime"

    # When the library has run bricks on its file here, into the same store
    (report,), _ = mlscope.bricks(model, threads=1, **QUICK)
    assert report["system_id"] == system
    # Then the API composes the estimate from those stored bricks, measuring nothing
    store = app.extensions["mlscope"].store
    stored = store.count_evaluations()
    answer = http.post(PATH, json=body, headers=AUTH)
    assert store.count_evaluations() == stored
    assert answer.status_code == 200, answer.get_json()
    full = answer.get_json()
    assert full["coverage"] == 1 and full["missing"] == [] and full["fallback"] is None
    assert full["bricks"]["found"] == full["bricks"]["needed"] == empty["bricks"]["needed"]
    assert full["estimate_ms"] > 0 and full["bounds"]["critical_path_ms"] <= full["bounds"]["sequential_ms"]
    low, high = full["estimate_ci"]
    assert low <= full["estimate_ms"] <= high
    # and it is the estimate the library composed from the same bricks
    assert full["estimate_ms"] == pytest.approx(report["estimate_ms"])


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"system": "s"}, "model"),
        ({"model": "m"}, "system"),
        ({"model": "m", "system": "s", "framework": "tensorflow"}, "framework"),
        ({"model": "m", "system": "s", "threads": 0}, "threads"),
        ({"model": "m", "system": "s", "extra": 1}, "extra"),
    ],
)
def test_a_bad_body_is_a_422_naming_the_field(http: FlaskClient, body: dict[str, Any], field: str) -> None:
    answer = http.post(PATH, json=body, headers=AUTH)
    assert answer.status_code == 422 and answer.content_type.startswith("application/problem+json")
    assert field in answer.get_json()["errors"]


def test_an_unknown_system_is_a_404_and_a_missing_token_a_401(http: FlaskClient) -> None:
    body = {"model": "m", "system": "no-such-system"}
    answer = http.post(PATH, json=body, headers=AUTH)
    assert answer.status_code == 404 and "no-such-system" in answer.get_json()["detail"]
    assert http.post(PATH, json=body).status_code == 401
