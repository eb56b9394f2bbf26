"""`options.compile` (torch.compile), `precision` and `quantize` at the edges, without running a
model: each value validated by the request schema, refused on a framework that has no such option and
with the generate scenario (one line, exit 2, nothing stored), `compile=none,default` admitted as two
evaluations, a compiled model's parity checked against its framework eager, the recompiles a point
saw said among its reasons, and the framework column naming the variant.
tests/integration/test_compile.py and test_precision.py run them for real."""

from __future__ import annotations

from typing import Any

import pytest

from mlscope.cli import main
from mlscope.cli.render import framework_label, section_lines
from mlscope.contract.errors import UserError
from mlscope.contract.job import Job
from mlscope.contract.request import parse_request
from mlscope.contract.result import ResultMeasurement
from mlscope.contract.settings import load_settings
from mlscope.runtime.compiled import note_recompiles
from mlscope.runtime.predictors.base import Predictor
from mlscope.store import open_store
from mlscope.workers.local import admit_all

MODEL = "test_tiny_mlp"


def test_a_compile_mode_is_one_of_torch_compiles() -> None:
    for mode in ("none", "default", "reduce-overhead", "max-autotune"):
        assert parse_request({"model": MODEL, "framework": "pytorch", "options": {"compile": mode}})
    with pytest.raises(UserError) as refused:
        parse_request({"model": MODEL, "framework": "pytorch", "options": {"compile": "fast"}})
    assert refused.value.field == "options.compile"


def test_none_and_a_mode_are_two_evaluations_eager_first(mlscope_env: dict[str, str]) -> None:
    admitted = admit_all(
        MODEL, ["pytorch"], {"options": {"compile": "none,default"}}, settings=load_settings()
    )
    assert [a.request.options.get("compile") for a in admitted] == ["none", "default"]
    # One mode, or none at all: one evaluation
    for document in ({"options": {"compile": "default"}}, {}):
        assert len(admit_all(MODEL, ["pytorch"], document, settings=load_settings())) == 1
    # Two options given several values: every pair, in order
    both = {"options": {"compile": "none,default", "precision": "fp32,bf16"}}
    pairs = [
        (a.request.options["compile"], a.request.options["precision"])
        for a in admit_all(MODEL, ["pytorch"], both, settings=load_settings())
    ]
    assert pairs == [("none", "fp32"), ("none", "bf16"), ("default", "fp32"), ("default", "bf16")]


def test_a_compiled_models_parity_is_checked_against_its_framework_eager(mlscope_env: dict[str, str]) -> None:
    document = {"options": {"compile": "default"}, "check_parity": True}
    (admitted,) = admit_all(MODEL, ["pytorch"], document, settings=load_settings())
    assert admitted.parity_against == "pytorch"
    manifest = admitted.manifest.to_dict()
    job = Job.from_request(admitted.request, evaluation_id="e", manifest=manifest, origin="", cache_dir="c")
    reference = admitted.parity_job(job)
    assert reference.framework == "pytorch" and "compile" not in reference.options
    assert job.options["compile"] == "default"
    # The same framework named as the reference of a model as loaded is still refused
    with pytest.raises(UserError) as refused:
        admit_all(
            MODEL, ["pytorch"], {"check_parity": True, "parity_against": "pytorch"}, settings=load_settings()
        )
    assert refused.value.field == "parity_against"


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        (["-f", "onnxruntime", "--option", "compile=default"], "ONNX Runtime has no compile option"),
        (["-f", "pytorch", "--option", "compile=fast"], "compile"),
        (["-f", "pytorch", "--option", "compile=default", "--scenario", "generate"], "options.compile"),
        (
            ["-f", "onnxruntime", "--option", "precision=bf16"],
            "options.precision: ONNX Runtime runs mlscope's fp32 graphs in fp32 only (bf16",
        ),
        (["-f", "pytorch", "--option", "precision=fp64"], "precision"),
        (["-f", "pytorch", "--option", "quantize=int4"], "quantize"),
        (
            ["-f", "pytorch", "--option", "quantize=int8", "--option", "precision=bf16"],
            "options.precision: an int8-quantised model computes in int8 and fp32, not bf16",
        ),
    ],
)
def test_a_compile_that_cannot_be_is_refused_in_one_line_storing_nothing(
    mlscope_env: dict[str, str], capsys: pytest.CaptureFixture[str], arguments: list[str], named: str
) -> None:
    assert named in refused_run(mlscope_env, capsys, arguments)


