"""`contract.workload`: which differences between two stored evaluations make them different workloads
(refused by diff and regressions) and which are what users compare on purpose, and the display name
that carries a configured model's overrides."""

from __future__ import annotations

from typing import Any

import pytest

from mlscope.contract.workload import display_name, workload_differences


def evaluation(
    *,
    model: str = "hf:gpt2",
    framework: str = "pytorch",
    version: str | None = "2.3.0",
    manifest_sha256: str = "a" * 64,
    scenarios: tuple[str, ...] = ("single_stream",),
    inputs: list[dict[str, Any]] | None = None,
    system: str = "sys-1",
    device: str = "cpu",
    **request: Any,
) -> dict[str, Any]:
    """An evaluation document as the store returns it, with only what the functions read."""
    return {
        "model": {"name": model, "version": "1", "manifest_sha256": manifest_sha256},
        "framework": {"name": framework, "version": version},
        "system": {"id": system},
        "device": device,
        "runner": "process",
        "manifest": {
            "name": model,
            "inputs": inputs or [{"name": "input", "dtype": "float32", "shape": [3, 8]}],
        },
        "request": {"model": model, "framework": framework, "scenarios": list(scenarios), **request},
        "measurements": [{"scenario": s, "batch_size": 1} for s in scenarios],
    }


