"""What the OpenAPI document says of an evaluation request beyond each field's own schema, so that a
request it calls valid is one the API takes, unless it names something that must exist (a model with
a manifest for the framework, a dataset, a stored evaluation).

- The settings sections, `measure`, `load` and `generation`: their names, kinds and ranges, read from
  the classes that check them (`MEASURE_BOUNDS`, each section's `BOUNDS`), so the two cannot drift.
- The rules that tie fields together (the request schema's `_check_generation` and
  `_check_dataset_options`, `LoadSettings.check_scenarios`, admission's brick and multi_stream checks),
  as an `allOf` of OpenAPI 3.0 schemas on the request and the batch body. "The scenarios hold X" is
  said as `not: {items: {not: {enum: [X]}}}` (3.0 has no `contains`).

What no schema can say is left to the API's 422: existence, and relations between two values
(measure max_seconds ≥ min_seconds, load samples_per_query ≤ options.input_pool, a uniform length's
LOW ≤ HIGH, one price for every system).
"""

from __future__ import annotations

from dataclasses import MISSING, fields
from typing import Any

from mlscope.contract.bounds import Bound
from mlscope.contract.generation import (
    APIS,
    ENDPOINT_FRAMEWORK,
    ENDPOINT_PATTERN,
    MAX_LENGTH,
    MAX_LISTED_LENGTHS,
    POOLING_APIS,
    POOLING_SLO_METRICS,
    SLO_METRICS,
    GenerationSettings,
)
from mlscope.contract.interactive import MAX_SWEEP_POINTS, PRESETS, SWEEP_KEYS
from mlscope.contract.load import LoadSettings
from mlscope.contract.names import SCENARIOS
from mlscope.contract.options import MAX_INPUT_POOL
from mlscope.contract.section import SettingsSection
from mlscope.contract.trace import MAX_TRACE_LINES, TRACE_KEYS
from mlscope.runtime.measure.settings import MEASURE_BOUNDS

__all__ = [
    "GENERATION_SCHEMA",
    "LOAD_SCHEMA",
    "MEASURE_SCHEMA",
    "POSITIVE_NUMBER",
    "batch_rules",
    "request_rules",
]

# A positive decimal number as Python's float() reads it (at most 15 digits either side of the point,
# a two-digit exponent: never 0, never infinite).
POSITIVE_NUMBER = (
    r"(?:\d{0,14}[1-9]\d{0,14}(?:\.\d{0,15})?|0{0,15}\.\d{0,14}[1-9]\d{0,14})(?:[eE][+-]?\d{1,2})?"
)
# A length in [1, MAX_LENGTH] (the pattern is built for 1 000 000).
_LENGTH = r"0*(?:[1-9]\d{0,5}|1000000)"
_MEAN = r"0*(?:[1-9]\d{0,5}(?:\.\d+)?|1000000(?:\.0+)?)"
if MAX_LENGTH != 1_000_000:  # pragma: no cover
    raise RuntimeError("the length patterns are written for MAX_LENGTH 1000000")

MEASURE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "overrides of the measurement settings (docs/design.md); max_seconds must also be ≥ "
    "min_seconds",
    "properties": {name: bound.schema() for name, bound in MEASURE_BOUNDS.items()},
    "additionalProperties": False,
}


def _lengths(name: str) -> dict[str, Any]:
    pattern = rf"^(?:{_LENGTH}|uniform:{_LENGTH}-{_LENGTH}|normal:{_MEAN},\d+(?:\.\d+)?)$"
    return {
        "description": f"{name}: a number of tokens, uniform:LOW-HIGH (LOW ≤ HIGH), normal:MEAN,SD or a "
        "list of lengths taken in turn",
        "anyOf": [
            Bound(integer=True, low=1, high=MAX_LENGTH).schema(),
            {"type": "string", "pattern": pattern},
            {
                "type": "array",
                "items": Bound(integer=True, low=1, high=MAX_LENGTH).schema(),
                "minItems": 1,
                "maxItems": MAX_LISTED_LENGTHS,
            },
        ],
    }


def _slo(metrics: tuple[str, ...]) -> dict[str, Any]:
    """An slo bounding some of `metrics`, as a mapping or as text."""
    metric = "(?:" + "|".join(metrics) + ")"
    return {
        "nullable": True,
        "description": 'per-request objectives in ms, {"ttft_ms": 200} or "ttft_ms=200,tpot_ms=50"',
        "anyOf": [
            {
                "type": "object",
                "properties": {name: Bound(low=0, low_open=True).schema() for name in metrics},
                "additionalProperties": False,
                "minProperties": 1,
            },
            {"type": "string", "pattern": rf"^{metric}={POSITIVE_NUMBER}(?:,{metric}={POSITIVE_NUMBER})*$"},
        ],
    }