def refused_run(env: dict[str, str], capsys: pytest.CaptureFixture[str], arguments: list[str]) -> str:
    """`mlscope run MODEL *arguments`'s one error line, after checking it exited 2 with that one
    line and stored nothing."""
    with pytest.raises(SystemExit) as ended:
        main(["run", MODEL, *arguments])
    assert ended.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("mlscope: error: "), err
    assert open_store(env["MLSCOPE_STORE_URL"]).count_evaluations() == 0
    return err


class _Counting(Predictor):
    """A predictor whose compile count is scripted: note_recompiles reads only `compilations`."""

    NAME = "counting"
    count: int | None = 0

    @classmethod
    def framework_version(cls) -> str:
        return "0"

    @classmethod
    def libraries(cls) -> dict[str, Any]:
        return {}

    def load(self) -> None:
        pass

    def prepare(self, arrays: Any) -> Any:
        return arrays

    def predict(self, batch: Any) -> Any:
        return batch

    def outputs_to_numpy(self, outputs: Any) -> Any:
        return outputs

    def compilations(self) -> int | None:
        return self.count


def _measurement() -> ResultMeasurement:
    return {
        "scenario": "single_stream",
        "batch_size": 1,
        "latency_ms": {},  # type: ignore[typeddict-item]
        "throughput": 1.0,
        "validity": {"valid": True, "reasons": []},
    }


def test_a_point_that_compiled_while_measured_says_so_and_one_that_did_not_is_silent(
    mlscope_env: dict[str, str],
) -> None:
    from mlscope.registry.models import ModelRegistry

    manifest = ModelRegistry.load(load_settings().manifests).get(MODEL, "pytorch")
    predictor = _Counting(manifest=manifest)
    noisy = _measurement()
    predictor.count = 5
    note_recompiles(noisy, predictor, 3)
    assert noisy["recompiles"] == 2 and noisy["validity"]["valid"] is True
    assert noisy["validity"]["reasons"] == [
        "recompiled 2 times while measured (warm-up or timed loop): a compile in the timed loop is in "
        "the latencies"
    ]
    silent = _measurement()
    note_recompiles(silent, predictor, 5)
    assert silent["recompiles"] == 0 and silent["validity"]["reasons"] == []
    # An eager model counts nothing: no figure at all
    predictor.count = None
    eager = _measurement()
    note_recompiles(eager, predictor, None)
    assert "recompiles" not in eager


def test_the_framework_column_names_the_compile_mode() -> None:
    compiled = {"framework": {"name": "pytorch"}, "request": {"options": {"compile": "default"}}}
    eager = {"framework": {"name": "pytorch"}, "request": {"options": {"compile": "none"}}}
    failed = {"framework": {"name": "pytorch"}, "request": {"options": {"compile": "max-autotune"}}}
    assert framework_label(compiled) == "pytorch compile=default"
    assert framework_label(eager) == "pytorch"
    assert framework_label(failed) == "pytorch compile=max-autotune"
    # And a compiled model's parity line names its reference as its framework eager
    parity = {"against": "pytorch", "verdict": "same", "count": 64, "max_abs": 2e-6}
    ((label, text),) = section_lines({**compiled, "parity": parity})
    assert label == "parity" and text.startswith("same as pytorch (eager): max |Δ| 2.0e-06")
    quantised = {"framework": {"name": "pytorch"}, "request": {"options": {"quantize": "int8"}}}
    ((_, text),) = section_lines({**quantised, "parity": parity})
    assert text.startswith("same as pytorch (as loaded): ")
    ((_, text),) = section_lines({**eager, "parity": {**parity, "against": "onnxruntime"}})
    assert text.startswith("same as onnxruntime: ")


def test_mlscope_frameworks_says_which_framework_takes_compile(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    main(["frameworks", "--json"])
    rows = {row["name"]: row for row in map(json.loads, capsys.readouterr().out.splitlines())}
    assert rows["pytorch"]["options"] == ["compile", "precision", "quantize"]
    assert rows["onnxruntime"]["options"] == ["precision", "quantize"]
