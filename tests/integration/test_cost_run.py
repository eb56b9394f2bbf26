"""Memory, energy and cost from a real `mlscope run`: a small model run in a child process on this
machine with a price set records its peak RSS, an energy section that is a figure with its source or
the reason there is none, and a cost that follows the formula with an interval around it; a price
that is not a positive number ends the command with exit code 2 and one line naming it.
"""

from __future__ import annotations

import json

import pytest

from tests.integration.test_run_cli import FAST, mlscope, ran_valid

pytestmark = pytest.mark.slow

PRICE = 0.68


def test_a_run_records_memory_energy_and_its_cost(mlscope_env: dict[str, str]) -> None:
    # Given a price and an instance type for this machine
    env = {**mlscope_env, "MLSCOPE_PRICE_PER_HOUR": str(PRICE), "MLSCOPE_INSTANCE_TYPE": "c7i.large"}

    # When a small model runs on ONNX Runtime in a child process at two batch sizes
    done = mlscope(env, "run", "test_tiny_mlp", "-f", "onnxruntime", "-b", "1,4", "--json", *FAST)
    [result] = ran_valid(done)

    # Then the predictor process's peak RSS is recorded, with no device peak on the CPU
    memory = result["memory"]
    assert memory["peak_rss_mb"] > 0 and memory["peak_device_mb"] is None
    assert memory["rss_scope"] in ("evaluation", "process")
    # ... the system carries the instance type
    assert result["system"]["instance_type"] == "c7i.large"
    for m in result["measurements"]:
        # ... each point's energy is a figure with its source, or unavailable with the reason
        energy = m["energy"]
        if "unavailable" in energy:
            assert isinstance(energy["unavailable"], str) and energy["unavailable"]
        else:
            assert energy["joules_per_inference"] > 0 and energy["source"] in ("rapl", "nvml")
        # ... and its cost follows the formula, its interval around it
        cost = m["cost"]
        assert cost["price_per_hour"] == PRICE and cost["per_1m_tokens"] is None
        assert cost["per_1k_inferences"] == pytest.approx(PRICE / 3600 * 1000 / m["throughput"])
        low, high = cost["ci"]
        assert low <= cost["per_1k_inferences"] <= high

    # ... and the stored result says the same
    shown = mlscope(env, "results", "show", result["id"], "--json")
    assert json.loads(shown.stdout)["memory"] == memory


def test_a_bad_price_exits_2_naming_the_setting(mlscope_env: dict[str, str]) -> None:
    # Given a price that is not a positive number, When a run is asked for
    env = {**mlscope_env, "MLSCOPE_PRICE_PER_HOUR": "-0.5"}
    done = mlscope(env, "run", "test_tiny_mlp", "-f", "onnxruntime", *FAST)

    # Then it exits 2 with one line naming the setting
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "mlscope: error: setting price_per_hour='-0.5' is not a price: expected a positive number per hour "
        "(e.g. 0.17)"
    ]


def test_a_result_recorded_without_a_price_is_priced_at_read_time(mlscope_env: dict[str, str]) -> None:
    # Given a run recorded with no price
    done = mlscope(mlscope_env, "run", "test_tiny_mlp", "-f", "onnxruntime", "--json", *FAST)
    [result] = ran_valid(done)
    assert all("cost" not in m for m in result["measurements"])

    # When it is shown with a price, Then each point is priced, marked as priced at read time
    shown = mlscope(mlscope_env, "results", "show", result["id"], "--json", "--price-per-hour", "1.5")
    [m] = json.loads(shown.stdout)["measurements"]
    assert m["cost"]["per_1k_inferences"] == pytest.approx(1.5 / 3.6 / m["throughput"])
    assert m["cost"]["read_time"] is True

    # ... and a bad price there exits 2 naming the option
    refused = mlscope(mlscope_env, "results", "show", result["id"], "--price-per-hour", "gratis")
    assert refused.returncode == 2
    assert refused.stderr.strip() == (
        "mlscope: error: --price-per-hour='gratis' is not a price: "
        "expected a positive number per hour (e.g. 0.17)"
    )
