"""OpenVINO's options and the parts of it that need no inference: `performance_hint` and `precision`
validated by the request schema and refused in one line on a framework without them (exit 2, nothing
stored), their defaults keying as unset, several values admitted as several evaluations, a variant's
parity checked against OpenVINO as loaded, a user's .onnx file resolved for OpenVINO, the bf16
refusal, the performance-counter converter, and OpenVINO's telemetry kept off.
tests/integration/test_openvino.py runs OpenVINO."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from mlscope.cli import main
from mlscope.cli.render import framework_label
from mlscope.contract.errors import UserError
from mlscope.contract.job import Job
from mlscope.contract.request import parse_request
from mlscope.contract.settings import load_settings
from mlscope.contract.workload import workload_differences, workload_key
from mlscope.registry.models import ModelRegistry
from mlscope.runtime.predictors.openvino.predictor import precision_refusal
from mlscope.runtime.predictors.openvino.profile import ProfiledRun, ov_profile_to_spans, profiled_nodes
from mlscope.workers.local import admit_all
from tests.fixtures.onnx_graphs import onnx_model
from tests.unit.test_compile_options import refused_run
from tests.unit.test_workload import evaluation

MODEL = "test_tiny_mlp"


def test_a_hint_and_a_precision_are_openvinos() -> None:
    for options in (
        {"performance_hint": "LATENCY"},
        {"performance_hint": "THROUGHPUT"},
        {"precision": "bf16"},
    ):
        assert parse_request({"model": MODEL, "framework": "openvino", "options": options})
    for name, value in (("performance_hint", "FAST"), ("precision", "fp64")):
        with pytest.raises(UserError) as refused:
            parse_request({"model": MODEL, "framework": "openvino", "options": {name: value}})
        assert refused.value.field == f"options.{name}"


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        (
            ["-f", "openvino", "--option", "performance_hint=FAST"],
            ("options.performance_hint", "LATENCY, THROUGHPUT"),
        ),
        (["-f", "openvino", "--option", "precision=fp64"], ("options.precision", "fp32, f32, bf16, fp16")),
        (
            ["-f", "onnxruntime", "--option", "performance_hint=THROUGHPUT"],
            ("options.performance_hint", "ONNX Runtime has no performance_hint option; OpenVINO has"),
        ),
        (
            ["-f", "openvino", "--option", "quantize=int8"],
            ("options.quantize", "OpenVINO has no quantize option; PyTorch, ONNX Runtime and LiteRT have"),
        ),
        (
            ["-f", "openvino", "--option", "performance_hint=THROUGHPUT", "--scenario", "generate"],
            ("options.performance_hint",),
        ),
    ],
)
def test_an_option_that_cannot_be_is_refused_in_one_line_storing_nothing(
    mlscope_env: dict[str, str], capsys: pytest.CaptureFixture[str], arguments: list[str], named: tuple[str]
) -> None:
    err = refused_run(mlscope_env, capsys, arguments)
    assert all(part in err for part in named), err


def test_the_defaults_key_as_unset_and_the_others_are_named_apart() -> None:
    # Given a result that set no OpenVINO option, and ones that set the defaults
    old = evaluation(framework="openvino")
    defaults = evaluation(framework="openvino", options={"performance_hint": "LATENCY", "precision": "f32"})
    # Then they are one workload with one key
    assert workload_differences(old, defaults) == []
    assert workload_key(old, "single_stream") == workload_key(defaults, "single_stream")
    # And a throughput hint or bf16 is another workload, named as such
    for name, value in (("performance_hint", "THROUGHPUT"), ("precision", "bf16")):
        other = evaluation(framework="openvino", options={name: value})
        (difference,) = workload_differences(old, other)
        assert difference.text == f"options.{name}: unset (A) vs {value} (B)"
        assert workload_key(old, "single_stream") != workload_key(other, "single_stream")


def test_several_values_are_several_evaluations(mlscope_env: dict[str, str]) -> None:
    settings = load_settings()
    both = admit_all(
        MODEL, ["openvino"], {"options": {"performance_hint": "LATENCY,THROUGHPUT"}}, settings=settings
    )
    assert [a.request.options["performance_hint"] for a in both] == ["LATENCY", "THROUGHPUT"]
    four = admit_all(
        MODEL,
        ["openvino"],
        {"options": {"performance_hint": "LATENCY,THROUGHPUT", "precision": "f32,bf16"}},
        settings=settings,
    )
    assert [(a.request.options["performance_hint"], a.request.options["precision"]) for a in four] == [
        ("LATENCY", "f32"),
        ("LATENCY", "bf16"),
        ("THROUGHPUT", "f32"),
        ("THROUGHPUT", "bf16"),
    ]


def test_a_variants_parity_is_against_openvino_as_loaded_unless_another_is_named(
    mlscope_env: dict[str, str],
) -> None:
    settings = load_settings()
    document = {"options": {"performance_hint": "THROUGHPUT"}, "check_parity": True}
    (admitted,) = admit_all(MODEL, ["openvino"], document, settings=settings)
    assert admitted.parity_against == "openvino"
    job = Job.from_request(
        admitted.request, evaluation_id="e", manifest=admitted.manifest.to_dict(), origin="", cache_dir="c"
    )
    reference = admitted.parity_job(job)
    assert reference.framework == "openvino" and "performance_hint" not in reference.options
    # Named: ONNX Runtime, on the same inputs, without OpenVINO's options
    (against_ort,) = admit_all(
        MODEL, ["openvino"], {**document, "parity_against": "onnxruntime"}, settings=settings
    )
    reference = against_ort.parity_job(job)
    assert reference.framework == "onnxruntime" and reference.manifest["framework"]["name"] == "onnxruntime"
    assert "performance_hint" not in reference.options


def test_a_users_onnx_file_resolves_for_openvino_as_for_onnx_runtime(tmp_path: Path) -> None:
    graph = onnx_model(tmp_path / "tiny.onnx")
    registry = ModelRegistry.load([])
    assert {"onnxruntime", "openvino"} <= set(registry.frameworks_for(str(graph)))
    openvino, ort = registry.get(str(graph), "openvino"), registry.get(str(graph), "onnxruntime")
    assert openvino.framework.name == "openvino" and ort.framework.name == "onnxruntime"
    # The same file, read the same way
    assert openvino.source == ort.source and openvino.weights == ort.weights
    assert [spec.name for spec in openvino.inputs] == [spec.name for spec in ort.inputs] == ["x"]


def test_bf16_is_refused_in_one_line_on_a_cpu_without_it() -> None:
    refusal = precision_refusal("bf16", ["FP32", "FP16", "INT8", "BIN", "EXPORT_IMPORT"])
    assert refusal is not None and "\n" not in refusal
    assert refusal.startswith("options.precision: bf16 needs") and "FP32, FP16" in refusal
    assert precision_refusal("bf16", ["FP32", "BF16", "INT8"]) is None
    assert precision_refusal("f32", ["FP32"]) is None


def test_the_framework_column_names_a_non_default_hint_or_precision() -> None:
    ran = {"framework": {"name": "openvino"}, "request": {"options": {"performance_hint": "THROUGHPUT"}}}
    assert framework_label(ran) == "openvino performance_hint=THROUGHPUT"
    plain = {"framework": {"name": "openvino", "performance_hint": "LATENCY", "precision": "f32"}}
    assert framework_label({**plain, "request": {"options": {"precision": "f32"}}}) == "openvino"
    failed = {"framework": {"name": "openvino"}, "request": {"options": {"precision": "bf16"}}}
    assert framework_label(failed) == "openvino precision=bf16"


def test_mlscope_frameworks_lists_openvino_with_its_options(capsys: pytest.CaptureFixture[str]) -> None:
    main(["frameworks", "--json"])
    rows = {row["name"]: row for row in map(json.loads, capsys.readouterr().out.splitlines())}
    row = rows["openvino"]
    assert row["display"] == "OpenVINO" and row["options"] == ["performance_hint", "precision"]
    assert "onnx" in row["sources"] and row["sources"] == rows["onnxruntime"]["sources"]
    # Installed by `make` (the openvino extra): it can run here
    assert row["available"] is True and row["reason"] is None


class _Info:
    """A record with the attributes OpenVINO's ProfilingInfo has (the converter reads only these)."""

    class _Status:
        def __init__(self, name: str) -> None:
            self.name = name

    def __init__(self, name: str, kind: str, status: str, real_us: int) -> None:
        self.node_name, self.node_type, self.exec_type = name, kind, f"jit_{kind.lower()}_f32"
        self.status = self._Status(status)
        self.real_time = timedelta(microseconds=real_us)
        self.cpu_time = timedelta(microseconds=real_us * 2)


