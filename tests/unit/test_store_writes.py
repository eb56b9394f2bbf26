"""The store writes a worker makes, as a closed set (workers.store_writes): each names a Store method,
a spool file written in the method-name form replays, and a name outside the set is refused before
the store is touched, rather than looked up on it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from mlscope.contract.errors import UserError
from mlscope.store import Store, open_store
from mlscope.workers.spool import OPS, DurableWrites, Spool
from mlscope.workers.store_writes import StoreWrite, apply
from tests.contract.builders import submit
from tests.fixtures.store_writes import FINISHED_AT, finish_kwargs

# The method names a spool file has always been named by: spools written before the enum replay.
SPOOLED_NAMES = {
    "start_evaluation",
    "finish_evaluation",
    "fail_evaluation",
    "save_spans",
    "cancel_evaluation",
}


class Recording:
    """The store, with every method called on it recorded by name."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.store, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            return method(*args, **kwargs)

        return call


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with open_store(f"sqlite:///{tmp_path / 'store.db'}") as opened:
        yield opened


def _spool_file(directory: Path, sequence: int, op: str, evaluation_id: str, kwargs: dict[str, Any]) -> Path:
    """A spooled write as a worker writes it: `<sequence>+<method name>+<quoted id>.json` holding the
    id, the method name and its keyword arguments (datetimes as {"$datetime": iso})."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{sequence:012d}+{op}+{quote(evaluation_id, safe='')}.json"
    body = {"evaluation_id": evaluation_id, "op": op, "kwargs": kwargs}
    path.write_text(
        json.dumps(body, default=lambda value: {"$datetime": value.isoformat()}), encoding="utf-8"
    )
    return path


def test_the_writes_are_the_store_methods_spool_files_have_always_named() -> None:
    assert {op.value for op in StoreWrite} == SPOOLED_NAMES == OPS
    for op in StoreWrite:
        assert callable(getattr(Store, op.value)), op
        # A member is its method name wherever it is written: a file name, a JSON body, a log line.
        assert op == op.value and f"{op}" == op.value and json.dumps(op) == json.dumps(op.value)
        assert StoreWrite.parse(op.value) is op


def test_a_spool_written_in_the_method_name_form_replays(store: Store, tmp_path: Path) -> None:
    # Given a spool directory holding a start and a finish as an earlier worker wrote them, by name
    evaluation_id = submit(store, framework="onnxruntime")
    directory = tmp_path / "spool" / "agent-a"
    _spool_file(directory, 1, "start_evaluation", evaluation_id, {})
    _spool_file(directory, 2, "finish_evaluation", evaluation_id, finish_kwargs())
    # When a new worker's spool reads and flushes it
    spool = Spool(directory)
    assert [write.op for write in spool.writes()] == [StoreWrite.START, StoreWrite.FINISH]
    written = spool.flush(store)
    # Then both writes landed, in order, and nothing waits
    assert written == 2 and len(spool) == 0
    stored = store.get_evaluation(evaluation_id, include_raw=True)
    assert stored["status"] == "succeeded" and stored["finished_at"] == FINISHED_AT.isoformat()
    assert len(stored["measurements"][0]["latencies_ns"]) == 50


def test_a_write_the_spool_keeps_is_named_by_its_method(store: Store, tmp_path: Path) -> None:
    # Given a write kept in the spool
    spool = Spool(tmp_path / "spool")
    spool.put("e1", StoreWrite.FAIL, {"error": {"type": "X", "message": "m", "phase": "run"}})
    # Then its file and body name the store method, as before the writes were an enum
    (path,) = [p for p in spool.directory.iterdir() if p.suffix == ".json"]
    assert path.name == "000000000001+fail_evaluation+e1.json"
    assert json.loads(path.read_text(encoding="utf-8"))["op"] == "fail_evaluation"


@pytest.mark.parametrize("name", ["drop_everything", "close", "__class__", ""])
def test_an_unknown_write_is_refused_before_the_store_is_touched(
    store: Store, tmp_path: Path, name: str
) -> None:
    # Given an evaluation in the store, seen through a recorder of every call made on it
    evaluation_id = submit(store, framework="onnxruntime")
    recording = Recording(store)
    # When a write by a name outside the set is made ("close" is a Store method, but no write)
    with pytest.raises(UserError) as refused:
        apply(recording, name, evaluation_id, {})
    # Then it is refused naming the field and the writes there are, and the store was not called
    assert refused.value.field == "op"
    assert repr(name) in refused.value.message and "start_evaluation" in refused.value.message
    with pytest.raises(UserError):
        DurableWrites(recording, Spool(tmp_path / "spool")).write(evaluation_id, name)
    assert recording.calls == []
    assert store.get_evaluation(evaluation_id)["status"] == "queued"


def test_a_spool_file_naming_an_unknown_write_is_left_alone(store: Store, tmp_path: Path) -> None:
    # Given a spool file naming a Store method that is no write
    evaluation_id = submit(store, framework="onnxruntime")
    directory = tmp_path / "spool" / "agent-a"
    stray = _spool_file(directory, 1, "close", evaluation_id, {})
    recording = Recording(store)
    # When the spool is flushed
    written = Spool(directory).flush(recording)
    # Then nothing was called on the store, and the file is left where it was
    assert written == 0 and recording.calls == [] and stray.exists()
