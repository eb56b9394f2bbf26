"""The cost of a measurement: the formula and its interval (mlscope.contract.cost), the price setting
and `--price-per-hour` refusing what is not a positive number, and read-time prices filling in
comparison rows and results recorded without a price."""

from __future__ import annotations

from typing import Any

import pytest

from mlscope.cli.render_cost import cost_cell, parse_prices, resource_lines
from mlscope.contract.cost import check_price, cost_section
from mlscope.contract.errors import UserError
from mlscope.contract.settings import load_settings

PRICE = 0.68  # an hour of a 4-vCPU cloud machine, say


def single_stream(throughput: float = 250.0) -> dict[str, Any]:
    return {
        "scenario": "single_stream",
        "batch_size": 1,
        "throughput": throughput,
        "latency_ms": {"median": 4.0, "median_ci": [3.9, 4.2]},
    }


def test_cost_per_1k_inferences_follows_the_formula_and_its_interval_brackets_it() -> None:
    # Given a point measured at 250 samples/s with a median of 4.0 ms [3.9, 4.2]
    section = cost_section(single_stream(), PRICE)

    # Then the cost is price / 3600 × 1000 / throughput, the interval the median's, scaled
    assert section is not None
    point = PRICE / 3600 * 1000 / 250.0
    assert section["per_1k_inferences"] == pytest.approx(point)
    assert section["ci"] == pytest.approx([point * 3.9 / 4.0, point * 4.2 / 4.0])
    assert section["ci"][0] <= section["per_1k_inferences"] <= section["ci"][1]
    assert (section["price_per_hour"], section["per_1m_tokens"]) == (PRICE, None)


def test_an_interval_bound_at_the_median_holds_the_point_to_the_last_digit() -> None:
    # Given medians whose interval's lower bound is the median itself (a collapsed bootstrap interval)
    for step in range(1, 2001):
        median = 0.01 * step + 0.003
        latency = {"median": median, "median_ci": [median, median]}
        section = cost_section({**single_stream(1000.0 / median), "latency_ms": latency}, PRICE)
        # Then the interval is the point itself, with no rounding step outside it
        assert section is not None
        assert section["ci"] == [section["per_1k_inferences"]] * 2, median


def test_a_load_generators_rate_is_priced_without_a_latency_interval() -> None:
    # Given a server point: its throughput is the rate issued, not what the latency allows
    served = {**single_stream(100.0), "scenario": "server"}

    # Then it has a cost at that rate, and no interval borrowed from the latency
    section = cost_section(served, PRICE)
    assert section is not None and section["ci"] is None
    assert section["per_1k_inferences"] == pytest.approx(PRICE / 3.6 / 100.0)


def test_nothing_to_price_without_a_throughput() -> None:
    assert cost_section(single_stream(0.0), PRICE) is None
    assert cost_section({**single_stream(), "throughput": None}, PRICE) is None


@pytest.mark.parametrize("bad", ["0", "-1", "nan", "inf", "cheap", "", True, 0, -0.5])
def test_a_price_that_is_not_a_positive_number_is_refused_naming_its_source(bad: Any) -> None:
    with pytest.raises(UserError, match=r"^--price-per-hour=.* is not a price: expected a positive number"):
        check_price(bad, "price_per_hour", "--price-per-hour")


def test_the_price_setting_is_checked_where_settings_are_read() -> None:
    # Given MLSCOPE_PRICE_PER_HOUR set to a good and a bad value
    good = load_settings({"MLSCOPE_PRICE_PER_HOUR": "0.68", "MLSCOPE_INSTANCE_TYPE": "c7i.xlarge"})
    assert (good.price_per_hour, good.instance_type) == (0.68, "c7i.xlarge")

    # Then the bad one is refused, the message and field naming the setting
    with pytest.raises(UserError, match=r"^setting price_per_hour='-2' is not a price") as refused:
        load_settings({"MLSCOPE_PRICE_PER_HOUR": "-2"})
    assert refused.value.field == "price_per_hour"