_SLO = _slo(SLO_METRICS)


def _section(
    cls: type[SettingsSection], others: dict[str, dict[str, Any]], internal: tuple[str, ...] = ()
) -> dict[str, Any]:
    """The schema of a settings section: each bounded setting's range (nullable where its default is
    None), each true/false setting a boolean, the others as `others` says; `internal` ones left out."""
    properties: dict[str, Any] = {}
    for setting in fields(cls):  # type: ignore[arg-type]
        name = setting.name
        if name in internal:
            continue
        if name in cls.BOUNDS:
            properties[name] = cls.BOUNDS[name].schema()
            if setting.default is None:
                properties[name]["nullable"] = True
        elif setting.default is not MISSING and isinstance(setting.default, bool):
            properties[name] = {"type": "boolean"}
        else:
            properties[name] = others[name]
    return {"type": "object", "properties": properties, "additionalProperties": False}


def _absent_or(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    """`name` absent, or as `schema` says (an object's property)."""
    return {"properties": {name: schema}}


def _given(name: str, kind: str) -> dict[str, Any]:
    """`name` present and not null."""
    return {"required": [name], "properties": {name: {"type": kind}}}


_NOT_NUMBER = {"not": {"type": "number"}}  # null (with the property's own schema)
_NOT_TRUE = {"enum": [False]}

# A sweep as `--sweep SETTING=V1,V2` sends it (the contract also reads that text). Said loosely: its
# text form in an anyOf, a bound on its values or a closed set of keys each made the request's
# document too large for schemathesis to draw from. Positive and distinct values, integers for
# concurrency, the two keys alone and no qps beside it are checked where it arrives (HTTP 422 names
# load.sweep).
_SWEEP: dict[str, Any] = {
    "type": "object",
    "nullable": True,
    "required": ["setting", "values"],
    "properties": {
        "setting": {"type": "string", "enum": list(SWEEP_KEYS)},
        "values": {
            "type": "array",
            "minItems": 1,
            "maxItems": MAX_SWEEP_POINTS,
            "items": {"type": "number"},
        },
    },
    "description": 'generate: one point per value, e.g. {"setting": "concurrency", "values": [1, 2]} '
    '(docs/generate.md, "Sweeps")',
}

LOAD_SCHEMA: dict[str, Any] = {
    # load.shard is the API's own (each part of a split load): not a client's to give.
    **_section(LoadSettings, {"sweep": _SWEEP}, internal=("shard",)),
    "description": "the load settings of the server and multi_stream scenarios (docs/load.md); only "
    "those given are kept",
    # Left to the contract (HTTP 422 names load.interval_ms): back_to_back with an interval other
    # than the default, and load.agents' rules (a rate, open-loop scenarios). Stated here beside
    # the agents setting, either made the request's document too large for schemathesis.
}

_COLUMN = {"type": "array", "maxItems": MAX_TRACE_LINES}
# A trace as `mlscope run --trace FILE` sends it. What the document cannot say is checked where it
# arrives (HTTP 422 names the line): one value per line in every column, arrivals that never go back.
_TRACE: dict[str, Any] = {
    "type": "object",
    "nullable": True,
    "additionalProperties": False,
    "required": list(TRACE_KEYS),
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 255},
        "sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
        "lines": {"type": "integer", "minimum": 1, "maximum": MAX_TRACE_LINES},
        "first_line": {"type": "integer", "minimum": 1, "maximum": MAX_LENGTH},
        "block_tokens": {"type": "integer", "minimum": 1, "maximum": MAX_LENGTH},
        "arrivals_ms": {**_COLUMN, "items": {"type": "number", "minimum": 0}},
        "input_tokens": {**_COLUMN, "items": {"type": "integer", "minimum": 1, "maximum": MAX_LENGTH}},
        "output_tokens": {**_COLUMN, "items": {"type": "integer", "minimum": 1, "maximum": MAX_LENGTH}},
        "hash_ids": {**_COLUMN, "items": {"type": "array", "items": {"type": "integer", "minimum": 0}}},
    },
    "description": "a trace to replay, as `mlscope run --trace FILE` sends it (docs/generate.md); each "
    "column lists one value per line and arrivals never go back (HTTP 422 names the line)",
}

