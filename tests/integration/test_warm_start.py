"""Warm starts on real frameworks (PyTorch, ONNX Runtime; CPU only: the GPU path, a copy from the
mapping to the device, has not run here, and CUDA IPC is not implemented): the weights published
once, a second predictor process mapping them without reading them, the same outputs as a cold
load, and a budget smaller than the model failing the evaluation clearly.

How a test knows a process did not read the weights: Linux counts every byte a process reads through
read() and its kin in /proc/<pid>/io `rchar`, and not what it takes through page faults on a mapping.
Each check is paired with a read of the same file that the count does see, so it can fail.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mlscope.contract.job import Job, JobFailed
from mlscope.contract.manifest import Manifest, parse_manifest
from mlscope.runtime.execute import execute
from mlscope.runtime.model_store import ModelStore, entry_key
from mlscope.runtime.predictors.inputs import synthetic_batch
from tests.conftest import REPO
from tests.integration.test_run_cli import FAST, json_lines, mlscope

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path("/proc/self/io").is_file(), reason="reads Linux's /proc/self/io and smaps"),
]

MB = 2**20
WIDTH = 100_000  # tiny_mlp's hidden width: (32 + 1 + 10) x 100k floats, 16.4 MB of weights


def manifest(framework: str, factory: str = "tiny_mlp", kwargs: dict[str, Any] | None = None) -> Manifest:
    return parse_manifest(
        {
            "name": f"warm_{factory}",
            "version": "1.0",
            "task": "other",
            "framework": {"name": framework, "version": ">=1.0"},
            "source": {"python": {"factory": f"tests.fixtures.models:{factory}", "kwargs": kwargs or {}}},
            "weights": "random",
            "inputs": [{"name": "x", "shape": [32], "dtype": "float32", "layout": "NC"}],
            "outputs": [{"name": "y"}],
        },
        origin="test_warm_start",
    )


def job(model: Manifest, cache: Path, store: Path, budget_mb: int = 256) -> Job:
    return Job(
        evaluation_id="warm",
        manifest=model.to_dict(),
        origin=model.origin,
        framework=model.framework.name,
        device="cpu",
        batch_sizes=(2,),
        scenarios=("single_stream",),
        measure={"min_seconds": 0.1, "max_seconds": 2, "min_count": 5, "warmup_seconds": 0.01},
        cache_dir=str(cache),
        model_store={"directory": str(store), "budget_mb": budget_mb},
    )


def python(
    *arguments: str, stdin: str | None = None, timeout: float = 300, check: bool = True
) -> tuple[Any, str]:
    """`python ARGUMENTS` in a process of its own, on this checkout; the last line it printed, as JSON."""
    done = subprocess.run(
        [sys.executable, *arguments],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=check,
    )
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def in_a_predictor_process(work: Job) -> dict[str, Any]:
    """The job run as the process runner runs it: `python -m mlscope.runtime.execute`, its own process."""
    final, stderr = python(
        "-m", "mlscope.runtime.execute", stdin=json.dumps(work.to_dict()), timeout=600, check=False
    )
    assert final["event"] == "result", (final, stderr[-2000:])
    return final["result"]


@pytest.mark.parametrize("framework", ["pytorch", "onnxruntime"])
def test_a_second_predictor_process_warm_starts_from_the_store_without_reading_the_weights(
    framework: str, tmp_path: Path, shared_cache: Path
) -> None:
    # Given a model with 16 MB of weights and an empty store
    model = manifest(framework, kwargs={"width": WIDTH})
    store = tmp_path / "models"
    # When one predictor process evaluates it, then another
    first = in_a_predictor_process(job(model, shared_cache, store))
    second = in_a_predictor_process(job(model, shared_cache, store))
    # Then both measured a cold start and a warm one; the first published the weights, the second
    # found them in the store
    for result in (first, second):
        cold = result["cold_start"]
        assert cold["load_ms"] > 0 and cold["first_inference_ms"] > 0
        assert cold["warm_load_ms"] > 0 and cold["warm_first_inference_ms"] > 0
        assert cold["warm_shared_mb"] > 15
        assert result["measurements"][0]["latency_ms"]["count"] >= 5
    assert first["cold_start"]["warm_source"] == "published"
    assert second["cold_start"]["warm_source"] == "store"
    # And the second process read (read(), not page faults) far less than the weights while loading warm
    assert second["cold_start"]["warm_read_mb"] < 0.1 * second["cold_start"]["warm_shared_mb"]
    # And the store holds the model once
    assert len(ModelStore(store, MB).entries()) == 1


# Run in a predictor process of its own: map the store's entry into a PyTorch predictor, count what
# the load read, look the mapping up in /proc/self/smaps; then read the file, which the count must see.
_MAP_AND_LOOK = """
import json, sys
from pathlib import Path
from mlscope.contract.manifest import parse_manifest
from mlscope.runtime.model_store import ModelStore
from mlscope.runtime.predictors.inputs import synthetic_batch
from mlscope.runtime.predictors.pytorch.predictor import PyTorchPredictor
from mlscope.runtime.warm_start import read_chars
import numpy as np

