"""Datasets uploaded to a real `mlscope api` (waitress) as a zip, and fetched by a worker's
DatasetFetcher into a cache of its own, where `resolve_dataset("sha256:<hex>")` materialises it.
Given / When / Then in the test's comments.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import redis
import requests
from PIL import Image

from mlscope.contract.settings import load_settings
from mlscope.registry.datasets import resolve_dataset
from mlscope.runtime.data import iter_batches
from mlscope.workers.dataset_fetch import DatasetFetcher
from tests.fixtures.services import unavailable
from tests.integration.farm import TOKEN, Farm

UPLOADS_REDIS_URL = "redis://127.0.0.1:6379/10"
CAP = 64 * 1024


def png(value: int) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(np.full((8, 8, 3), value, dtype=np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


def zipped(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


@pytest.fixture
def farm(tmp_path: Path, postgres_url: str) -> Iterator[Farm]:
    """An api alone (no worker: the fetcher plays the worker's part) with a dataset cap of 64 KiB."""
    connection = redis.Redis.from_url(UPLOADS_REDIS_URL, socket_connect_timeout=3)
    try:
        connection.ping()
    except redis.RedisError as exc:
        unavailable(f"Redis at {UPLOADS_REDIS_URL} is unreachable: {exc}")
    made = Farm(
        broker_url=UPLOADS_REDIS_URL, store_url=postgres_url, tmp=tmp_path, cache_dir=tmp_path / "api"
    )
    made.env.update({"MLSCOPE_REGISTRY_URL": UPLOADS_REDIS_URL, "MLSCOPE_MAX_DATASET_BYTES": str(CAP)})
    made.start_api()
    yield made
    made.stop()
    connection.close()


def test_a_dataset_zip_is_uploaded_once_fetched_and_resolved_and_bad_ones_are_refused(
    farm: Farm, tmp_path: Path
) -> None:
    url = f"{farm.api_url}/api/v1/datasets"
    auth = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/octet-stream"}
    body = zipped(
        {"shapes/square/a.png": png(10), "shapes/square/b.png": png(20), "shapes/circle/c.png": png(30)}
    )

    # When a zip of an ImageFolder is uploaded, twice
    first = requests.post(url, params={"filename": "shapes.zip"}, data=body, headers=auth, timeout=30)
    second = requests.post(url, data=body, headers=auth, timeout=30)

    # Then it is kept once: 201 then 200, described by its SHA-256
    assert first.status_code == 201, first.text
    answer = first.json()
    assert answer["count"] == 3 and answer["classes"] == ["circle", "square"] and answer["name"] == "shapes"
    assert second.status_code == 200 and second.json() == answer
    assert first.headers["Location"].endswith(f"/api/v1/datasets/{answer['ref']}")
    assert requests.get(f"{url}/{answer['ref']}", timeout=10).json() == answer
    # ... and its file needs a token
    assert requests.get(f"{url}/{answer['ref']}/file", timeout=10).status_code == 401
    downloaded = requests.get(f"{url}/{answer['ref']}/file", headers=auth, timeout=10)
    assert downloaded.status_code == 200 and downloaded.content == body

    # When a worker with a cache of its own resolves sha256:<hex>
    worker = load_settings(
        {**farm.env, "MLSCOPE_CACHE_DIR": str(tmp_path / "worker"), "MLSCOPE_API_TOKEN": TOKEN}
    )
    ref = resolve_dataset(answer["ref"], worker.cache_dir, uploads=DatasetFetcher(worker), max_bytes=CAP)

    # Then it fetched the zip and materialised the images in ImageFolder order
    assert (tmp_path / "worker" / "datasets" / "uploaded" / f"{answer['sha256']}.zip").read_bytes() == body
    (batch,) = iter_batches(ref, 8)
    assert batch.labels.tolist() == [0, 1, 1] and ref.classes == ("circle", "square")
    assert batch.samples[0] == png(30)

    # When bad zips come: 422 naming the field `file` (and the member), 413 over the cap, 401 without a token
    refused = {
        b"PK not really": (422, "not a readable zip file"),
        zipped({"cls/ok.png": png(1), "cls/bad.png": b"\x89PNG broken"}): (422, "cls/bad.png: not an image"),
        zipped({"cls/noise.png": np.random.default_rng(0).bytes(CAP + 1)}): (413, f"larger than {CAP} bytes"),
        zipped({"cls/zeros.png": bytes(CAP + 1)}): (
            422,
            f"{CAP + 1} bytes uncompressed, more than the {CAP}",
        ),
    }
    for data, (status, message) in refused.items():
        answered = requests.post(url, params={"filename": "bad.zip"}, data=data, headers=auth, timeout=30)
        assert answered.status_code == status, answered.text
        assert message in answered.json()["errors"]["file"][0]
    assert (
        requests.post(
            url, data=body, headers={"Content-Type": "application/octet-stream"}, timeout=10
        ).status_code
        == 401
    )
    kept = sorted(p.name for p in (tmp_path / "api" / "dataset-uploads").iterdir())
    assert kept == sorted([f"{answer['sha256']}.json", f"{answer['sha256']}.zip"])
