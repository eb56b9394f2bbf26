"""LiteRT has no profiled pass (docs/litert.md, "No per-operator trace"): its installed interpreter
has no profiler to attach, so an evaluation traced at FRAMEWORK or deeper records both passes as
not supported, each with a note saying why, and `mlscope trace ID --layers` prints that note instead
of leaving an empty answer unexplained. The real LiteRT predictor class, tracer, store and CLI."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from ai_edge_litert import interpreter as litert_interpreter

from mlscope.registry.models import ModelRegistry
from mlscope.runtime.measure import MeasureSettings
from mlscope.runtime.predictors.litert.predictor import LiteRtPredictor
from mlscope.runtime.trace.passes import run_traced_passes
from mlscope.runtime.trace.spans import Tracer
from mlscope.store import Store, open_store
from tests.contract.builders import finish
from tests.integration.test_trace_api_cli import run_cli

WHY = "ai-edge-litert's Python interpreter takes no profiler and gives no per-op times"


@pytest.fixture
def store(mlscope_env: dict[str, str]) -> Iterator[Store]:
    opened = open_store(os.environ["MLSCOPE_STORE_URL"])
    yield opened
    opened.close()


def traced_passes(level: str, cache_dir: Path) -> list[dict]:
    """The spans the LiteRT predictor's profiled passes leave at `level`, batch sizes 1 and 8."""
    manifest = ModelRegistry.load(cache_dir=cache_dir).get("digits_cnn", "litert")
    predictor = LiteRtPredictor(manifest=manifest, cache_dir=cache_dir)
    tracer = Tracer(level)
    run_traced_passes(predictor, lambda size: None, [1, 8], tracer, MeasureSettings())
    return tracer.drain()


def test_the_interpreter_has_no_profiler_to_give_per_operator_times() -> None:
    # Given the installed LiteRT's interpreter: the native methods its Python class calls
    methods = [
        name for name in dir(litert_interpreter._interpreter_wrapper.InterpreterWrapper) if name[0] != "_"
    ]
    # Then it runs and describes the graph (Invoke, NumNodes, NodeName) but none of them profiles:
    # nothing takes a profiler or reads back events. Should one appear, this framework's FRAMEWORK
    # pass can be written (docs/litert.md says what was looked at).
    assert {"Invoke", "NumNodes", "NodeName"} <= set(methods), methods
    assert [name for name in methods if "profil" in name.lower() or "event" in name.lower()] == []


@pytest.mark.parametrize("level", ["FRAMEWORK", "LIBRARY"])
def test_a_traced_evaluation_says_why_litert_has_no_layers(level: str, tmp_path: Path) -> None:
    # When the LiteRT predictor's profiled passes run, at each batch size
    spans = traced_passes(level, tmp_path / "cache")
    # Then every pass up to the level is there, not supported, its note naming the framework and why
    passes = [span for span in spans if span["name"].startswith("profile ")]
    expected = ["FRAMEWORK", "LIBRARY"][: ["FRAMEWORK", "LIBRARY"].index(level) + 1]
    assert [(p["attributes"]["pass"], p["attributes"]["batch_size"]) for p in passes] == [
        (lv, size) for lv in expected for size in (1, 8)
    ]
    for profiled in passes:
        assert profiled["attributes"]["supported"] is False
        assert profiled["attributes"]["note"] == (
            f"litert has no {profiled['attributes']['pass']} profiler in mlscope: {WHY} (docs/litert.md)"
        )
    # And nothing pretends to be a layer or an operator
    assert [span for span in spans if span["level"] in ("FRAMEWORK", "LIBRARY")] == []


def test_trace_layers_prints_the_note_once_for_a_litert_evaluation(
    capsys: pytest.CaptureFixture[str], store: Store, tmp_path: Path
) -> None:
    # Given a LiteRT evaluation traced at FRAMEWORK, its passes' spans stored
    spans = traced_passes("FRAMEWORK", tmp_path / "cache")
    evaluation_id = store.create_evaluation(
        model={"name": "digits_cnn", "version": "1.0", "manifest_sha256": "a" * 64},
        manifest={"name": "digits_cnn", "framework": {"name": "litert", "version": "*"}},
        framework={"name": "litert", "version": None},
        runner="process",
        device="cpu",
        request={"model": "digits_cnn", "framework": "litert", "batch_sizes": [1, 8]},
        trace_level="FRAMEWORK",
        trace_id=spans[0]["trace_id"],
    )
    store.start_evaluation(evaluation_id)
    finish(store, evaluation_id)
    store.save_spans(evaluation_id, spans)
    # When its layers are asked for
    code, out, _ = run_cli(capsys, "trace", evaluation_id[:8], "--layers")
    # Then it says there are none and why, in one line (two batch sizes, one note)
    assert code == 0
    lines = out.strip().splitlines()
    assert lines[0] == f"{evaluation_id} has no FRAMEWORK or LIBRARY spans (trace level FRAMEWORK)"
    assert lines[1:] == [f"note litert has no FRAMEWORK profiler in mlscope: {WHY} (docs/litert.md)"]