document, store_dir, key = json.loads(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
model = parse_manifest(document, origin="test")
predictor = PyTorchPredictor(manifest=model)
store = ModelStore(store_dir, 2**30)
before = read_chars()
predictor.load_mapped(store.open(key))
loaded = read_chars()
predictor.predict(predictor.prepare(synthetic_batch(model, 2, np.random.default_rng(0))))
weights = str(store_dir / key / "weights.bin")
mapping, rss_kb = None, 0
with open("/proc/self/smaps") as smaps:
    lines = smaps.read().splitlines()
for index, line in enumerate(lines):
    if line.endswith(weights):
        mapping = line.split()[1]
        rss_kb = next(int(l.split()[1]) for l in lines[index + 1:] if l.startswith("Rss:"))
        break
start = read_chars()
with open(weights, "rb") as file:
    size = len(file.read())
print(json.dumps({"load_read": loaded - before, "control_read": read_chars() - start, "size": size,
                  "perms": mapping, "rss_kb": rss_kb}))
"""


def test_a_warm_process_maps_the_store_file_shared_and_a_read_of_it_would_show(
    tmp_path: Path, shared_cache: Path
) -> None:
    # Given a model published to the store by one predictor process
    model = manifest("pytorch", kwargs={"width": WIDTH})
    store = tmp_path / "models"
    in_a_predictor_process(job(model, shared_cache, store))
    key = entry_key("pytorch", model.sha256, 0, "", model.name)
    # When another process loads it from the store and runs it
    seen, _ = python("-c", _MAP_AND_LOOK, json.dumps(model.to_dict()), str(store), key)
    # Then the store's file is mapped read-only and shared, its pages resident after an inference
    assert seen["perms"] == "r--s", seen
    assert seen["rss_kb"] * 1024 > 0.9 * seen["size"]
    # And the load read a small fraction of it, while reading the file is counted in full
    assert seen["control_read"] >= seen["size"] > 15 * MB
    assert seen["load_read"] < 0.1 * seen["size"]


# The same for ONNX Runtime, whose entry is its own optimised graph and external data file (weights
# and pre-packed weights), mapped by ONNX Runtime itself: count what the load read and what memory of
# its own the process gained, look the data file up in /proc/self/smaps; then read it.
_ORT_MAP_AND_LOOK = """
import json, sys
from pathlib import Path
import numpy as np
from mlscope.contract.manifest import parse_manifest
from mlscope.runtime.model_store import ModelStore
from mlscope.runtime.predictors.inputs import synthetic_batch
from mlscope.runtime.predictors.onnxruntime.predictor import OnnxRuntimePredictor
from mlscope.runtime.predictors.onnxruntime.warm import DATA_FILE
from mlscope.runtime.warm_start import read_chars

def anonymous_kb():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("RssAnon:"))

document, store_dir, key, cache = json.loads(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4])
model = parse_manifest(document, origin="test")
predictor = OnnxRuntimePredictor(manifest=model, cache_dir=cache)
store = ModelStore(store_dir, 2**30)
anonymous, before = anonymous_kb(), read_chars()
predictor.load_mapped(store.open(key))
loaded, grown_kb = read_chars(), anonymous_kb() - anonymous
predictor.predict(predictor.prepare(synthetic_batch(model, 2, np.random.default_rng(0))))
data = str(store_dir / key / DATA_FILE)
perms, rss_kb = set(), 0
with open("/proc/self/smaps") as smaps:
    lines = smaps.read().splitlines()
for index, line in enumerate(lines):
    if line.endswith(data):
        perms.add(line.split()[1])
        rss_kb += next(int(l.split()[1]) for l in lines[index + 1:] if l.startswith("Rss:"))
start = read_chars()
with open(data, "rb") as file:
    size = len(file.read())
print(json.dumps({"load_read": loaded - before, "control_read": read_chars() - start, "size": size,
                  "perms": sorted(perms), "rss_kb": rss_kb, "anonymous_grown_kb": grown_kb}))
