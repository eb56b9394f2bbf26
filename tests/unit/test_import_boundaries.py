"""The predictor runtime runs in slim processes and containers: importing it must bring in no
store, broker or web code, and no framework until a predictor asks for its own."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

FORBIDDEN = (
    "sqlalchemy",
    "psycopg",
    "mongoengine",
    "pymongo",
    "celery",
    "kombu",
    "flask",
    "redis",
    "requests",
    "torch",
    "onnxruntime",
    "transformers",
    "opentelemetry",
    "tensorflow",
    "keras",
    "mxnet",
    "docker",
)


def imported_after(statement: str) -> set[str]:
    probe = f"import sys, json; {statement}; print(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return {name.split(".")[0] for name in json.loads(done.stdout)}


@pytest.mark.parametrize(
    "module",
    [
        "mlscope.runtime.execute",
        "mlscope.runtime.measure",
        "mlscope.runtime.predictors",
        "mlscope.runtime.trace",
        "mlscope.runtime.trace.passes",
        "mlscope.runtime.predictors.pytorch.profile",
        "mlscope.runtime.predictors.onnxruntime.profile",
        "mlscope.runtime.predictors.tensorflow.profile",
        "mlscope.runtime.predictors.mxnet.profile",
        "mlscope.registry",
    ],
)
def test_the_predictor_runtime_imports_no_store_broker_web_or_framework(module: str) -> None:
    assert imported_after(f"import {module}").isdisjoint(FORBIDDEN)


def test_listing_models_and_frameworks_imports_no_framework() -> None:
    loaded = imported_after(
        "from mlscope.registry.models import ModelRegistry; "
        "from mlscope.runtime.frameworks import FRAMEWORKS, installed_version; "
        "ModelRegistry.load(); [installed_version(s) for s in FRAMEWORKS.values()]"
    )
    assert loaded.isdisjoint({"torch", "onnxruntime", "transformers"})


def test_loading_one_predictor_imports_only_its_framework() -> None:
    loaded = imported_after(
        "from mlscope.runtime.frameworks import load_predictor_class; load_predictor_class('onnxruntime')"
    )
    assert "onnxruntime" in loaded
    assert loaded.isdisjoint({"torch", "transformers", "sqlalchemy"})


def test_the_worker_imports_no_web_code_and_no_framework() -> None:
    # Frameworks are imported by the predictor (in its own process, or inline on the first job).
    loaded = imported_after("import mlscope.workers.worker")
    assert "celery" in loaded
    assert loaded.isdisjoint({"flask", "flask_smorest", "torch", "onnxruntime", "transformers"})


def test_the_api_imports_no_framework() -> None:
    # The api may run on a machine with no framework installed: it validates against manifests only.
    loaded = imported_after("from mlscope.api import create_app")
    assert "flask" in loaded
    assert loaded.isdisjoint({"torch", "onnxruntime", "transformers"})


def test_the_client_imports_no_server_code() -> None:
    loaded = imported_after("import mlscope.client")
    assert loaded.isdisjoint({"flask", "celery", "sqlalchemy", "torch", "onnxruntime"})


def test_running_without_an_otlp_endpoint_imports_no_opentelemetry() -> None:
    # The exporter is loaded only when MLSCOPE_OTLP_ENDPOINT is set.
    assert "opentelemetry" not in imported_after("import mlscope.workers.pipeline, mlscope.broker.tracing")


def test_import_mlscope_loads_no_framework_console_or_database() -> None:
    # `import mlscope` in a notebook must be instant: the Python API is loaded when first used.
    assert imported_after("import mlscope").isdisjoint(
        {"torch", "onnxruntime", "tensorflow", "transformers", "sqlalchemy", "rich", "click", "pandas"}
    )
    # And reaching it loads no framework either: the predictor process imports its own.
    reached = imported_after("import mlscope; mlscope.evaluate; mlscope.ResultSet")
    assert reached.isdisjoint({"torch", "onnxruntime", "tensorflow", "transformers", "rich", "pandas"})


def test_mlscope_error_is_at_the_top_and_loads_nothing_of_the_api() -> None:
    # `except mlscope.MlscopeError` catches every error of mlscope's; naming it loads only the errors.
    reached = imported_after(
        "import mlscope; from mlscope.contract.errors import UserError; "
        "assert issubclass(UserError, mlscope.MlscopeError)"
    )
    assert reached.isdisjoint(
        {"numpy", "marshmallow", "yaml", "torch", "sqlalchemy", "flask", "rich", "click"}
    )