GENERATION_SCHEMA: dict[str, Any] = {
    **_section(
        GenerationSettings,
        {
            "prompt_tokens": _lengths("prompt length"),
            "output_tokens": _lengths("tokens generated per request"),
            "slo": _SLO,
            "endpoint": {"type": "string", "pattern": ENDPOINT_PATTERN, "nullable": True},
            "api": {"type": "string", "enum": list(APIS)},
            "endpoint_model": {"type": "string", "minLength": 1, "maxLength": 1000, "nullable": True},
            "trace": _TRACE,
            "server_metrics": {"type": "string", "pattern": ENDPOINT_PATTERN, "nullable": True},
            "preset": {"type": "string", "enum": list(PRESETS), "nullable": True},
        },
    ),
    "description": "the generate scenario's settings (docs/generate.md); only those given are kept",
    "allOf": [
        # compare_served serves the model loaded here: there is none with an endpoint.
        {
            "not": {
                "required": ["compare_served", "endpoint"],
                "properties": {"compare_served": {"enum": [True]}, "endpoint": {"type": "string"}},
            }
        },
        # trace_speed scales a trace's arrivals: not without a trace.
        {
            "not": {
                "required": ["trace_speed"],
                "properties": {"trace_speed": {"not": {"enum": [1]}}, "trace": {"not": {"type": "object"}}},
            }
        },
        # a trace sets each request's prompt itself: no turns or shared prefix beside it.
    ],
}


def _scenarios(*names: str) -> dict[str, Any]:
    """The scenarios (default single_stream) are some of `names`."""
    return _absent_or("scenarios", {"items": {"enum": list(names)}})


def _has(scenario: str) -> dict[str, Any]:
    """The scenarios hold `scenario`."""
    return {
        "required": ["scenarios"],
        "properties": {"scenarios": {"not": {"items": {"not": {"enum": [scenario]}}}}},
    }


def _without(*excluded: str) -> dict[str, Any]:
    return _scenarios(*(s for s in SCENARIOS if s not in excluded))


def _load(**properties: dict[str, Any]) -> dict[str, Any]:
    """The load section (absent: the defaults) as `properties` say."""
    return _absent_or("load", {"properties": properties})


def _load_given(**properties: dict[str, Any]) -> dict[str, Any]:
    return {
        "required": ["load"],
        "properties": {"load": {"required": list(properties), "properties": properties}},
    }


def _server_rule() -> dict[str, Any]:
    """LoadSettings.check_scenarios: the server scenario needs a rate (qps) or a search for one
    (find_max_qps with latency_bound_ms); latency_bound_ms is the server's alone, and qps and
    find_max_qps are the server's and the generate scenario's."""
    rate = _load_given(qps={"type": "number"})
    rate["properties"]["load"]["properties"]["find_max_qps"] = _NOT_TRUE
    search = _load_given(find_max_qps={"enum": [True]}, latency_bound_ms={"type": "number"})
    return {
        "anyOf": [
            {"allOf": [_has("server"), {"anyOf": [rate, search]}]},
            {
                "allOf": [
                    _without("server"),
                    _load(latency_bound_ms=_NOT_NUMBER),
                    {"anyOf": [_has("generate"), _load(qps=_NOT_NUMBER, find_max_qps=_NOT_TRUE)]},
                ]
            },
        ]
    }


def _rules(
    generate: dict[str, Any],
    other: dict[str, Any],
    bricks: list[dict[str, Any]],
    no_brick: dict[str, Any],
    brick_frameworks: dict[str, Any],
) -> list[dict[str, Any]]:
    """The rules a request and a batch share. `generate`: what the generate scenario needs besides
    running alone; `other`: what the other scenarios need; `bricks`: the ways a brick is asked for,
    `no_brick`: none of them.

    Few and flat, each an `anyOf` of whole cases: schemathesis gives up on a document whose rules
    multiply into too many cases."""
    only_generate = {
        "required": ["scenarios"],
        "properties": {
            "scenarios": {"maxItems": 1, "items": {"enum": ["generate"]}},
            # One sequence per request; generation.concurrency says how many are in flight.
            "batch_sizes": {"maxItems": 1, "items": {"enum": [1]}},
            "load": {"properties": {"max_in_flight": {"not": {}}}},
        },
    }
    # A brick is measured alone, on a framework that measures bricks: single_stream, one batch size,
    # no dataset (so no limit), no parity check (so no parity settings).
    brick_fits = {
        "allOf": [
            brick_frameworks,
            _scenarios("single_stream"),
            {
                "properties": {
                    "batch_sizes": {"maxItems": 1},
                    "dataset": {"not": {"type": "string"}},
                    "limit": {"not": {"type": "integer"}},
                    "check_parity": _NOT_TRUE,
                    "parity_against": {"not": {"type": "string"}},
                    "tolerance": _NOT_NUMBER,
                }
            },
        ]
    }
    return [
        {"anyOf": [{"allOf": [only_generate, generate]}, {"allOf": [_without("generate"), other]}]},
        _server_rule(),
        # back_to_back is multi_stream's; a multi_stream query's samples are distinct inputs of the
        # input pool.
        {
            "anyOf": [
                {"allOf": [_without("multi_stream"), _load(back_to_back=_NOT_TRUE)]},
                {"allOf": [_has("multi_stream"), _load(samples_per_query={"maximum": MAX_INPUT_POOL})]},
            ]
        },
        {
            "anyOf": [
                *({"allOf": [asked, brick_fits]} for asked in bricks),
                {
                    "allOf": [
                        no_brick,
                        # limit counts the dataset's samples.
                        {
                            "anyOf": [
                                _absent_or("limit", {"not": {"type": "integer"}}),
                                _given("dataset", "string"),
                            ]
                        },
                        # parity_against and tolerance set the parity check.
                        {
                            "anyOf": [
                                {
                                    "required": ["check_parity"],
                                    "properties": {"check_parity": {"enum": [True]}},
                                },
                                {
                                    "properties": {
                                        "parity_against": {"not": {"type": "string"}},
                                        "tolerance": _NOT_NUMBER,
                                    }
                                },
                            ]
                        },
                    ]
                },
            ]
        },
    ]


