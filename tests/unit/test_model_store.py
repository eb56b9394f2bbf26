"""The model store on its own (no framework): entries written once and mapped, references held by
processes (a killed one's dropped by the kernel), LRU eviction under the budget, and a model larger
than the budget refused before anything is evicted."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mlscope.contract.errors import UserError
from mlscope.contract.settings import Settings, load_settings
from mlscope.runtime.model_store import ALIGNMENT, ModelStore, ModelStoreBusy, WeightsToStore, entry_key
from tests.conftest import REPO

MB = 2**20


def weights(megabytes: float, seed: int = 0) -> tuple[WeightsToStore, dict[str, np.ndarray]]:
    """Two tensors of odd sizes (so the second one's offset needs aligning) totalling ~megabytes."""
    rng = np.random.default_rng(seed)
    arrays = {
        "a": rng.standard_normal(int(megabytes * MB / 4) - 3, dtype=np.float32),
        "b": rng.integers(0, 100, size=(3, 5), dtype=np.int64),
    }
    tensors = [(name, a.dtype.str, a.shape, a.reshape(-1).view(np.uint8).data) for name, a in arrays.items()]
    return WeightsToStore(tensors, sum(a.nbytes for a in arrays.values()), {"graph": b"stripped"}), arrays


def as_array(store_entry: object, name: str, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    return np.frombuffer(store_entry.view(name), dtype=np.dtype(dtype)).reshape(shape)  # type: ignore[attr-defined]


def test_a_published_entry_maps_back_the_same_bytes_aligned_and_read_only(tmp_path: Path) -> None:
    # Given a store and two tensors
    store = ModelStore(tmp_path, 64 * MB)
    to_store, arrays = weights(1)
    # When they are published, and opened again as another evaluation would
    published = store.publish("m", to_store)
    opened = store.open("m")
    # Then the first is the publisher's and the second the store's, both the same bytes
    assert opened is not None and published.published and not opened.published
    for name, array in arrays.items():
        mapped = as_array(opened, name, array.dtype.str, array.shape)
        assert np.array_equal(mapped, array)
        assert not mapped.flags.writeable  # a write would fault, not change every process's weights
        assert opened.tensors[name].offset % ALIGNMENT == 0
    assert opened.blob("graph") == b"stripped"
    # And an entry it does not hold is None
    assert store.open("other") is None
    published.close()
    opened.close()


def files(folder: Path, sizes: dict[str, int]) -> Path:
    """A directory of files of the given sizes, as a framework saves its own model files."""
    folder.mkdir()
    for name, size in sizes.items():
        (folder / name).write_bytes(bytes(range(256)) * (size // 256) + b"x" * (size % 256))
    return folder


def test_an_entry_takes_a_frameworks_files_counts_them_and_removes_their_folder(tmp_path: Path) -> None:
    # Given a store and a framework's own model files (a graph and its 3 MB data file), no tensors
    store = ModelStore(tmp_path / "store", 64 * MB)
    saved = files(tmp_path / "saved", {"model.onnx": 1000, "model.onnx.data": 3 * MB})
    # When they are published, and opened again as another evaluation would
    store.publish("m", WeightsToStore([], 0, files=saved)).close()
    opened = store.open("m")
    # Then the entry holds the same files, by path, counted in its size; the folder handed over is gone
    assert opened is not None and not saved.exists()
    assert opened.file("model.onnx.data").read_bytes() == bytes(range(256)) * (3 * MB // 256)
    assert opened.file("model.onnx").stat().st_size == 1000
    assert opened.size_bytes == 3 * MB + 1000
    assert store.entries()[0][1] >= 3 * MB + 1000
    with pytest.raises(KeyError):
        opened.file("weights.bin")  # only the files it was given
    # And a second publisher's files, not needed, are removed too
    again = files(tmp_path / "again", {"model.onnx": 10})
    store.publish("m", WeightsToStore([], 0, files=again)).close()
    assert not again.exists()
    opened.close()


def test_files_larger_than_the_budget_are_refused_and_removed(tmp_path: Path) -> None:
    # Given a 2 MB budget and 3 MB of files
    store = ModelStore(tmp_path / "store", 2 * MB)
    saved = files(tmp_path / "saved", {"model.onnx.data": 3 * MB})
    # When they are published, the store refuses them, naming their size; nothing is written
    with pytest.raises(UserError, match=r"3\.0 MB"):
        store.publish("m", WeightsToStore([], 0, files=saved))
    assert store.entries() == [] and not saved.exists()


def test_a_model_larger_than_the_budget_is_refused_before_anything_is_evicted(tmp_path: Path) -> None:
    # Given a 4 MB budget holding one unreferenced 2 MB model
    store = ModelStore(tmp_path, 4 * MB)
    store.publish("small", weights(2)[0]).close()
    # When a 5 MB model is published
    with pytest.raises(UserError) as raised:
        store.publish("big", weights(5)[0])
    # Then the error names the model's size, the budget and the setting
    assert raised.value.field == "model_store_mb"
    assert "5.0 MB" in str(raised.value) and "4.0 MB" in str(raised.value)
    # And nothing was evicted or written
    assert [key for key, *_ in store.entries()] == ["small"]


def test_the_least_recently_used_unreferenced_model_is_evicted_first(tmp_path: Path) -> None:
    # Given three 1.5 MB models in a 5 MB budget, "b" used last, "a" before it, "c" first
    store = ModelStore(tmp_path, 5 * MB)
    for key in ("c", "a", "b"):
        store.publish(key, weights(1.5)[0]).close()
    for key in ("c", "a", "b"):
        opened = store.open(key)
        assert opened is not None
        opened.close()
        os.utime(tmp_path / key / "used", (0, {"c": 100, "a": 200, "b": 300}[key]))
    # When a fourth is published
    store.publish("d", weights(1.5)[0]).close()
    # Then only the least recently used one made room
    assert sorted(key for key, *_ in store.entries()) == ["a", "b", "d"]


def test_a_referenced_model_is_never_evicted_and_a_killed_process_drops_its_reference(tmp_path: Path) -> None:
    # Given a 3 MB budget holding a 2 MB model that another process maps
    store = ModelStore(tmp_path, 3 * MB)
    store.publish("held", weights(2)[0]).close()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from mlscope.runtime.model_store import ModelStore; "
            f"m = ModelStore(Path({str(tmp_path)!r}), 3 * 2**20).open('held'); print('ready', flush=True); "
            "time.sleep(600)",
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        assert store.entries()[0][3] is True  # referenced
        # When another 2 MB model is published
        # Then it does not fit beside the model in use, and the held one stays
        with pytest.raises(ModelStoreBusy, match="in use"):
            store.publish("next", weights(2, seed=1)[0])
        assert [key for key, *_ in store.entries()] == ["held"]
        # When the holder is killed (no clean-up of its own)
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    finally:
        holder.kill()
    # Then its reference is gone with it, and the new model takes the old one's place
    assert store.entries()[0][3] is False
    store.publish("next", weights(2, seed=1)[0]).close()
    assert [key for key, *_ in store.entries()] == ["next"]


def test_entry_keys_differ_by_what_determines_the_weights() -> None:
    base = entry_key("pytorch", "ab" * 32, 0, "", "resnet50")
    assert base.startswith("pytorch-resnet50-")
    others = {
        entry_key("onnxruntime", "ab" * 32, 0, "", "resnet50"),
        entry_key("pytorch", "cd" * 32, 0, "", "resnet50"),
        entry_key("pytorch", "ab" * 32, 1, "", "resnet50"),
        entry_key("pytorch", "ab" * 32, 0, "all|CPUExecutionProvider", "resnet50"),
    }
    assert base not in others and len(others) == 4
    assert "/" not in entry_key("pytorch", "ab" * 32, 0, "", "../../etc")


def test_the_budget_setting_is_validated_and_names_its_field(tmp_path: Path) -> None:
    # Given the settings of a machine with a 512 MB model store
    settings = load_settings(
        {
            "MLSCOPE_SETTINGS": str(tmp_path / "none.toml"),
            "MLSCOPE_MODEL_STORE_MB": "512",
            "MLSCOPE_MODEL_STORE_DIR": str(tmp_path / "models"),
        }
    )
    # Then a job carries the store
    assert settings.model_store == {"directory": str(tmp_path / "models"), "budget_mb": 512}
    # And by default there is none
    assert Settings().model_store == {}
    # And a bad budget or directory is refused, naming the field
    for environ, field in (
        ({"MLSCOPE_MODEL_STORE_MB": "lots"}, "model_store_mb"),
        ({"MLSCOPE_MODEL_STORE_MB": "-1"}, "model_store_mb"),
        ({"MLSCOPE_MODEL_STORE_DIR": "relative/models"}, "model_store_dir"),
    ):
        with pytest.raises(UserError) as raised:
            load_settings({"MLSCOPE_SETTINGS": str(tmp_path / "none.toml"), **environ})
        assert raised.value.field == field, environ