def _ids() -> Any:
    counter = iter(range(1, 1000))
    return lambda: f"{next(counter):016x}"


def test_counters_become_layers_laid_end_to_end_inside_their_inference() -> None:
    nodes = profiled_nodes(
        [
            _Info("x", "Parameter", "NOT_RUN", 0),
            _Info("/0/Gemm", "FullyConnected", "EXECUTED", 30),
            _Info("/1/Relu", "Eltwise", "OPTIMIZED_OUT", 0),
            _Info("/2/Gemm", "FullyConnected", "EXECUTED", 20),
            _Info("y", "Result", "NOT_RUN", 0),
        ]
    )
    assert nodes[1] == {
        "node_name": "/0/Gemm",
        "node_type": "FullyConnected",
        "exec_type": "jit_fullyconnected_f32",
        "status": "EXECUTED",
        "real_time_ns": 30_000,
        "cpu_time_ns": 60_000,
    }
    runs = [ProfiledRun(1_000_000, 1_100_000, nodes), ProfiledRun(2_000_000, 2_040_000, nodes)]
    spans = ov_profile_to_spans(
        runs, trace_id="t" * 32, parent_id="p" * 16, batch_size=4, level="FRAMEWORK", new_id=_ids()
    )
    inferences = [s for s in spans if s["name"] == "inference"]
    layers = [s for s in spans if s["level"] == "FRAMEWORK"]
    assert [s["attributes"]["iteration"] for s in inferences] == [0, 1]
    assert all(s["parent_id"] == "p" * 16 and s["level"] == "MODEL" for s in inferences)
    # Only executed nodes, each inside its inference, one after another from its start
    first, second = layers[:2]
    assert [s["name"] for s in layers] == ["/0/Gemm", "/2/Gemm"] * 2
    assert (first["start_ns"], first["end_ns"], second["start_ns"], second["end_ns"]) == (
        1_000_000,
        1_030_000,
        1_030_000,
        1_050_000,
    )
    assert first["attributes"] == {
        "pass": "FRAMEWORK",
        "batch_size": 4,
        "kind": "layer",
        "layer": "/0/Gemm",
        "layer_type": "FullyConnected",
        "layer_index": 0,
        "implementation": "jit_fullyconnected_f32",
        "cpu_time_ns": 60_000,
        "timing": "sequential",
    }
    assert {s["parent_id"] for s in layers[:2]} == {inferences[0]["span_id"]}
    # A second inference its caller timed shorter than its counters add up to is stretched over them
    assert inferences[1]["end_ns"] == 2_050_000 and inferences[0]["end_ns"] == 1_100_000
    # At LIBRARY level the same nodes are operators, named by type
    operators = ov_profile_to_spans(
        runs[:1], trace_id="t" * 32, parent_id="p" * 16, batch_size=4, level="LIBRARY", new_id=_ids()
    )
    assert [(s["name"], s["attributes"].get("layer")) for s in operators if s["level"] == "LIBRARY"] == [
        ("FullyConnected", "/0/Gemm"),
        ("FullyConnected", "/2/Gemm"),
    ]
    with pytest.raises(ValueError, match="HARDWARE"):
        ov_profile_to_spans(runs, trace_id="t", parent_id="p", batch_size=1, level="HARDWARE")


