"""An ONNX file's graph signature kept in the cache directory by the file's SHA-256: the same bytes
resolved again are read from the entry (no onnx import, no parse), other bytes are read afresh, an
entry that cannot be read back is written anew, and a file that fails onnx's checker leaves none."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from mlscope.contract.errors import UserError
from mlscope.contract.manifest import ManifestError
from mlscope.registry.models import ModelRegistry
from mlscope.registry.onnx_files import onnx_file_manifest, signature_cache_path
from mlscope.registry.uploads import ModelFiles
from mlscope.runtime.predictors.files import file_sha256
from tests.fixtures.onnx_graphs import onnx_model

NEEDS_ONNX = "reading an ONNX file's inputs needs the onnx package"


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    return tmp_path / "cache"


def resolved_inputs(path: Path, cache: Path | None) -> list[dict[str, object]]:
    """The inputs of the file's manifest: name, dtype, per-sample shape."""
    manifest = ModelRegistry(cache_dir=cache).get(str(path), "onnxruntime")
    return [{"name": spec.name, "dtype": spec.dtype, "shape": list(spec.shape)} for spec in manifest.inputs]


def test_the_same_file_resolved_again_is_read_from_its_entry_without_onnx(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    graph = onnx_model(tmp_path / "model.onnx")
    fresh = onnx_model(tmp_path / "other.onnx", seed=1)  # made while onnx can still be imported
    first = ModelRegistry(cache_dir=cache).get(str(graph), "onnxruntime")
    entry = signature_cache_path(cache, file_sha256(graph))
    assert json.loads(entry.read_text()) == {
        "format": 1,
        "inputs": [{"name": "x", "dtype": "float32", "dims": ["batch", 16]}],
        "outputs": ["y"],
        "opset": 17,
    }
    # With onnx unimportable, the kept entry still answers, and only it.
    monkeypatch.setitem(sys.modules, "onnx", None)
    again = ModelRegistry(cache_dir=cache).get(str(graph), "onnxruntime")
    assert again.to_dict() == first.to_dict()
    with pytest.raises(UserError, match=NEEDS_ONNX):
        ModelRegistry(cache_dir=cache).get(str(fresh), "onnxruntime")
    with pytest.raises(UserError, match=NEEDS_ONNX):
        ModelRegistry().get(str(graph), "onnxruntime")  # no cache directory: nothing kept is read


def test_a_file_of_other_bytes_at_the_same_path_is_read_afresh(tmp_path: Path, cache: Path) -> None:
    path = onnx_model(tmp_path / "model.onnx", features=16)
    before = file_sha256(path)
    assert resolved_inputs(path, cache) == [{"name": "x", "dtype": "float32", "shape": [16]}]
    onnx_model(path, features=32)
    assert resolved_inputs(path, cache) == [{"name": "x", "dtype": "float32", "shape": [32]}]
    after = file_sha256(path)
    assert before != after
    assert signature_cache_path(cache, before).is_file() and signature_cache_path(cache, after).is_file()
    assert json.loads(signature_cache_path(cache, after).read_text())["inputs"][0]["dims"] == ["batch", 32]


ENTRY = '{"format": 1, "inputs": [{"name": "x", "dtype": "float32", "dims": ["batch", 16]}], "outputs": ["y"]'
UNREADABLE = {
    "not-json": b"not json",
    "not-utf8": b"\xff\xfe",
    "truncated": ENTRY[:60].encode(),
    "empty": b"{}",
    "a-list": b"[]",
    "other-format": ENTRY.replace('"format": 1', '"format": 2').encode() + b', "opset": 17}',
    "no-inputs": b'{"format": 1, "inputs": [], "outputs": ["y"], "opset": 17}',
    "unknown-dtype": ENTRY.replace("float32", "complex").encode() + b', "opset": 17}',
    "zero-dim": ENTRY.replace("16", "0").encode() + b', "opset": 17}',
    "bool-dim": ENTRY.replace("16", "true").encode() + b', "opset": 17}',
    "output-not-a-name": ENTRY.replace('["y"]', "[3]").encode() + b', "opset": 17}',
    "opset-not-a-number": ENTRY.encode() + b', "opset": "17"}',
}


@pytest.mark.parametrize("content", UNREADABLE.values(), ids=UNREADABLE.keys())
def test_an_entry_that_cannot_be_read_back_is_ignored_and_written_anew(
    tmp_path: Path, cache: Path, content: bytes
) -> None:
    path = onnx_model(tmp_path / "model.onnx")
    entry = signature_cache_path(cache, file_sha256(path))
    entry.parent.mkdir(parents=True)
    entry.write_bytes(content)
    assert resolved_inputs(path, cache) == [{"name": "x", "dtype": "float32", "shape": [16]}]
    assert json.loads(entry.read_text()) == json.loads(ENTRY + ', "opset": 17}')
    assert [p.name for p in entry.parent.iterdir()] == [entry.name]  # no temporary file left


def test_a_file_that_fails_the_checker_leaves_no_entry(tmp_path: Path, cache: Path) -> None:
    path = tmp_path / "cut.onnx"
    path.write_bytes(onnx_model(tmp_path / "model.onnx").read_bytes()[:-30])
    for _ in range(2):  # refused the second time too: nothing was kept
        with pytest.raises(UserError, match="not a valid ONNX model"):
            resolved_inputs(path, cache)
    assert not signature_cache_path(cache, file_sha256(path)).exists()


def test_a_cache_directory_that_cannot_be_written_is_no_error(tmp_path: Path) -> None:
    path = onnx_model(tmp_path / "model.onnx")
    blocked = tmp_path / "cache"
    blocked.write_text("a file where the directory would be")
    assert resolved_inputs(path, blocked) == [{"name": "x", "dtype": "float32", "shape": [16]}]
    assert blocked.read_text() == "a file where the directory would be"


def test_a_missing_file_is_named_with_or_without_a_cache(tmp_path: Path, cache: Path) -> None:
    missing = tmp_path / "nothing.onnx"
    for directory in (cache, None):
        with pytest.raises(UserError, match=f"^{missing}: no such file$"):
            resolved_inputs(missing, directory)
    assert not cache.exists()


def test_an_uploads_signature_is_kept_under_its_digest(tmp_path: Path, cache: Path) -> None:
    files = ModelFiles(tmp_path / "uploads")
    upload, _ = files.add(iter([onnx_model(tmp_path / "model.onnx").read_bytes()]), filename="tiny.onnx")
    registry = ModelRegistry(local_files=False, uploads=files.lookup, cache_dir=cache)
    assert registry.get(upload.ref, "onnxruntime").inputs[0].shape == (16,)
    assert signature_cache_path(cache, upload.sha256).is_file()


def test_a_given_digest_that_is_not_one_names_no_entry(tmp_path: Path, cache: Path) -> None:
    path = onnx_model(tmp_path / "model.onnx")
    with pytest.raises(ManifestError, match="must be a SHA-256 digest"):
        onnx_file_manifest(path, sha256="../../elsewhere", cache_dir=cache)
    assert not cache.exists() and not (tmp_path / "elsewhere.json").exists()
