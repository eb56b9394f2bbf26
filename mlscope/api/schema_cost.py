"""The OpenAPI description of the resource sections (docs/cost.md): an evaluation's `memory`, and a
measurement's `energy` and `cost`. Served as stored, so they are free-form objects in marshmallow;
their documented keys are spelled out here for the OpenAPI document."""

from __future__ import annotations

from typing import Any

from marshmallow import fields

__all__ = ["MEMORY", "RESOURCE_MEASUREMENT_PROPERTIES"]


def _number(description: str) -> dict[str, Any]:
    return {"type": "number", "nullable": True, "minimum": 0, "description": description}


MEMORY = fields.Dict(
    metadata={
        "description": "the predictor process's peak memory over the evaluation; absent when not read",
        "properties": {
            "peak_rss_mb": _number("peak resident set of the predictor process, MiB"),
            "peak_device_mb": _number("the device allocator's peak (PyTorch on CUDA), MiB; null on CPU"),
            "rss_scope": {
                "type": "string",
                "description": "evaluation (the peak was reset when it started) or process (lifetime peak)",
            },
        },
        "required": ["peak_rss_mb"],
    }
)

_ENERGY = {
    "type": "object",
    "description": 'energy per inference from the machine\'s counters, or {"unavailable": reason}; '
    "absent when not measured",
    "properties": {
        "joules_per_inference": _number("joules per sample over the measurement's queries"),
        "source": {"type": "string", "description": "rapl (CPU packages) or nvml (the GPU)"},
        "joules": _number("joules over the warm-up and timed queries"),
        "samples": {"type": "integer", "description": "the samples those joules served"},
        "unavailable": {"type": "string", "description": "why no counter could be read here"},
    },
}
_COST = {
    "type": "object",
    "description": "what the throughput costs at the system's price per hour; absent without a price",
    "properties": {
        "per_1k_inferences": _number("price_per_hour / 3600 × 1000 / throughput"),
        "per_1m_tokens": _number("null until a result reports tokens"),
        "price_per_hour": _number("the price it was computed with (currency-neutral)"),
        "ci": {
            "type": "array",
            "nullable": True,
            "items": {"type": "number"},
            "minItems": 2,
            "maxItems": 2,
            "description": "[low, high] of per_1k_inferences, scaled from the median's interval; "
            "null under a load generator",
        },
    },
}

RESOURCE_MEASUREMENT_PROPERTIES: dict[str, Any] = {"energy": _ENERGY, "cost": _COST}
