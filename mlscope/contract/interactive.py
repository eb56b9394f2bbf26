"""The generate scenario's named presets and its sweeps.

`interactive` is MLPerf Inference's Interactive scenario: the Server scenario (Poisson arrivals) of
an LLM with tight p99 caps on time to first token and time per output token. It is a preset of the
generate scenario, not a scenario of its own: what it measures, how, and what it stores are the
generate scenario's; only its SLO (the model's caps from `INTERACTIVE_CAPS`, or an explicit `slo`)
and its percentile (99) are set by it. The caps follow MLPerf Inference's published rules (the
inference policies' table of latency constraints per benchmark; docs/generate.md, "Interactive").

A sweep (`concurrency=1,2,4,8` or `qps=1,2,4`) runs one point of the generate scenario per value.
"""

from __future__ import annotations

import math
import re
from typing import Any

from mlscope.contract.errors import UserError

__all__ = [
    "INTERACTIVE_CAPS",
    "INTERACTIVE_PERCENTILE",
    "MAX_SWEEP_POINTS",
    "PRESETS",
    "SWEEP_KEYS",
    "interactive_caps",
    "parse_sweep",
]

PRESETS = ("interactive",)
# MLPerf holds the Interactive scenario's TTFT and TPOT to their 99th percentile.
INTERACTIVE_PERCENTILE = 99.0
# MLPerf Inference's Interactive caps per benchmark model: p99 TTFT and TPOT, in ms.
INTERACTIVE_CAPS: dict[str, dict[str, float]] = {
    "llama2-70b": {"ttft_ms": 450.0, "tpot_ms": 40.0},
    "llama3.1-8b": {"ttft_ms": 500.0, "tpot_ms": 30.0},
    "llama3.1-405b": {"ttft_ms": 4500.0, "tpot_ms": 80.0},
}
# What a sweep may vary: a generation setting (concurrency) or a load one (qps).
SWEEP_KEYS = ("concurrency", "qps")
MAX_SWEEP_POINTS = 64

# Words a model's published name carries that MLPerf's benchmark name leaves out.
_DROPPED = re.compile(r"-(instruct|chat|hf|interactive)\b")


def _benchmark_name(model: str) -> str:
    """A model's name as MLPerf's benchmarks spell it: `meta-llama/Llama-3.1-8B-Instruct`, its
    endpoint manifest's `endpoint:meta-llama-llama-3.1-8b-instruct` and `llama-3.1-8b` become
    `llama3.1-8b`; `Llama-2-70b-chat-hf` becomes `llama2-70b`."""
    name = re.split(r"[/:]", model.strip().lower())[-1].replace("_", "-")
    name = re.sub(r"^meta-(llama-)?(?=llama)", "", name)
    name = _DROPPED.sub("", name)
    return re.sub(r"^llama-(\d)", r"llama\1", name)


def interactive_caps(*models: str | None) -> tuple[str, dict[str, float]] | None:
    """The benchmark name and caps of the first of `models` in `INTERACTIVE_CAPS`; None when none is."""
    for model in models:
        if model:
            name = _benchmark_name(model)
            if name in INTERACTIVE_CAPS:
                return name, dict(INTERACTIVE_CAPS[name])
    return None


def parse_sweep(value: Any) -> dict[str, Any]:
    """A sweep from "concurrency=1,2,4" or {"setting": "qps", "values": [1, 2]}: its setting and
    values, in the order given.

    Raises:
        UserError: an unknown setting, no values, a value that is not a number (an integer > 0 for
            concurrency, a number > 0 for qps), a repeated value, or more than MAX_SWEEP_POINTS;
            `field` is "sweep".
    """
    keys = " or ".join(SWEEP_KEYS)
    if isinstance(value, str):
        key, sep, listed = value.partition("=")
        if not sep:
            raise UserError(
                f"sweep {value!r} is not SETTING=V1,V2,... (e.g. concurrency=1,2,4,8)", field="sweep"
            )
        value = {"setting": key.strip(), "values": [v.strip() for v in listed.split(",") if v.strip()]}
    if not isinstance(value, dict) or set(value) != {"setting", "values"}:
        raise UserError(f"sweep must be SETTING=V1,V2,... with SETTING {keys}", field="sweep")
    setting, values = value["setting"], value["values"]
    if setting not in SWEEP_KEYS:
        raise UserError(f"sweep: unknown setting {setting!r}: expected {keys}", field="sweep")
    if not isinstance(values, list) or not values:
        raise UserError(f"sweep {setting}: no values (e.g. {setting}=1,2,4)", field="sweep")
    if len(values) > MAX_SWEEP_POINTS:
        raise UserError(f"sweep {setting}: {len(values)} values, at most {MAX_SWEEP_POINTS}", field="sweep")
    parsed: list[Any] = []
    for item in values:
        number = _number(item)
        if setting == "concurrency":
            if number is None or number != int(number) or not 1 <= number <= 4096:
                raise UserError(f"sweep concurrency: {item!r} is not an integer in [1, 4096]", field="sweep")
            parsed.append(int(number))
        else:
            if number is None or not 0 < number <= 100_000:
                raise UserError(f"sweep qps: {item!r} is not a rate in (0, 100000]", field="sweep")
            parsed.append(float(number))
    if len(set(parsed)) != len(parsed):
        raise UserError(f"sweep {setting}: a value is repeated", field="sweep")
    return {"setting": setting, "values": parsed}


def _number(item: Any) -> float | None:
    """`item` as a finite number (a number, or a string of one); None if it is not one."""
    if isinstance(item, bool):
        return None
    if isinstance(item, str):
        try:
            item = float(item)
        except ValueError:
            return None
    if isinstance(item, (int, float)) and math.isfinite(item):
        return float(item)
    return None