def test_openvino_runs_every_catalogue_entry_onnx_runtime_runs() -> None:
    from mlscope.registry.catalogue import Catalogue

    catalogue = Catalogue.load()
    ort = {entry.ref for entry in catalogue.find(framework="onnxruntime")}
    openvino = {entry.ref for entry in catalogue.find(framework="openvino")}
    assert ort and ort <= openvino
    # Each OpenVINO manifest reads the graph ONNX Runtime's does: the same source, inputs and outputs
    for ref in ("torchvision:resnet18", "hf:bert", "mlscope:digits_cnn"):
        mine, theirs = catalogue.manifest(ref, "openvino"), catalogue.manifest(ref, "onnxruntime")
        assert (mine.source, mine.inputs, mine.outputs) == (theirs.source, theirs.inputs, theirs.outputs)


def test_a_model_run_without_frameworks_named_runs_where_it_ran_before_openvino(
    mlscope_env: dict[str, str],
) -> None:
    from mlscope.contract.settings import load_settings
    from mlscope.workers.local import admit_all

    # Given a model with manifests for ONNX Runtime, OpenVINO and PyTorch
    # When none is named, OpenVINO, which runs only when named, is left out
    unnamed = admit_all(MODEL, None, {}, settings=load_settings())
    assert [a.request.framework for a in unnamed] == ["onnxruntime", "pytorch"]
    # And named, it runs
    (named,) = admit_all(MODEL, ["openvino"], {}, settings=load_settings())
    assert named.request.framework == "openvino"


# A fresh process, as a predictor process imports its framework: what OpenVINO's import left behind.
_IMPORT_OPENVINO = """
import json, sys, threading, time
from mlscope.runtime.frameworks import load_predictor_class
load_predictor_class("openvino")
import openvino.tools.ovc.telemetry_utils as telemetry
time.sleep(0.3)
print(json.dumps({"telemetry": telemetry.tm.__name__, "threads": [t.name for t in threading.enumerate()]}))
"""


def test_a_predictor_process_that_imports_openvino_sends_no_telemetry(tmp_path: Path) -> None:
    # When a fresh process with a home of its own imports the OpenVINO predictor
    done = subprocess.run(
        [sys.executable, "-c", _IMPORT_OPENVINO], env={**os.environ, "HOME": str(tmp_path)},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    # Then OpenVINO's converter took its no-op telemetry stub: no thread left to send a usage event
    # (from a forked process), and no client id written under the home
    assert seen["telemetry"] == "openvino.tools.ovc.telemetry_stub", seen
    assert seen["threads"] == ["MainThread"], seen
    assert list(tmp_path.iterdir()) == []