_OPTIONS_BRICK = {
    "required": ["options"],
    "properties": {"options": {"required": ["brick"], "properties": {"brick": {"enum": [True]}}}},
}
_NO_OPTIONS_BRICK = {"options": {"properties": {"brick": _NOT_TRUE}}}


def request_rules(
    frameworks: list[str], brick_frameworks: list[str], generate_only: list[str] | None = None
) -> list[dict[str, Any]]:
    """The rules of an evaluation request (`frameworks`: those it may name; `brick_frameworks`: those
    that measure bricks; `generate_only`: those that run the generate scenario alone, llama.cpp)."""
    others = [name for name in frameworks if name != ENDPOINT_FRAMEWORK]
    # An endpoint is measured on the endpoint framework, which measures nothing else.
    endpoint = {
        "required": ["framework", "generation"],
        "properties": {
            "framework": {"enum": [ENDPOINT_FRAMEWORK]},
            "generation": _given("endpoint", "string"),
        },
    }
    generating = [api for api in APIS if api not in POOLING_APIS]
    in_process = {
        "required": ["framework"],
        "properties": {
            "framework": {"enum": others},
            # server_metrics samples the endpoint's server: there is none in process.
            "generation": {
                "properties": {
                    "endpoint": {"not": {"type": "string"}},
                    "server_metrics": {"not": {"type": "string"}},
                    "api": {"enum": generating},
                }
            },
        },
    }
    # A generation request is one prompt; a pooling API (embeddings, rerank) generates no tokens: no
    # output length, no ignore_eos, an slo on e2e_ms alone (and, as above, only behind an endpoint).
    generation_api = {
        "properties": {
            "generation": {"properties": {"api": {"enum": generating}, "inputs_per_request": {"enum": [1]}}}
        }
    }
    pooling_api = {
        "required": ["generation"],
        "properties": {
            "generation": {
                "required": ["api"],
                "properties": {
                    "api": {"enum": list(POOLING_APIS)},
                    "output_tokens": {"not": {}},
                    "ignore_eos": {"not": {}},
                    "slo": _slo(POOLING_SLO_METRICS),
                },
            }
        },
    }
    # find_max_qps searches against the slo. (A preset's caps stand for it where the request names
    # none, which the contract takes; stated here, the rule made the document too large for
    # schemathesis to draw from, so the document asks for the slo.)
    slo = {
        "required": ["generation"],
        "properties": {
            "generation": {
                "required": ["slo"],
                "properties": {"slo": {"anyOf": [{"type": "object"}, {"type": "string"}]}},
            }
        },
    }
    generate = {
        "allOf": [
            {"anyOf": [endpoint, in_process]},
            {"anyOf": [generation_api, pooling_api]},
            {"anyOf": [_load(find_max_qps=_NOT_TRUE), slo]},
        ]
    }
    # Outside the generate scenario: no generation settings, no endpoint framework, none that only
    # generates.
    outside = [name for name in others if name not in (generate_only or ())]
    other = {"properties": {"generation": {"maxProperties": 0}, "framework": {"enum": outside}}}
    brick_frameworks_only = {"properties": {"framework": {"enum": brick_frameworks}}}
    return _rules(generate, other, [_OPTIONS_BRICK], {"properties": _NO_OPTIONS_BRICK}, brick_frameworks_only)


def batch_rules(brick_frameworks: list[str]) -> list[dict[str, Any]]:
    """The rules of a batch body: those of a request on the fields it shares (it has no generation
    settings: its generate evaluations take the defaults, so no find_max_qps). Its `bricks` sets
    options.brick on every evaluation."""
    bricks = {"required": ["bricks"], "properties": {"bricks": {"enum": [True]}}}
    return _rules(
        _load(find_max_qps=_NOT_TRUE),
        {},
        [_OPTIONS_BRICK, bricks],
        {"properties": {**_NO_OPTIONS_BRICK, "bricks": _NOT_TRUE}},
        {"properties": {"frameworks": {"items": {"enum": brick_frameworks}}}},
    )
