"""The OpenAPI description of a generate measurement's `generation` section (docs/design.md, "Result
sections"; docs/generate.md). Descriptions only, as for `load`: measurements are served as stored."""

from __future__ import annotations

from typing import Any

__all__ = ["GENERATION_SECTION"]

_SUMMARY_TEXT = (
    "a latency summary in ms (count, mean, median, p90, p95, p99, p999, min, max, stdev, iqr, cv, "
    "trimmed_mean, median_ci); absent when no request succeeded"
)
_SUMMARY: dict[str, Any] = {"type": "object", "nullable": True, "description": _SUMMARY_TEXT}


def _number(description: str, *, nullable: bool = False) -> dict[str, Any]:
    document: dict[str, Any] = {"type": "number", "minimum": 0, "description": description}
    if nullable:
        document["nullable"] = True
    return document


_TOKENS = {
    "type": "object",
    "nullable": True,
    "description": "token counts over the requests: total, mean, min, max",
    "properties": {name: _number(name) for name in ("total", "mean", "min", "max")},
}

_PER_METRIC = {
    "type": "object",
    "properties": {
        "in_process_ms": _number("the in-process median"),
        "served_ms": _number("the served median"),
        "added_ms": {"type": "number", "description": "served − in process"},
        "ratio": _number("served / in process", nullable=True),
    },
}

_SERIES = {"type": "array", "items": {"type": "number", "nullable": True}}

_SERVER_METRICS = {
    "type": "object",
    "description": "--server-metrics: the endpoint server's Prometheus metrics sampled during the measured "
    "requests, in one vocabulary (docs/generate.md, 'Server metrics')",
    "properties": {
        "url": {"type": "string"},
        "source": {
            "type": "string",
            "nullable": True,
            "enum": ["vllm", "sglang", "tgi", "llamacpp", None],
            "description": "the server whose metric names were recognised; null when none answered",
        },
        "interval_s": _number("seconds between samples"),
        "samples": {"type": "integer", "minimum": 0, "description": "samples with a mapped metric"},
        "failed_samples": {"type": "integer", "minimum": 0},
        "first_error": {"type": "string", "description": "why the first failed sample failed"},
        "missing": {"type": "string", "description": "why there is no series (the run went on)"},
        "cpu_ms_per_sample": _number("the sampler thread's CPU time per sample", nullable=True),
        "t_s": {**_SERIES, "description": "each sample's time, s after the measured requests began"},
        "series": {
            "type": "object",
            "description": "per name (kv_cache_usage as a fraction, requests_running, requests_waiting, "
            "batch_size, prompt_tokens_per_s, generation_tokens_per_s), a value per sample (null where "
            "not given); only the names the server gives",
            "additionalProperties": _SERIES,
        },
        "client_in_flight": {**_SERIES, "description": "this client's requests in flight at each sample"},
        "peak": {"type": "object", "additionalProperties": {"type": "number"}},
    },
}

GENERATION_SECTION: dict[str, Any] = {
    "type": "object",
    "description": "the generate scenario's figures (docs/generate.md); absent for other scenarios",
    "properties": {
        "ttft_ms": {**_SUMMARY, "description": "time to first token per request; " + _SUMMARY_TEXT},
        "tpot_ms": {**_SUMMARY, "description": "time per output token after the first, per request"},
        "itl_ms": {**_SUMMARY, "description": "every inter-token latency"},
        "e2e_ms": {**_SUMMARY, "description": "end-to-end latency per request"},
        "output_tokens_per_s": _number("output tokens of the successful requests per second of the run"),
        "total_tokens_per_s": _number("prompt and output tokens per second"),
        "requests_per_s": _number("successful requests per second"),
        "goodput": _number("requests per second meeting every slo bound; null without an slo", nullable=True),
        "goodput_fraction": _number("the share of requests meeting every slo bound"),
        "failed_requests": {
            "type": "object",
            "properties": {
                "count": {"type": "integer", "minimum": 0},
                "rate": _number("failed / sent"),
                "reasons": {"type": "object", "additionalProperties": {"type": "integer"}},
                "first": {"type": "string", "description": "the first failure's message"},
            },
        },
        "requests": {"type": "integer", "minimum": 0, "description": "requests measured"},
        "concurrency": {"type": "integer", "minimum": 1},
        "prompt_tokens": _TOKENS,
        "output_tokens": _TOKENS,
        "slo": {"type": "object", "additionalProperties": {"type": "number"}, "description": "bounds, ms"},
        "certified": {
            "type": "object",
            "description": "per bounded metric, the early-stopping certificate of its percentile",
            "additionalProperties": {"type": "object"},
        },
        "workload": {
            "type": "object",
            "description": "a trace replayed (its file's name, sha256, lines, speed), conversations "
            "(turns, think_time_ms) or shared prefixes (tokens, groups); absent for drawn requests",
        },
        "turns": {
            "type": "object",
            "description": "conversations: TTFT of first turns and of later ones (first_ttft_ms, "
            "later_ttft_ms: summaries) and the median TTFT per turn (ttft_median_ms)",
        },
        "api": {"type": "string", "description": "the endpoint's api: chat, completions, embeddings, rerank"},
        "not_applicable": {
            "type": "array",
            "items": {"type": "string"},
            "description": "embeddings and rerank: the figures of generation left out (ttft_ms, tpot_ms, "
            "itl_ms, output_tokens, output_tokens_per_s), never zero",
        },
        "inputs_per_request": {"type": "integer", "minimum": 1, "description": "embeddings and rerank"},
        "input_tokens_per_s": _number("embeddings and rerank: input tokens of the successful requests per s"),
        "inputs_per_s": _number("embeddings and rerank: texts embedded or documents ranked per second"),
        "input_tokens_counted_by": {
            "type": "string",
            "enum": ["server", "request"],
            "description": "whose count input_tokens_per_s is: the server's usage, else the lengths asked",
        },
        "via": {"type": "string", "enum": ["in_process", "endpoint"]},
        "endpoint": {"type": "string", "description": "the endpoint measured, when via endpoint"},
        "served": {"type": "object", "description": "--compare-served: the same figures, served"},
        "server_metrics": _SERVER_METRICS,
        "serving_overhead": {
            "type": "object",
            "description": "--compare-served: per metric, in process vs served",
            "additionalProperties": _PER_METRIC,
        },
    },
}
