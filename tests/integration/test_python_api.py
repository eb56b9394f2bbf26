"""`mlscope.evaluate`, the Python API, end to end: real frameworks in real child processes, a real
SQLite store in a temporary folder.

Given / When / Then in each test's comments. The machine is shared, so no figure is asserted against a
fixed number and no test expects a measurement to be valid: the tests assert shapes, what was stored,
and that the result set says exactly what the results say.
"""

from __future__ import annotations

import math
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import mlscope
from mlscope.contract.errors import UserError
from mlscope.library import ROW_COLUMNS, ResultSet
from mlscope.store import open_store
from tests.conftest import RUNTIME_MANIFESTS
from tests.result_shape import LATENCY_KEYS, RESULT_KEYS

pytestmark = pytest.mark.slow

FAST = {"min_seconds": 0.2, "min_count": 5, "max_seconds": 5, "warmup_seconds": 0.05}


@pytest.fixture(scope="module")
def here(tmp_path_factory: pytest.TempPathFactory, shared_cache: Path) -> Iterator[Path]:
    """Settings pointing at a temporary folder (the default store included, which no test may touch),
    with the test models' manifests added."""
    tmp = tmp_path_factory.mktemp("python-api")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLSCOPE_STORE_URL", f"sqlite:///{tmp / 'default.db'}")
        patch.setenv("MLSCOPE_CACHE_DIR", str(shared_cache))
        patch.setenv("MLSCOPE_MANIFESTS", str(RUNTIME_MANIFESTS))
        patch.setenv("MLSCOPE_SETTINGS", str(tmp / "no-settings.toml"))
        yield tmp


@pytest.fixture(scope="module")
def resnet(here: Path) -> tuple[ResultSet, str]:
    """ResNet-18 (a shipped manifest) evaluated on ONNX Runtime and PyTorch at batch 1."""
    store_url = f"sqlite:///{here / 'x.db'}"
    results = mlscope.evaluate(
        "resnet18", frameworks=["onnxruntime", "pytorch"], batch_sizes=[1], measure=FAST, store_url=store_url
    )
    return results, store_url


def test_evaluate_returns_the_stored_results_in_the_contract_shape(
    resnet: tuple[ResultSet, str], here: Path
) -> None:
    # Given ResNet-18 evaluated on two frameworks into a store named by URL
    results, store_url = resnet
    # Then there is one result per framework, in the order asked, each in the contract's shape
    assert isinstance(results, ResultSet) and isinstance(results, list)
    assert [r["framework"]["name"] for r in results] == ["onnxruntime", "pytorch"]
    for result in results:
        assert set(result) >= RESULT_KEYS, RESULT_KEYS - set(result)
        assert result["status"] == "succeeded" and result["error"] is None
        assert result["model"]["name"] == "resnet18" and result["runner"] == "process"
        (measurement,) = result["measurements"]
        assert measurement["scenario"] == "single_stream" and measurement["batch_size"] == 1
        assert set(measurement["latency_ms"]) >= LATENCY_KEYS
        assert measurement["latency_ms"]["count"] >= 1 and measurement["throughput"] > 0
        assert set(measurement["validity"]) == {"valid", "reasons"}
        # (a machine too busy to reach min_count before max_seconds gets no valid verdict)
        if measurement["latency_ms"]["count"] < FAST["min_count"]:
            assert measurement["validity"]["valid"] is False
    # And the store at that URL holds exactly them, as stored
    with open_store(store_url) as store:
        stored = {r["id"]: r for r in store.list_evaluations(limit=100)}
        assert set(stored) == {r["id"] for r in results}
        for result in results:
            again = store.get_evaluation(result["id"])
            assert again["status"] == "succeeded"
            assert again["measurements"] == result["measurements"]
    # And the settings' default store was never opened
    assert not (here / "default.db").exists()