def test_read_time_prices_apply_per_system_then_to_every_other() -> None:
    # Given a price for one agent and one for every other system
    prices = parse_prices(["agent-a=2.0", "0.5"])
    rows = [
        {"agent_id": "agent-a", "system_id": "aaaa", "scenario": "offline", "throughput": 1000.0,
         "median_ms": 8.0, "ci_low_ms": 7.6, "ci_high_ms": 8.8, "cost_per_1k": None},
        {"agent_id": None, "system_id": "bbbb", "hostname": "h", "scenario": "single_stream",
         "throughput": 500.0, "median_ms": 2.0, "ci_low_ms": None, "ci_high_ms": None, "cost_per_1k": None},
        {"agent_id": None, "system_id": "cccc", "scenario": "single_stream", "throughput": 500.0,
         "median_ms": 2.0, "price_per_hour": 9.0, "cost_per_1k": 0.005, "cost_ci_low": None},
    ]  # fmt: skip

    # When the rows are priced
    priced = prices.price_rows(rows)

    # Then the agent's row uses its price with the scaled interval, the other the default, and a
    # recorded price is left as it was measured
    assert priced[0]["price_per_hour"] == 2.0
    assert priced[0]["cost_per_1k"] == pytest.approx(2.0 / 3.6 / 1000.0)
    assert priced[0]["cost_ci_low"] == pytest.approx(priced[0]["cost_per_1k"] * 7.6 / 8.0)
    assert (priced[1]["price_per_hour"], priced[1]["cost_ci_low"]) == (0.5, None)
    assert priced[2] == rows[2]
    assert cost_cell(priced[1]) == "0.000278"
    assert cost_cell(priced[0]) == "0.000556 ±10%"
    assert cost_cell({"cost_per_1k": None}) == "-"
    assert cost_cell({"cost_per_1k": 1e-3, "cost_ci_low": 6e-4, "cost_ci_high": 2.02e-3}) == "0.001 ±102%"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (["gpu-box=-1"], r"^--price-per-hour gpu-box='-1' is not a price"),
        (["=1"], r"expected SYSTEM=PRICE"),
        (["1", "2"], r"for every system twice"),
    ],
)
def test_bad_read_time_prices_are_refused(values: list[str], message: str) -> None:
    with pytest.raises(UserError, match=message):
        parse_prices(values)


def test_the_resource_lines_say_memory_energy_and_cost() -> None:
    # Given a result with every resource section, priced at read time
    result = {
        "system": {"id": "abcd", "hostname": "h"},
        "memory": {"peak_rss_mb": 412.3, "peak_device_mb": None, "rss_scope": "evaluation"},
        "measurements": [{**single_stream(), "energy": {"unavailable": "no RAPL here"}}],
    }
    priced = parse_prices(["1.8"]).price_result(result)

    # Then each reads as one line
    lines = [f"{label}: {text}" for label, text in resource_lines(priced)]
    assert lines == [
        "memory: peak RSS 412.3 MiB (this evaluation), device -",
        "energy: [yellow]unavailable[/yellow]: no RAPL here",
        "cost: single_stream batch 1: 0.002 per 1k inferences [0.00195–0.0021] at 1.8/hour, "
        "priced at read time",
    ]


def test_the_python_apis_table_gains_cost_and_energy_columns_only_when_measured() -> None:
    from mlscope.library import ResultSet

    # Given two results: one with a price and an energy figure on its one point, one with neither
    def result(id: str, **sections: Any) -> dict[str, Any]:
        latency = {"mean": 4.0, "median": 4.0, "p90": 4.4, "p99": 5.0, "count": 30, "median_ci": [3.9, 4.2]}
        measurement = {**single_stream(), "latency_ms": latency, "validity": {"valid": True}, **sections}
        return {
            "id": id,
            "model": {"name": "m"},
            "framework": {"name": "onnxruntime", "version": "1"},
            "device": "cpu",
            "status": "succeeded",
            "error": None,
            "measurements": [measurement],
        }

    priced = result(
        "a", cost=cost_section(single_stream(), PRICE), energy={"joules_per_inference": 0.5, "source": "rapl"}
    )
    plain = result("b", energy={"unavailable": "no RAPL here"})

    # When tabled, Then the columns follow throughput, NaN where not measured
    frame = ResultSet([priced, plain]).to_pandas()
    columns = list(frame.columns)
    assert columns[columns.index("throughput") + 1 : columns.index("throughput") + 3] == [
        "cost_per_1k",
        "joules_per_inference",
    ]
    assert frame["cost_per_1k"][0] == pytest.approx(PRICE / 3.6 / 250.0)
    assert frame["joules_per_inference"].isna().tolist() == [False, True]
    # ... and without any, no such columns at all
    assert "cost_per_1k" not in ResultSet([plain]).to_pandas().columns
