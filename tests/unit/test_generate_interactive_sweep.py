"""The interactive preset's caps and the sweep's settings as a request states them, and the Pareto
front of known points (docs/generate.md, "Interactive" and "Sweeps")."""

from __future__ import annotations

from typing import Any

import pytest

from mlscope.contract.errors import UserError
from mlscope.contract.interactive import INTERACTIVE_CAPS, interactive_caps, parse_sweep
from mlscope.contract.load import LoadSettings
from mlscope.contract.request import parse_request
from mlscope.runtime.generate.sweep import pareto_front

ENDPOINT = "http://127.0.0.1:8000/v1"


def _request(model: str = "mock", generation: dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
    return {
        "model": model,
        "framework": "endpoint",
        "scenarios": ["generate"],
        "generation": {"endpoint": ENDPOINT, **(generation or {})},
        **fields,
    }


def test_the_pareto_front_of_known_points_keeps_those_no_other_beats_on_both_axes() -> None:
    points: list[tuple[float | None, float | None]] = [
        (100.0, 50.0),  # 0: the fastest per user, the least in all: on the front
        (80.0, 120.0),  # 1: on the front
        (70.0, 110.0),  # 2: beaten by 1 on both
        (40.0, 200.0),  # 3: the most in all: on the front
        (40.0, 180.0),  # 4: as fast per user as 3, less in all: beaten
        (None, 300.0),  # 5: no per-user figure (every request failed): never on it
        (80.0, 120.0),  # 6: equal to 1: neither beats the other
    ]
    assert pareto_front(points) == [0, 1, 3, 6]
    assert pareto_front([]) == []
    assert pareto_front([(1.0, 1.0)]) == [0]


@pytest.mark.parametrize(
    ("names", "benchmark"),
    [
        (("meta-llama/Llama-3.1-8B-Instruct",), "llama3.1-8b"),
        (("llama3.1-8b",), "llama3.1-8b"),
        (("Llama-2-70b-chat-hf",), "llama2-70b"),
        (("endpoint:meta-llama-llama-3.1-8b-instruct",), "llama3.1-8b"),
        (("mock", "meta-llama/Meta-Llama-3.1-405B-Instruct"), "llama3.1-405b"),
    ],
)
def test_a_model_is_found_in_mlperfs_table_under_its_published_names(
    names: tuple[str, ...], benchmark: str
) -> None:
    assert interactive_caps(*names) == (benchmark, INTERACTIVE_CAPS[benchmark])


def test_a_model_outside_the_table_has_no_caps() -> None:
    assert interactive_caps("gpt2", None, "llama3.1-70b") is None


def test_the_interactive_preset_writes_the_models_caps_and_the_99th_percentile_into_the_request() -> None:
    request = parse_request(_request("meta-llama/Llama-3.1-8B-Instruct", {"preset": "interactive"}))
    assert request.generation["slo"] == INTERACTIVE_CAPS["llama3.1-8b"]
    assert request.load["percentile"] == 99.0
    # An explicit slo wins over the table, for a model in it or not
    request = parse_request(_request("mock", {"preset": "interactive", "slo": "ttft_ms=100,tpot_ms=10"}))
    assert request.generation["slo"] == {"ttft_ms": 100.0, "tpot_ms": 10.0}


@pytest.mark.parametrize(
    ("document", "field", "words"),
    [
        (_request("mock", {"preset": "interactive"}), "generation.slo", "has no MLPerf Interactive caps"),
        (
            _request("llama3.1-8b", {"preset": "interactive"}, load={"percentile": 90}),
            "load.percentile",
            "99th percentile",
        ),
        (_request("llama3.1-8b", {"preset": "batch"}), "generation.preset", "expected one of interactive"),
        (_request(load={"sweep": "tokens=1,2"}), "load.sweep", "unknown setting 'tokens'"),
        (_request(load={"sweep": "qps="}), "load.sweep", "no values"),
        (_request(load={"sweep": "qps=1,fast"}), "load.sweep", "'fast' is not a rate"),
        (_request(load={"sweep": "concurrency=1,2.5"}), "load.sweep", "not an integer"),
        (_request(load={"sweep": "concurrency=2,2"}), "load.sweep", "repeated"),
        (_request(load={"sweep": "qps=1,2", "qps": 4}), "load.sweep", "drop qps"),
        (_request(load={"sweep": "qps=1,2", "find_max_qps": True}), "load.sweep", "drop find_max_qps"),
        (
            _request("mock", {"concurrency": 4}, load={"sweep": "concurrency=1,2"}),
            "load.sweep",
            "drop --concurrency",
        ),
        (
            _request("mock", {"turns": 2}, load={"sweep": "qps=1,2"}),
            "load.sweep",
            "sweep concurrency, not qps",
        ),
    ],
)
def test_bad_preset_or_sweep_is_one_line_naming_the_field(
    document: dict[str, Any], field: str, words: str
) -> None:
    with pytest.raises(UserError) as raised:
        parse_request(document)
    assert raised.value.field == field and words in str(raised.value)
    assert "\n" not in str(raised.value)


def test_a_sweep_outside_the_generate_scenario_is_refused() -> None:
    with pytest.raises(UserError, match="sweep applies only to the generate scenario"):
        LoadSettings(sweep="qps=1,2").check_scenarios(["offline"])


def test_a_sweep_parses_to_its_setting_and_values_in_the_order_given() -> None:
    assert parse_sweep("concurrency=8, 1,4") == {"setting": "concurrency", "values": [8, 1, 4]}
    assert parse_sweep({"setting": "qps", "values": [0.5, "2"]}) == {"setting": "qps", "values": [0.5, 2.0]}
