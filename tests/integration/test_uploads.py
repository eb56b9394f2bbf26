"""Own models on a farm: an ONNX file uploaded to a real `mlscope api` (waitress), evaluated by a real
`mlscope worker` that fetches it into its own cache, on the real Redis and PostgreSQL.

The api and the worker get cache directories of their own, so the worker's copy can only have come
over HTTP; the api's Prometheus counter of answered downloads says how often it did. The broker does
not matter to uploads, so these run on Redis only (the other farm tests cover RabbitMQ), in a Redis
database of their own. Given / When / Then in each test's comments.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import requests
from prometheus_client.parser import text_string_to_metric_families

from mlscope.client import ApiError, Client
from mlscope.registry.agents import AgentRegistry
from mlscope.runtime.predictors.files import file_sha256
from tests.fixtures.onnx_graphs import onnx_model
from tests.fixtures.services import unavailable
from tests.integration.farm import TOKEN, Farm
from tests.integration.test_run_cli import ran_valid

UPLOADS_REDIS_URL = "redis://127.0.0.1:6379/10"
QUICK = {"warmup_count": 2, "warmup_seconds": 0.0, "min_count": 10, "min_seconds": 0.1, "max_seconds": 3}
# The machine's other load and any spread allowed: a small model's point is then valid, and a test
# that submits one asserts it (these tests check uploads, not the machine's quiet).
ANY_LOAD = ("--measure", "contention_limit=1.0", "--measure", "stability=0.99")
SMALL_CAP = 4096


@pytest.fixture
def make_farm(tmp_path: Path, postgres_url: str) -> Iterator[Any]:
    """Farms on Redis database 10 (emptied first), each process with the cache directory it is
    started with; stopped afterwards."""
    connection = redis.Redis.from_url(UPLOADS_REDIS_URL, socket_connect_timeout=3)
    try:
        connection.flushdb()
    except redis.RedisError as exc:
        unavailable(f"Redis at {UPLOADS_REDIS_URL} is unreachable: {exc}")
    made: list[Farm] = []

    def make(name: str, **env: str) -> Farm:
        folder = tmp_path / name
        folder.mkdir()
        farm = Farm(
            broker_url=UPLOADS_REDIS_URL, store_url=postgres_url, tmp=folder, cache_dir=folder / "cache"
        )
        farm.registry.close()
        farm.registry = AgentRegistry(UPLOADS_REDIS_URL, ttl_s=3)
        farm.env.update({"MLSCOPE_REGISTRY_URL": UPLOADS_REDIS_URL, **env})
        made.append(farm)
        return farm

    yield make
    for farm in made:
        farm.stop()
    connection.flushdb()
    connection.close()


def downloads(farm: Farm) -> float:
    """How many downloads of an uploaded model's file the api has answered 200, by its metrics."""
    text = requests.get(f"{farm.api_url}/api/v1/metrics", timeout=10).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "mlscope_api_requests_total"
        and sample.labels["endpoint"].endswith("/file")
        and sample.labels["status"] == "200"
    )


def leftovers(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.iterdir()) if directory.exists() else []


def _api_and_worker(make_farm: Any, tmp_path: Path, queue: str, agent: str) -> tuple[Farm, str, Path, Path]:
    """A farm whose api and worker have caches of their own: (farm, capability, api cache, worker cache)."""
    farm: Farm = make_farm("farm")
    api_cache, worker_cache = tmp_path / "api-cache", tmp_path / "worker-cache"
    farm.env["MLSCOPE_CACHE_DIR"] = str(api_cache)
    farm.start_api()
    farm.env["MLSCOPE_CACHE_DIR"] = str(worker_cache)
    capability = farm.capability(queue)
    farm.start_worker(agent, capability)
    return farm, capability, api_cache, worker_cache


