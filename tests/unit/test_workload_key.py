"""`contract.workload.workload_key`: the key the comparison table groups rows by, alike exactly where
workload_differences finds the workloads alike for one scenario."""

from __future__ import annotations

from typing import Any

import pytest

from mlscope.contract.workload import workload_differences, workload_key
from tests.unit.test_workload import evaluation


def test_one_workload_has_one_key_whatever_the_framework_system_and_precision() -> None:
    # Given two evaluations of one workload on other frameworks (other manifests), systems, devices
    # and measurement durations
    a = evaluation(measure={"min_seconds": 2.0})
    b = evaluation(
        framework="onnxruntime",
        manifest_sha256="b" * 64,
        system="sys-2",
        device="cuda",
        measure={"min_seconds": 20.0},
    )
    # Then they key alike, a short hex digest
    assert workload_key(a, "single_stream") == workload_key(b, "single_stream")
    assert len(workload_key(a, "single_stream")) == 16
    int(workload_key(a, "single_stream"), 16)


@pytest.mark.parametrize(
    ("scenario", "a", "b"),
    [
        (
            "offline",
            {"model_options": {"config": {"n_layer": 2}}},
            {"model_options": {"config": {"n_layer": 4}}},
        ),
        (
            "offline",
            {"model_options": {"input_shapes": {"": [1, 3, 224, 224]}}},
            {"model_options": {"input_shapes": {"": [1, 3, 256, 256]}}},
        ),
        ("offline", {"model_options": {"weights": "a.pt"}}, {"model_options": {"weights": "b.pt"}}),
        ("server", {"load": {"qps": 10}}, {"load": {"qps": 30}}),
        ("multi_stream", {"load": {"samples_per_query": 8}}, {"load": {"samples_per_query": 4}}),
        ("generate", {"generation": {"prompt_tokens": 128}}, {"generation": {"prompt_tokens": 512}}),
        ("generate", {"generation": {"output_tokens": 64}}, {"generation": {"output_tokens": 16}}),
        ("offline", {"measure": {"concurrency": 1}}, {"measure": {"concurrency": 4}}),
        ("single_stream", {"options": {"threads": 1}}, {"options": {"threads": 8}}),
        ("single_stream", {"options": {"compile": "none"}}, {"options": {"compile": "default"}}),
        ("single_stream", {"options": {}}, {"options": {"compile": "max-autotune"}}),
        ("single_stream", {"dataset": "imagenet-val"}, {"dataset": "imagenet-v2"}),
    ],
)
def test_each_kind_of_workload_difference_changes_the_key(
    scenario: str, a: dict[str, Any], b: dict[str, Any]
) -> None:
    first, second = evaluation(scenarios=(scenario,), **a), evaluation(scenarios=(scenario,), **b)
    # Given evaluations workload_differences tells apart in the scenario
    assert workload_differences(first, second, scenarios=[scenario]) != []
    # Then their keys differ
    assert workload_key(first, scenario) != workload_key(second, scenario)


def test_another_model_version_is_another_key() -> None:
    a, b = evaluation(), evaluation()
    b["model"] = {**b["model"], "version": "2"}
    assert workload_key(a, "offline") != workload_key(b, "offline")


@pytest.mark.parametrize(
    ("scenario", "given"),
    [
        ("server", {"load": {"max_in_flight": 1, "samples_per_query": 8, "find_max_qps": False}}),
        ("generate", {"generation": {"prompt_tokens": 128, "output_tokens": 64, "api": "chat"}}),
        ("offline", {"measure": {"concurrency": 1}}),
        ("offline", {"options": {"graph_optimization_level": "all", "execution_providers": []}}),
        ("server", {"load": {"interval_ms": 50}}),
    ],
)
def test_a_default_left_out_keys_as_the_default_given(scenario: str, given: dict[str, Any]) -> None:
    # Given an old result that left the settings out and one that set them to their defaults (an
    # integral float given as an integer, a tuple default stored as a list)
    old, new = evaluation(scenarios=(scenario,)), evaluation(scenarios=(scenario,), **given)
    assert workload_differences(old, new, scenarios=[scenario]) == []
    # Then they key alike
    assert workload_key(old, scenario) == workload_key(new, scenario)


@pytest.mark.parametrize(
    ("scenario", "setting"),
    [
        ("offline", {"load": {"qps": 30}}),
        ("single_stream", {"generation": {"output_tokens": 16}}),
        ("server", {"generation": {"prompt_tokens": 512}}),
        ("server", {"measure": {"concurrency": 4}}),
        ("generate", {"measure": {"concurrency": 4}}),
    ],
)
def test_a_setting_of_another_scenario_does_not_change_the_key(
    scenario: str, setting: dict[str, Any]
) -> None:
    plain, other = evaluation(scenarios=(scenario,)), evaluation(scenarios=(scenario,), **setting)
    assert workload_key(plain, scenario) == workload_key(other, scenario)
    # while in the scenario it shapes, it does
    shaped = {"load": "server", "generation": "generate", "measure": "offline"}[next(iter(setting))]
    assert workload_key(plain, shaped) != workload_key(other, shaped)


def test_model_options_recorded_only_in_the_manifest_key_as_the_requests() -> None:
    # Given one evaluation whose request carries the options and one whose manifest snapshot does
    options = {"config": {"n_layer": 2}}
    in_request = evaluation(model_options=options)
    in_manifest = evaluation()
    in_manifest["manifest"]["attributes"] = {"model_options": options}
    # Then they key alike, and apart from the model without options
    assert workload_key(in_request, "offline") == workload_key(in_manifest, "offline")
    assert workload_key(in_request, "offline") != workload_key(evaluation(), "offline")


def test_a_model_compiled_in_no_mode_keys_and_compares_as_one_that_never_named_compile() -> None:
    # Given a result from before the compile option, and one that set compile=none (eager)
    old, eager = evaluation(), evaluation(options={"compile": "none"})
    # Then they are one workload with one key: a store's series go on across the option's arrival
    assert workload_differences(old, eager) == []
    assert workload_key(old, "single_stream") == workload_key(eager, "single_stream")
    # And a compiled one is named apart
    compiled = evaluation(options={"compile": "default"})
    (difference,) = workload_differences(old, compiled)
    assert difference.text == "options.compile: unset (A) vs default (B)"
