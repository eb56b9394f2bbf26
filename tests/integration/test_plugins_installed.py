"""Plugging in from outside: a toy framework, a toy scenario, a toy store and a toy HTTP resource,
each declared by an installed distribution in mlscope's entry-point groups (tests/data/plugins), run
end to end.

They are installed into a virtual environment of the test's own (which sees this interpreter's
packages), so this interpreter's environment is left as it was.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.integration.test_run_cli import FAST, ran_valid

PLUGINS = Path(__file__).resolve().parent.parent / "data" / "plugins"

MANIFEST = """
name: toy_model
version: "1.0"
task: other
framework: {name: toyfw, version: "*"}
source: {python: "mlscope_toy_framework:factory"}
weights: random
inputs: [{name: x, shape: [4], dtype: float32}]
outputs: [{name: y}]
"""

# Run inside the environment: the framework's predictor doubles, and the store reads back what ran.
READ_BACK = """
import json, sys
import numpy as np
from mlscope.runtime.frameworks import FRAMEWORKS, load_predictor_class
from mlscope.store import open_store

cls = load_predictor_class("toyfw")
from pathlib import Path
from mlscope.registry.models import ModelRegistry
predictor = cls(ModelRegistry.load([Path(sys.argv[3])]).get("toy_model", "toyfw"))
predictor.load()
doubled = predictor.outputs_to_numpy(predictor.predict(predictor.prepare({"x": np.arange(4.0)})))
store = open_store(sys.argv[1])
print(json.dumps({
    "frameworks": list(FRAMEWORKS),
    "source": FRAMEWORKS.source("toyfw"),
    "doubled": doubled["y"].tolist(),
    "stored": store.get_evaluation(sys.argv[2])["framework"],
}))
"""


@pytest.fixture(scope="module")
def plugged(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtual environment with the toy framework and the toy store installed; returns its Python."""
    where = tmp_path_factory.mktemp("plugged")
    venv = where / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    found = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    # This interpreter's packages (mlscope's dependencies, pip and setuptools), seen from the new one.
    Path(found.stdout.strip(), "parent.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    for plugin in ("toy_framework", "toy_store"):
        # Built from a copy: a build writes its build/ and egg-info beside the sources.
        source = shutil.copytree(PLUGINS / plugin, where / plugin)
        subprocess.run(
            [python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
             str(source)],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
    return python


def _toy_env(tmp_path: Path) -> tuple[dict[str, str], str]:
    """A manifest for the toy framework and the toy store's URL, as the environment of a run."""
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "toy.yaml").write_text(MANIFEST)
    url = f"toystore:///{tmp_path / 'toy.db'}"
    env = {
        **os.environ,
        "MLSCOPE_STORE_URL": url,
        "MLSCOPE_MANIFESTS": str(tmp_path / "m"),
        "MLSCOPE_CACHE_DIR": str(tmp_path / "cache"),
        "MLSCOPE_SETTINGS": str(tmp_path / "no-settings.toml"),
        "PYTHONPATH": str(REPO),
    }
    return env, url


def test_an_installed_framework_runs_into_an_installed_store(plugged: Path, tmp_path: Path) -> None:
    # Given the toy plugins installed, a manifest for the toy framework, and the toy store's URL
    env, url = _toy_env(tmp_path)
    # When `mlscope run` runs the toy model on the toy framework
    done = subprocess.run(
        [plugged, "-m", "mlscope", "run", "toy_model", "-f", "toyfw", "--runner", "inline", "--json", *FAST],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    # Then it ran, valid, on the toy framework
    (result,) = ran_valid(done)
    assert result["framework"]["name"] == "toyfw" and result["framework"]["version"] == "0.1.0"
    # And the framework is listed after the built-in ones, from its distribution, and doubles its input;
    # and the toy store, opened by its scheme, holds the evaluation
    read = subprocess.run(
        [plugged, "-c", READ_BACK, url, result["id"], str(tmp_path / "m")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert read.returncode == 0, read.stderr[-3000:]
    seen = json.loads(read.stdout)
    assert seen["frameworks"][-1] == "toyfw" and "pytorch" in seen["frameworks"]
    assert seen["source"] == "distribution mlscope-toy-framework"
    assert seen["doubled"] == [0.0, 2.0, 4.0, 6.0]
    assert seen["stored"]["name"] == "toyfw"


def test_an_installed_scenario_is_requested_by_name_and_measures(plugged: Path, tmp_path: Path) -> None:
    # Given the toy plugins installed (the toy scenario issues two batches per query)
    env, _ = _toy_env(tmp_path)
    # When `mlscope run` names the toy scenario beside a built-in one
    done = subprocess.run(
        [plugged, "-m", "mlscope", "run", "toy_model", "-f", "toyfw", "--runner", "inline", "--json",
         "--scenario", "single_stream,toy_pairs", *FAST],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    # Then both ran, valid, and the toy scenario's query is the pair: slower than one batch
    (result,) = ran_valid(done)
    by_scenario = {m["scenario"]: m for m in result["measurements"]}
    assert set(by_scenario) == {"single_stream", "toy_pairs"}
    assert (
        by_scenario["toy_pairs"]["latency_ms"]["median"]
        > by_scenario["single_stream"]["latency_ms"]["median"]
    )
    # And outside that environment the name is refused as any unknown scenario is (exit 2, one line)
    refused = subprocess.run(
        [sys.executable, "-m", "mlscope", "run", "toy_model", "-f", "toyfw", "--scenario", "toy_pairs"],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert refused.returncode == 2 and "scenarios.0: Must be one of" in refused.stderr
    assert "Traceback" not in refused.stderr


# Run inside the environment: the API app, its store the toy store, asked for the toy resource.
ASK_API = """
import json, sys
from mlscope.api import create_app
from mlscope.contract.settings import load_settings
from mlscope.store import open_store

with open_store(sys.argv[1]) as store:
    app = create_app(load_settings(), store=store)
    client = app.test_client()
    count = client.get("/api/v1/toy/count")
    document = client.get("/api/openapi.json").get_json()
    app.extensions["mlscope"].agents.close()
print(json.dumps({"status": count.status_code, "body": count.get_json(), "paths": sorted(document["paths"])}))
"""


def test_an_installed_http_resource_is_served_beside_the_builtin_ones(plugged: Path, tmp_path: Path) -> None:
    # Given the toy plugins installed and one evaluation run into the toy store
    env, url = _toy_env(tmp_path)
    done = subprocess.run(
        [plugged, "-m", "mlscope", "run", "toy_model", "-f", "toyfw", "--runner", "inline", "--json", *FAST],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    ran_valid(done)
    # When the API made in that environment is asked for the toy resource
    asked = subprocess.run(
        [plugged, "-c", ASK_API, url], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert asked.returncode == 0, asked.stderr[-3000:]
    seen = json.loads(asked.stdout)
    # Then it answers from the API's store, and the OpenAPI document lists it beside the built-ins
    assert seen["status"] == 200 and seen["body"] == {"evaluations": 1}
    assert "/api/v1/toy/count" in seen["paths"] and "/api/v1/evaluations" in seen["paths"]