def test_the_table_has_a_row_per_measurement_with_the_results_figures(resnet: tuple[ResultSet, str]) -> None:
    results, _ = resnet
    # When the results become a DataFrame
    frame = results.to_pandas()
    # Then it has the documented columns and one row per (evaluation, measurement)
    assert list(frame.columns) == list(ROW_COLUMNS)
    assert len(frame) == 2
    assert list(frame["framework"]) == ["onnxruntime", "pytorch"]
    assert list(frame["id"]) == [r["id"] for r in results]
    assert set(frame["status"]) == {"succeeded"} and set(frame["scenario"]) == {"single_stream"}
    assert str(frame["batch_size"].dtype) == "Int64" and list(frame["batch_size"]) == [1, 1]
    assert frame["error"].isna().all()
    # And each row's figures are its result's, validity included (never better than the verdict)
    for (_, row), result in zip(frame.iterrows(), results, strict=True):
        (m,) = result["measurements"]
        assert row["framework_version"] == result["framework"]["version"]
        assert row["median_ms"] == m["latency_ms"]["median"] and row["p99_ms"] == m["latency_ms"]["p99"]
        assert row["mean_ms"] == m["latency_ms"]["mean"] and row["throughput"] == m["throughput"]
        assert bool(row["valid"]) is m["validity"]["valid"]


def test_the_repr_is_a_line_per_evaluation_and_ok_matches_the_verdicts(resnet: tuple[ResultSet, str]) -> None:
    results, _ = resnet
    # When the result set is shown (as a notebook shows it)
    header, *lines = repr(results).splitlines()
    # Then the first line counts the evaluations and says whether all is well
    all_valid = all(m["validity"]["valid"] for r in results for m in r["measurements"])
    assert results.ok is all_valid
    if all_valid:
        assert header == "ResultSet: 2 evaluations, ok"
    else:
        assert header.startswith("ResultSet: 2 evaluations, NOT ok: ") and "INVALID" in header
    # And one line per evaluation names the model, framework, status and median at batch 1
    assert len(lines) == 2
    for line, result in zip(lines, results, strict=True):
        median = result["measurements"][0]["latency_ms"]["median"]
        assert "resnet18" in line and result["framework"]["name"] in line and "succeeded" in line
        assert f"b1 {median:.2f} ms" in line or f"b1 {median:.3f} ms" in line
        assert result["id"][:8] in line
        assert ("INVALID" in line) is (not result["measurements"][0]["validity"]["valid"])
    # And a slice is a result set too
    assert isinstance(results[:1], ResultSet) and len(results[:1]) == 1