def fields_of(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    return [difference.field for difference in workload_differences(a, b)]


def test_alike_evaluations_have_no_difference() -> None:
    assert workload_differences(evaluation(), evaluation()) == []


def test_what_users_compare_on_purpose_is_no_difference() -> None:
    # Given A and B on another framework and version, system, device and runner, with other
    # measurement precision settings (durations, seeds) and trace level
    a = evaluation(measure={"min_seconds": 2.0}, trace_level="NO_TRACE")
    b = evaluation(
        framework="onnxruntime",
        version="1.17.0",
        manifest_sha256="b" * 64,
        system="sys-2",
        device="cuda",
        measure={"min_seconds": 20.0, "max_seconds": 120.0},
        trace_level="FULL",
        runner="docker",
    )
    # Then they measured one workload
    assert workload_differences(a, b) == []


def test_a_layout_change_across_frameworks_is_no_difference_but_another_shape_is() -> None:
    nchw = [{"name": "input", "dtype": "float32", "shape": [3, 224, 224]}]
    nhwc = [{"name": "x", "dtype": "float32", "shape": [224, 224, 3]}]
    assert fields_of(evaluation(inputs=nchw), evaluation(framework="tensorflow", inputs=nhwc)) == []
    bigger = [{"name": "input", "dtype": "float32", "shape": [3, 256, 256]}]
    [difference] = workload_differences(
        evaluation(inputs=nchw), evaluation(framework="onnxruntime", inputs=bigger)
    )
    assert difference.field == "model inputs"
    assert difference.text == "model inputs: float32 3x224x224 (A) vs float32 3x256x256 (B)"


def test_model_options_and_generation_settings_are_each_named_in_one_line() -> None:
    # Given A as shipped and B with a config override and other prompt and output lengths
    a = evaluation(scenarios=("generate",))
    b = evaluation(
        scenarios=("generate",),
        manifest_sha256="c" * 64,
        model_options={"config": {"n_layer": 2}},
        generation={"prompt_tokens": 512, "output_tokens": 16},
    )
    differences = workload_differences(a, b)
    # Then each is named once (the manifest's hash follows from the override: not named again)
    assert [d.text for d in differences] == [
        "model_options.config.n_layer: unset (A) vs 2 (B)",
        "generation.prompt_tokens: 128 (A) vs 512 (B)",
        "generation.output_tokens: 64 (A) vs 16 (B)",
    ]
    assert all("\n" not in d.text for d in differences)


def test_a_setting_left_at_its_default_equals_one_given_as_the_default() -> None:
    a = evaluation(scenarios=("generate",), generation={})
    b = evaluation(scenarios=("generate",), generation={"prompt_tokens": 128, "requests": 500})
    assert workload_differences(a, b) == []


@pytest.mark.parametrize(
    ("a_request", "b_request", "scenarios", "field"),
    [
        ({"load": {"qps": 10.0}}, {"load": {"qps": 20.0}}, ("server",), "load.qps"),
        ({}, {"load": {"max_in_flight": 4}}, ("server",), "load.max_in_flight"),
        (
            {"options": {"execution_providers": ["CPUExecutionProvider"]}},
            {},
            ("single_stream",),
            "options.execution_providers",
        ),
        ({"options": {"threads": 1}}, {"options": {"threads": 4}}, ("single_stream",), "options.threads"),
        (
            {},
            {"model_options": {"input_dtypes": {"": "float16"}}},
            ("single_stream",),
            "model_options.input_dtypes",
        ),
        (
            {},
            {"model_options": {"input_shapes": {"": [1, 3, 64]}}},
            ("single_stream",),
            "model_options.input_shapes",
        ),
        ({}, {"measure": {"concurrency": 4}}, ("offline",), "measure.concurrency"),
        ({}, {"dataset": "digits"}, ("single_stream",), "dataset"),
    ],
)
def test_settings_that_change_the_workload_are_differences(
    a_request: dict[str, Any], b_request: dict[str, Any], scenarios: tuple[str, ...], field: str
) -> None:
    a, b = evaluation(scenarios=scenarios, **a_request), evaluation(scenarios=scenarios, **b_request)
    assert fields_of(a, b) == [field]


@pytest.mark.parametrize(
    ("a_request", "b_request", "scenarios"),
    [
        # load settings mean nothing to single_stream; confidence, resolution and seed change precision
        ({"load": {"qps": 10.0}}, {"load": {"qps": 20.0}}, ("single_stream",)),
        (
            {"load": {"qps": 10.0, "seed": 0}},
            {"load": {"qps": 10, "seed": 7, "confidence": 0.9}},
            ("server",),
        ),
        # generation's request count, warm-up and endpoint (the server measured, and its name for the
        # model) are not the workload
        (
            {"generation": {"requests": 32, "endpoint": "http://a:8000/v1", "endpoint_model": "gpt2"}},
            {
                "generation": {
                    "requests": 64,
                    "warmup_requests": 5,
                    "endpoint": "http://b:8000/v1",
                    "endpoint_model": "openai-community/gpt2",
                }
            },
            ("generate",),
        ),
        # offline's concurrency means nothing to single_stream
        ({}, {"measure": {"concurrency": 4}}, ("single_stream",)),
    ],
)
def test_precision_settings_and_settings_of_other_scenarios_are_no_difference(
    a_request: dict[str, Any], b_request: dict[str, Any], scenarios: tuple[str, ...]
) -> None:
    a, b = evaluation(scenarios=scenarios, **a_request), evaluation(scenarios=scenarios, **b_request)
    assert workload_differences(a, b) == []


def test_another_model_or_manifest_on_one_framework_is_a_difference() -> None:
    assert fields_of(evaluation(), evaluation(model="hf:bert")) == ["model"]
    [changed] = workload_differences(evaluation(), evaluation(manifest_sha256="d" * 64))
    assert changed.text == f"model manifest: sha256 {'a' * 12} (A) vs sha256 {'d' * 12} (B)"


def test_the_scenarios_compared_decide_which_sections_apply() -> None:
    a = evaluation(scenarios=("single_stream", "server"), load={"qps": 5.0})
    b = evaluation(scenarios=("single_stream", "server"), load={"qps": 50.0})
    assert fields_of(a, b) == ["load.qps"]
    assert workload_differences(a, b, scenarios={"single_stream"}) == []


def test_a_difference_says_its_sides_as_asked() -> None:
    [difference] = workload_differences(evaluation(options={"threads": 2}), evaluation())
    assert difference.said("before", "now") == "options.threads: 2 (before) vs unset (now)"
    assert difference.to_dict() == {"field": "options.threads", "a": 2, "b": None, "text": difference.text}


def test_the_display_name_carries_the_overrides() -> None:
    assert display_name(evaluation()) == "hf:gpt2"
    assert (
        display_name(evaluation(model_options={"config": {"n_layer": 2, "n_head": 4}}))
        == "hf:gpt2[n_layer=2,n_head=4]"
    )
    shaped = evaluation(
        model="model.onnx", model_options={"input_shapes": {"": [1, 3, 256, 256]}, "weights": "/x/ckpt.pt"}
    )
    assert display_name(shaped) == "model.onnx[shape=1x3x256x256,weights=ckpt.pt]"


def test_the_display_name_reads_the_manifest_when_the_request_has_no_options() -> None:
    # Given an evaluation stored without a request, whose manifest snapshot records its options
    stored = evaluation()
    stored["request"] = {}
    stored["manifest"]["attributes"] = {"model_options": {"config": {"n_layer": 2}}}
    # Then its display name still carries them, and the stored name is untouched
    assert display_name(stored) == "hf:gpt2[n_layer=2]"
    assert stored["model"]["name"] == "hf:gpt2"