def test_an_uploaded_model_is_fetched_by_the_worker_once_and_evaluated(
    make_farm: Any, tmp_path: Path
) -> None:
    # Given an api and a worker with caches of their own, and an ONNX file on the submitter's machine
    farm, capability, api_cache, worker_cache = _api_and_worker(make_farm, tmp_path, "up", "uploader-agent")
    model = onnx_model(tmp_path / "Tiny Net.onnx")
    digest = file_sha256(model)

    # When `mlscope submit ./Tiny Net.onnx` runs
    submitted = subprocess.run(
        [sys.executable, "-m", "mlscope", "submit", str(model), "-f", "onnxruntime", "--on", capability,
         "--min-seconds", "0.1", "--max-seconds", "3", *ANY_LOAD, "--wait", "--wait-timeout", "120",
         "--json"],
        env={**farm.env, "MLSCOPE_CACHE_DIR": str(tmp_path / "cli-cache")},
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip

    # Then it uploaded the file (saying its ref), and the evaluation of sha256:<hex> succeeded, valid
    [result] = ran_valid(submitted)
    assert f"uploaded {model} (tiny-net, {model.stat().st_size} bytes): sha256:{digest}" in submitted.stderr
    assert result["status"] == "succeeded", result["error"]
    assert result["model"]["name"] == "tiny-net" and result["request"]["model"] == f"sha256:{digest}"
    assert result["manifest"]["source"] == {"onnx": {"url": f"sha256:{digest}", "sha256": digest}}
    # ... kept once by the api, and fetched once into the worker's cache, with the right hash
    assert leftovers(api_cache / "uploads") == [f"{digest}.json", f"{digest}.onnx"]
    cached = worker_cache / "models" / f"{digest}.onnx"
    assert file_sha256(cached) == digest
    assert not [name for name in leftovers(cached.parent) if name.endswith(".partial")]
    assert downloads(farm) == 1
    before = cached.stat()

    # When the same bytes are uploaded again, and evaluated again
    again = farm.client.upload_model(model)
    second = farm.client.submit(
        {"model": again["ref"], "framework": "onnxruntime", "target": capability, "measure": QUICK}
    )
    (ended,) = farm.client.wait([second["id"]], timeout_s=120)

    # Then the upload is answered as before (200, not 201), and the worker used its cached copy
    assert again["created"] is False and again["ref"] == f"sha256:{digest}" and again["name"] == "tiny-net"
    assert ended["status"] == "succeeded", ended["error"]
    assert downloads(farm) == 1
    after = cached.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_bytes_that_differ_from_their_digest_fail_the_evaluation_and_are_not_kept(
    make_farm: Any, tmp_path: Path
) -> None:
    # Given an uploaded model whose stored file was then replaced (another valid graph, same name)
    farm, capability, api_cache, worker_cache = _api_and_worker(make_farm, tmp_path, "bad", "mismatch-agent")
    answer = farm.client.upload_model(onnx_model(tmp_path / "tiny.onnx"))
    digest = answer["sha256"]
    onnx_model(api_cache / "uploads" / f"{digest}.onnx", seed=1)

    # When it is evaluated
    accepted = farm.client.submit(
        {"model": answer["ref"], "framework": "onnxruntime", "target": capability, "measure": QUICK}
    )
    (result,) = farm.client.wait([accepted["id"]], timeout_s=120)

    # Then the evaluation failed while fetching, saying why, and the worker kept nothing
    assert result["status"] == "failed"
    error = result["error"]
    assert (error["type"], error["phase"]) == ("ModelFetchError", "fetch")
    assert (
        f"have SHA-256 {file_sha256(api_cache / 'uploads' / f'{digest}.onnx')}, not {digest}"
        in error["message"]
    )
    assert leftovers(worker_cache / "models") in ([], [f"{digest}.lock"])


def test_bad_uploads_and_local_references_are_refused_and_leave_nothing(
    make_farm: Any, tmp_path: Path
) -> None:
    # Given an api that takes files of at most 4096 bytes
    farm: Farm = make_farm("small", MLSCOPE_MAX_UPLOAD_BYTES=str(SMALL_CAP))
    upload_dir = farm.tmp / "cache" / "uploads"
    farm.start_api()
    big = onnx_model(tmp_path / "big.onnx", features=256)
    small = onnx_model(tmp_path / "small.onnx")
    assert big.stat().st_size > SMALL_CAP > small.stat().st_size

    # When a larger file is uploaded: 413, naming the cap; nothing is kept
    with pytest.raises(ApiError) as caught:
        farm.client.upload_model(big)
    assert caught.value.status == 413 and caught.value.problem["max_upload_bytes"] == SMALL_CAP
    assert "larger than 4096 bytes" in caught.value.errors["file"][0]
    assert leftovers(upload_dir) == []

    # When a truncated file is uploaded: 422 naming the field `file`; nothing is kept
    truncated = tmp_path / "truncated.onnx"
    truncated.write_bytes(small.read_bytes()[:-40])
    with pytest.raises(ApiError) as caught:
        farm.client.upload_model(truncated)
    assert caught.value.status == 422 and caught.value.field == "file"
    assert "truncated.onnx: not a valid ONNX model" in caught.value.errors["file"][0]
    assert leftovers(upload_dir) == []

    # When an upload or a download comes without a token: 401
    with pytest.raises(ApiError) as caught:
        Client(farm.api_url, "", timeout_s=30).upload_model(small)
    assert caught.value.status == 401
    answer = farm.client.upload_model(small)
    assert answer["created"] is True and leftovers(upload_dir) == sorted(
        [f"{answer['sha256']}.json", f"{answer['sha256']}.onnx"]
    )
    file_url = f"{farm.api_url}/api/v1/models/{answer['ref']}/file"
    assert requests.get(file_url, timeout=10).status_code == 401
    downloaded = requests.get(file_url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
    assert downloaded.status_code == 200 and downloaded.content == small.read_bytes()
    assert farm.client.model(answer["ref"]) == {k: v for k, v in answer.items() if k != "created"}

    # When a submission names an unknown upload, a Python factory or a path on the submitter's machine
    refused = {
        "sha256:"
        + "0" * 64: "no model with this SHA-256 was uploaded to this API; upload the ONNX file first",
        "./net.py:make_model": "Python factories are not accepted here (no code travels over the wire); "
        "upload the exported ONNX file instead",
        "./models/net.onnx": "a path on your machine means nothing here; upload an ONNX file",
    }
    for ref, message in refused.items():
        with pytest.raises(ApiError) as caught:
            farm.client.submit({"model": ref, "framework": "onnxruntime", "model_options": {}})
        # Then each is a 422 naming the field `model`, saying why and what to do
        assert caught.value.status == 422 and caught.value.field == "model", ref
        assert message in caught.value.errors["model"][0], caught.value.errors

    # ... and the CLI shows the API's message as one line, exit code 2
    (tmp_path / "my-model").mkdir()
    for argv in (
        ["submit", "./net.py:make_model", "-f", "pytorch", "--input-shape", "1x16"],
        ["compare", "-m", "./my-model/", "-f", "pytorch", "-o", str(tmp_path / "cmp")],
    ):
        ran = subprocess.run(
            [sys.executable, "-m", "mlscope", *argv], env=farm.env, cwd=tmp_path, capture_output=True,
            text=True, timeout=60, check=False,
        )  # fmt: skip
        assert ran.returncode == 2, ran.stderr
        assert ran.stderr.count("\n") == 1 and ran.stderr.startswith(
            "mlscope: error: POST /api/v1/evaluations"
        )
        assert ": 422 ./" in ran.stderr


def test_a_dataset_folder_is_uploaded_by_submit_and_scored_on_the_worker(
    make_farm: Any, tmp_path: Path
) -> None:
    from PIL import Image

    from mlscope.runtime.data.digits import digits_split

    # Given an api and a worker with caches of their own, and a folder of 20 digits by class here
    farm, capability, _, worker_cache = _api_and_worker(make_farm, tmp_path, "ds", "dataset-agent")
    images, labels = digits_split("test")
    folder = tmp_path / "my digits"
    folder.mkdir()
    # The model's ten classes in its order, whichever digits the 20 samples happen to hold
    (folder / "classes.txt").write_text("".join(f"{digit}\n" for digit in range(10)))
    for index in range(20):
        (folder / str(labels[index])).mkdir(parents=True, exist_ok=True)
        Image.fromarray(images[index]).save(folder / str(labels[index]) / f"{index}.png")

    # When `mlscope submit MODEL --dataset ./my digits` runs
    submitted = subprocess.run(
        [sys.executable, "-m", "mlscope", "submit", "test_digits_conv", "-f", "pytorch", "--on", capability,
         "--dataset", str(folder), "--min-seconds", "0.1", "--max-seconds", "3", *ANY_LOAD, "--wait",
         "--wait-timeout", "120", "--json"],
        env={**farm.env, "MLSCOPE_CACHE_DIR": str(tmp_path / "cli-cache")},
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip

    # Then the folder went up as a zip, named by its digest, and the worker scored all 20 samples
    [result] = ran_valid(submitted)
    assert f"uploaded dataset {folder}: sha256:" in submitted.stderr
    assert result["status"] == "succeeded", result["error"]
    assert result["request"]["dataset"].startswith("sha256:")
    assert result["accuracy"]["count"] == 20 and result["accuracy"]["dataset"] == result["request"]["dataset"]
    assert (worker_cache / "datasets").is_dir()