"""


def test_a_warm_onnxruntime_process_maps_the_stored_weights_and_pre_packed_weights_and_copies_neither(
    tmp_path: Path, shared_cache: Path
) -> None:
    # Given a model of 16 MB of weights published to the store by one ONNX Runtime predictor process:
    # its optimised graph, and a data file with its weights and the weights its GEMMs pre-pack
    model = manifest("onnxruntime", kwargs={"width": WIDTH})
    store = tmp_path / "models"
    published = in_a_predictor_process(job(model, shared_cache, store))["cold_start"]
    ((key, _, _, _),) = ModelStore(store, MB).entries()
    assert published["warm_shared_mb"] > 1.5 * 16.4  # the pre-packed copies are in the store too
    # When another process loads it from the store and runs it
    arguments = [json.dumps(model.to_dict()), str(store), key, str(shared_cache)]
    seen, _ = python("-c", _ORT_MAP_AND_LOOK, *arguments)
    # Then ONNX Runtime mapped the store's data file (privately: a write would copy the page for this
    # process alone), and pages of it are resident after an inference
    assert seen["perms"] and all(p.startswith("r") and p.endswith("p") for p in seen["perms"]), seen
    assert seen["rss_kb"] * 1024 > 16 * MB
    # And the load read a small fraction of it, while reading the file is counted in full
    assert seen["control_read"] >= seen["size"] > 30 * MB
    assert seen["load_read"] < 0.1 * seen["size"]
    # And the process gained far less memory of its own than the stored form: neither the weights nor
    # their pre-packed copies were copied into it (the earlier stored form, initialisers handed over
    # with add_external_initializers, made the process hold both: about the whole stored form)
    assert seen["anonymous_grown_kb"] * 1024 < 0.5 * seen["size"], seen


@pytest.mark.parametrize(("framework", "factory"), [("pytorch", "tied_net"), ("onnxruntime", "tied_net")])
def test_a_warm_model_answers_as_the_cold_one(
    framework: str, factory: str, tmp_path: Path, shared_cache: Path
) -> None:
    # Given a model with tied weights, batch-norm statistics and a buffer outside its state dict,
    # loaded cold
    from mlscope.runtime.frameworks import load_predictor_class

    model = manifest(framework, factory)
    predictor_class = load_predictor_class(framework)
    cold = predictor_class(manifest=model, cache_dir=shared_cache)
    cold.fetch()
    cold.load()
    batch = synthetic_batch(model, 4, np.random.default_rng(1))
    expected = cold.outputs_to_numpy(cold.predict(cold.prepare(batch)))["y"]
    # When its weights are published and it is loaded again from the store
    store = ModelStore(tmp_path, 64 * MB)
    key = entry_key(framework, model.sha256, 0, cold.warm_variant() or "", model.name)
    store.publish(key, cold.weights_to_store()).close()
    cold.close()
    warm = predictor_class(manifest=model, cache_dir=shared_cache)
    warm.fetch()
    mapped = store.open(key)
    assert mapped is not None
    warm.load_mapped(mapped)
    # Then it answers the same: bitwise on ONNX Runtime, whose warm session runs the cold one's
    # kernels on the same (pre-packed) weights
    answer = warm.outputs_to_numpy(warm.predict(warm.prepare(batch)))["y"]
    np.testing.assert_allclose(answer, expected, rtol=1e-5, atol=1e-6)
    if framework == "onnxruntime":
        np.testing.assert_array_equal(answer, expected)
    warm.close()
    # And once closed, nothing references the entry: it may be evicted
    assert store.entries()[0][3] is False


def test_a_budget_smaller_than_the_model_fails_the_evaluation_clearly(
    tmp_path: Path, shared_cache: Path
) -> None:
    # Given a store with a 4 MB budget and a model of 16 MB
    model = manifest("pytorch", kwargs={"width": WIDTH})
    store = tmp_path / "models"
    # When it is evaluated
    with pytest.raises(JobFailed) as failed:
        execute(job(model, shared_cache, store, budget_mb=4), lambda event: None)
    # Then the evaluation fails in the publish phase, naming the model's size, the budget and the setting
    error = failed.value
    assert (error.type, error.phase) == ("UserError", "publish")
    assert "16.4 MB" in error.message and "4.0 MB" in error.message and "model_store_mb" in error.message
    # And nothing was written to the store
    assert ModelStore(store, MB).entries() == []


def test_mlscope_run_records_and_shows_the_warm_start(mlscope_env: dict[str, str], tmp_path: Path) -> None:
    # Given a machine with a 64 MB model store
    env = {**mlscope_env, "MLSCOPE_MODEL_STORE_MB": "64", "MLSCOPE_MODEL_STORE_DIR": str(tmp_path / "models")}
    # When a model is run twice, each time in a predictor process of its own
    runs = [mlscope(env, "run", "test_tiny_mlp", "-f", "pytorch", "--json", *FAST) for _ in range(2)]
    assert all(done.returncode == 0 for done in runs), [done.stderr for done in runs]
    first, second = (json_lines(done.stdout)[0] for done in runs)
    # Then the stored results carry the warm start: published by the first, found by the second
    assert first["cold_start"]["warm_source"] == "published"
    assert second["cold_start"]["warm_source"] == "store" and second["cold_start"]["warm_load_ms"] > 0
    assert {"import_ms", "load_ms", "first_inference_ms"} <= set(second["cold_start"])
    # And `mlscope results show` prints them
    shown = mlscope(env, "results", "show", second["id"])
    assert shown.returncode == 0, shown.stderr
    assert "warm_load_ms" in shown.stdout and "warm_source store" in shown.stdout
    # And without a store no warm key is recorded, not even zero-filled
    plain = mlscope(mlscope_env, "run", "test_tiny_mlp", "-f", "pytorch", "--json", *FAST)
    assert plain.returncode == 0, plain.stderr
    assert not [
        key
        for key in json_lines(plain.stdout)[0]["cold_start"]
        if key.startswith("warm_") and key != "warm_process"
    ]
