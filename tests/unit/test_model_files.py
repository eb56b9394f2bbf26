"""Uploaded models without a server: the content-addressed directory (what is kept, and that a failed
upload keeps nothing), the registry of a farm's api and workers (uploads resolved, local references
refused before any file is looked at), the predictor finding an upload in its cache, the setting.
The HTTP side, with a real api and worker, is tests/integration/test_uploads.py."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from mlscope.contract.errors import UserError
from mlscope.contract.settings import DEFAULT_MAX_UPLOAD_BYTES, Settings, load_settings
from mlscope.registry.models import ModelRegistry
from mlscope.registry.uploads import DigestMismatch, ModelFiles, UploadTooLarge
from mlscope.runtime.predictors.base import PredictorError
from mlscope.runtime.predictors.files import file_sha256, model_file
from tests.fixtures.onnx_graphs import onnx_model


def chunks_of(data: bytes, size: int = 100) -> Iterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


@pytest.fixture
def graph(tmp_path: Path) -> bytes:
    return onnx_model(tmp_path / "source.onnx").read_bytes()


def test_an_upload_is_kept_by_its_digest_once(tmp_path: Path, graph: bytes) -> None:
    files = ModelFiles(tmp_path / "uploads")
    first, created = files.add(chunks_of(graph), filename="../secret/My Model.onnx")
    again, created_again = files.add(chunks_of(graph), filename="other.onnx")
    assert created and not created_again and again == first
    assert (first.filename, first.name, first.size) == ("My Model.onnx", "my-model", len(graph))
    assert first.inputs == [{"name": "x", "dtype": "float32", "shape": ["batch", 16]}]
    assert first.outputs == ["y"]
    kept = sorted(p.name for p in files.directory.iterdir())
    assert kept == [f"{first.sha256}.json", f"{first.sha256}.onnx"]
    assert file_sha256(files.path(first.sha256)) == first.sha256


@pytest.mark.parametrize("case", ["too large", "not onnx", "sender gone"])
def test_a_failed_upload_leaves_nothing(tmp_path: Path, graph: bytes, case: str) -> None:
    files = ModelFiles(tmp_path / "uploads")

    def cut_off() -> Iterator[bytes]:
        yield graph[:100]
        raise ConnectionResetError("the client went away")

    with pytest.raises((UploadTooLarge, UserError, ConnectionResetError)) as caught:
        if case == "too large":
            files.add(chunks_of(graph), max_bytes=len(graph) - 1)
        elif case == "not onnx":
            files.add(chunks_of(graph[:-30]), filename="cut.onnx")
        else:
            files.add(cut_off())
    if case != "sender gone":
        assert isinstance(caught.value, UserError) and caught.value.field == "file"
    assert list(files.directory.iterdir()) == []


def test_fetched_bytes_of_another_digest_are_not_kept(tmp_path: Path, graph: bytes) -> None:
    model, _ = ModelFiles(tmp_path / "api").add(chunks_of(graph))
    cache = ModelFiles(tmp_path / "cache")
    with pytest.raises(DigestMismatch, match=f"not {model.sha256}"):
        cache.put(chunks_of(graph[:-1] + b"\0"), model)
    assert list(cache.directory.iterdir()) == []
    assert file_sha256(cache.put(chunks_of(graph), model)) == model.sha256


def test_the_farm_registry_resolves_uploads_and_refuses_local_references(
    tmp_path: Path, graph: bytes
) -> None:
    files = ModelFiles(tmp_path / "uploads")
    model, _ = files.add(chunks_of(graph), filename="tiny.onnx")
    registry = ModelRegistry(local_files=False, uploads=files.lookup)
    manifest = registry.get(model.ref, "onnxruntime")
    assert manifest.name == "tiny" and manifest.source.target == model.ref
    assert manifest.attributes["file"] == "tiny.onnx"
    with pytest.raises(UserError, match="no model with this SHA-256 was uploaded") as caught:
        registry.frameworks_for("sha256:" + "1" * 64)
    assert caught.value.field == "model"
    # A path that exists on this machine is refused all the same: it names the submitter's file.
    (tmp_path / "here.onnx").write_bytes(graph)
    for ref, why in (
        (str(tmp_path / "here.onnx"), "a path on your machine means nothing here"),
        ("./no/such/dir/", "a path on your machine means nothing here"),
        ("net.py:make_model", "Python factories are not accepted here"),
    ):
        with pytest.raises(UserError, match=why) as caught:
            registry.get(ref, "onnxruntime")
        assert caught.value.field == "model"


def test_the_predictor_finds_an_upload_in_its_cache_and_checks_it(tmp_path: Path, graph: bytes) -> None:
    model, _ = ModelFiles(tmp_path / "cache" / "models").add(chunks_of(graph))
    assert model_file(model.ref, model.sha256, tmp_path / "cache") == tmp_path / "cache" / "models" / (
        f"{model.sha256}.onnx"
    )
    with pytest.raises(PredictorError, match="not in the cache"):
        model_file(model.ref, model.sha256, tmp_path / "elsewhere")
    (tmp_path / "cache" / "models" / f"{model.sha256}.onnx").write_bytes(graph + b"\0")
    with pytest.raises(PredictorError, match="the manifest expects"):
        model_file(model.ref, model.sha256, tmp_path / "cache")


def test_the_upload_cap_is_a_setting() -> None:
    assert Settings().max_upload_bytes == DEFAULT_MAX_UPLOAD_BYTES == 2147483648
    no_file = {"MLSCOPE_SETTINGS": "/nonexistent"}
    assert load_settings({"MLSCOPE_MAX_UPLOAD_BYTES": "4096", **no_file}).max_upload_bytes == 4096
    for bad in ("0", "2 GiB"):
        with pytest.raises(UserError, match="max_upload_bytes") as caught:
            load_settings({"MLSCOPE_MAX_UPLOAD_BYTES": bad, **no_file})
        assert caught.value.field == "max_upload_bytes"


def test_the_docker_prefetch_checks_an_upload_in_the_cache_and_adds_no_mount(
    tmp_path: Path, graph: bytes
) -> None:
    from mlscope.contract.options import PredictorOptions
    from mlscope.runtime.predictors.onnxruntime.export import prefetch_on_host

    # The container mounts the whole cache, where the worker fetched the upload.
    files = ModelFiles(tmp_path / "cache" / "models")
    model, _ = files.add(chunks_of(graph))
    manifest = ModelRegistry(local_files=False, uploads=files.lookup).get(model.ref, "onnxruntime")
    assert prefetch_on_host(manifest, PredictorOptions(), tmp_path / "cache", timeout_s=5) == ()
    with pytest.raises(PredictorError, match="not in the cache"):
        prefetch_on_host(manifest, PredictorOptions(), tmp_path / "other", timeout_s=5)


@pytest.mark.parametrize("size", [0, 1, (1 << 20) + 7, 3 << 20])
def test_file_sha256_is_the_digest_of_the_whole_file(tmp_path: Path, size: int) -> None:
    data = bytes(range(256)) * (size // 256) + bytes(size % 256)
    path = tmp_path / "blob"
    path.write_bytes(data)
    assert file_sha256(path) == hashlib.sha256(data).hexdigest()