def test_an_evaluation_whose_every_measurement_is_invalid_says_so(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a measurement that cannot reach its minimum count before its time runs out
    measure = {**FAST, "min_count": 100_000, "max_seconds": 0.3, "min_seconds": 0.1}
    events: list[dict[str, Any]] = []
    # When it is evaluated, with a progress callback
    results = mlscope.evaluate(
        "test_tiny_mlp",
        frameworks="pytorch",
        batch_sizes=[1, 2],
        measure=measure,
        store_url=f"sqlite:///{here / 'invalid.db'}",
        progress=events.append,
    )
    # Then the evaluation succeeded but nothing about it looks valid
    (result,) = results
    assert result["status"] == "succeeded"
    assert [m["validity"]["valid"] for m in result["measurements"]] == [False, False]
    assert results.ok is False
    header, line = repr(results).splitlines()
    assert "NOT ok" in header and "2 of 2 measurements INVALID" in header
    assert "ALL INVALID" in line and line.count("INVALID") == 3
    frame = results.to_pandas()
    assert list(frame["valid"]) == [False, False]
    assert all("too few samples" in reasons for reasons in frame["reasons"])
    # And the callback was told of every phase, each event naming the model and framework
    kinds = [e["event"] for e in events]
    assert kinds[0] == "start" and kinds[-1] == "end" and kinds.count("measurement") == 2
    assert {(e["model"], e["framework"]) for e in events} == {("test_tiny_mlp", "pytorch")}
    assert events[-1] == {
        "event": "end",
        "id": result["id"],
        "status": "succeeded",
        "model": "test_tiny_mlp",
        "framework": "pytorch",
    }
    assert capsys.readouterr().err == ""  # a callback, not the stderr lines


def test_a_failed_evaluation_is_a_result_with_its_error_not_an_exception(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # When a model whose factory raises is evaluated, with progress lines on stderr
    results = mlscope.evaluate(
        "test_broken_factory",
        frameworks=["pytorch"],
        measure=FAST,
        store_url=f"sqlite:///{here / 'failed.db'}",
        progress=True,
    )
    # Then the result is the stored failure, with the phase it failed in
    (result,) = results
    assert result["status"] == "failed" and result["error"]["phase"] == "load"
    assert results.ok is False
    # And the repr and the table say so, with the error, and claim no figures
    header, line = repr(results).splitlines()
    assert "NOT ok: pytorch failed" in header
    assert "failed" in line and "ValueError in load" in line and "weights file is corrupt" in line
    (row,) = results.to_pandas().to_dict("records")
    assert row["status"] == "failed" and row["valid"] is False
    assert "weights file is corrupt" in row["error"]
    assert all(row[c] is None or math.isnan(row[c]) for c in ("median_ms", "p99_ms", "throughput"))
    # And each phase got a line on stderr
    err = capsys.readouterr().err
    assert "mlscope: test_broken_factory on pytorch: load" in err
    assert "mlscope: test_broken_factory on pytorch: failed" in err


def test_to_pandas_without_pandas_says_what_to_install(
    resnet: tuple[ResultSet, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a Python where pandas cannot be imported
    monkeypatch.setitem(sys.modules, "pandas", None)
    results, _ = resnet
    # Then the table cannot be made, and the error says how to get it; the rows still can
    with pytest.raises(ImportError, match="pip install pandas"):
        results.to_pandas()
    assert len(results.rows()) == 2


@pytest.mark.parametrize(
    ("model", "kwargs", "field", "words"),
    [
        ("resnet19", {}, "model", "did you mean resnet18"),
        ("resnet18", {"frameworks": ["pytorch"], "colour": "red"}, "colour", "colour: not a field"),
        ("resnet18", {"frameworks": ["pytorch"], "batch_sizes": [1, 0]}, "batch_sizes.1", "batch_sizes.1"),
        ("resnet18", {"frameworks": ["pytorch"], "batch_sizes": 0}, "batch_sizes.0", "batch_sizes.0"),
        ("resnet18", {"frameworks": ["pytorch", "tensorflw"]}, "framework", "unknown framework 'tensorflw'"),
        ("resnet18", {"frameworks": ["pytorch"], "measure": {"speed": 9}}, "measure.speed", "speed"),
        ("resnet18", {"framework": "pytorch"}, "framework", "frameworks=[...]"),
        (
            "resnet18",
            {"frameworks": ["pytorch"], "scenarios": "server", "load": {"qps": 0}},
            "load.qps",
            "(0, 100000]",
        ),
        ("resnet18", {"frameworks": ["pytorch"], "scenarios": "server"}, "load.qps", "needs a target rate"),
    ],
)
def test_bad_input_raises_a_user_error_naming_the_field_and_stores_nothing(
    here: Path, model: str, kwargs: dict[str, Any], field: str, words: str
) -> None:
    # When the caller makes a mistake
    store = here / "untouched.db"
    with pytest.raises(UserError) as raised:
        mlscope.evaluate(model, store_url=f"sqlite:///{store}", **kwargs)
    # Then mlscope's UserError names the field, in one line
    assert raised.value.field == field
    assert words in str(raised.value) and "\n" not in str(raised.value)
    # And it comes with none of mlscope's frames but the one that raised it for the caller
    package = Path(mlscope.__file__).parent
    frames = [Path(f.filename) for f in traceback.extract_tb(raised.value.__traceback__)]
    assert [f.name for f in frames if f.is_relative_to(package)] == ["library.py"]
    # And the store was not even created
    assert not store.exists()
