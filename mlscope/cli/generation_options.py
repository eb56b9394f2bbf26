"""The generate scenario's options (`--prompt-tokens`, `--slo`, `--endpoint`, ...), shared by `run`,
`submit` and `compare`, and the request's `generation` document they make.

A `file:PATH` length is read here, where it was typed, and sent as the list of lengths, and so is a
`--trace FILE` (as its arrivals, lengths and shared blocks): a worker never reads a file named by a
client.
"""

from __future__ import annotations

from typing import Any

import click

from mlscope.cli.key_values import parse_key_values, with_flags
from mlscope.contract.errors import UserError
from mlscope.contract.generation import APIS, ENDPOINT_FRAMEWORK, read_lengths_file
from mlscope.contract.trace import read_trace

__all__ = ["GENERATION_FLAGS", "GENERATION_OPTIONS", "generation_document"]

# (parameter, setting): the generation settings with options of their own.
GENERATION_FLAGS = (
    ("prompt_tokens", "prompt_tokens"),
    ("output_tokens", "output_tokens"),
    ("requests", "requests"),
    ("concurrency", "concurrency"),
    ("slo", "slo"),
    ("endpoint", "endpoint"),
    ("api", "api"),
    ("endpoint_model", "endpoint_model"),
    ("ignore_eos", "ignore_eos"),
    ("compare_served", "compare_served"),
    ("trace", "trace"),
    ("trace_speed", "trace_speed"),
    ("turns", "turns"),
    ("think_time", "think_time_ms"),
    ("shared_prefix_tokens", "shared_prefix_tokens"),
    ("prefix_groups", "prefix_groups"),
    ("server_metrics", "server_metrics"),
    ("inputs_per_request", "inputs_per_request"),
)


GENERATION_OPTIONS = (
    click.option(
        "--prompt-tokens",
        metavar="SPEC",
        help="generate: prompt length per request: N, uniform:LOW-HIGH, normal:MEAN,SD or file:PATH "
        "(lengths taken in order) [default: 128].",
    ),
    click.option(
        "--output-tokens",
        metavar="SPEC",
        help="generate: tokens generated per request, forced (same forms) [default: 64].",
    ),
    click.option("--requests", type=int, metavar="N", help="generate: requests measured [default: 32]."),
    click.option(
        "--concurrency",
        type=int,
        metavar="N",
        help="generate: requests in flight at once (a closed loop; with --qps the most in flight) "
        "[default: 1].",
    ),
    click.option(
        "--slo",
        metavar="METRIC=MS,...",
        help="generate: per-request objectives, e.g. ttft_ms=200,tpot_ms=50 (also e2e_ms): goodput counts "
        "the requests meeting them; --find-max-qps searches the highest rate whose --percentile meets them.",
    ),
    click.option(
        "--endpoint",
        metavar="URL",
        help="generate: measure the model behind this OpenAI-compatible endpoint (http://host:port/v1) "
        "instead of loading it here; MODEL names it (or --endpoint-model).",
    ),
    click.option(
        "--api",
        type=click.Choice(list(APIS)),
        help="generate: the endpoint's API: chat (/chat/completions) or completions [default: chat]; "
        "embeddings or rerank for a model that generates no tokens (timed end to end).",
    ),
    click.option(
        "--inputs-per-request",
        type=int,
        metavar="N",
        help="generate with --api embeddings: texts per request; with --api rerank: documents per "
        "query [default: 1].",
    ),
    click.option("--endpoint-model", metavar="NAME", help="generate: the model name sent to the endpoint."),
    click.option(
        "--ignore-eos",
        is_flag=True,
        help="generate: ask the endpoint not to stop at end-of-sequence (ignore_eos and min_tokens, as "
        "vLLM and SGLang take them).",
    ),
    click.option(
        "--compare-served",
        is_flag=True,
        help="generate: also serve the model here (transformers serve), send it the same requests and "
        "report the serving overhead per metric.",
    ),
    click.option(
        "--trace",
        metavar="FILE",
        help="generate: replay a trace: Mooncake JSON lines (timestamp ms, input_length, output_length, "
        "hash_ids) or an Azure CSV (TIMESTAMP,ContextTokens,GeneratedTokens), on its arrival times.",
    ),
    click.option(
        "--trace-speed",
        type=float,
        metavar="X",
        help="generate: replay the trace X times as fast (its gaps divided by X) [default: 1].",
    ),
    click.option(
        "--turns",
        type=int,
        metavar="N",
        help="generate: conversations of N turns, each prompt carrying the turns before it [default: 1].",
    ),
    click.option(
        "--think-time",
        type=float,
        metavar="MS",
        help="generate: pause between a turn's answer and the next turn [default: 0].",
    ),
    click.option(
        "--shared-prefix-tokens",
        type=int,
        metavar="T",
        help="generate: every prompt starts with a shared prefix of T tokens [default: 0].",
    ),
    click.option(
        "--prefix-groups",
        type=int,
        metavar="G",
        help="generate: G distinct shared prefixes, request i has prefix i mod G [default: 1].",
    ),
    click.option(
        "--server-metrics",
        metavar="URL",
        help="generate: sample the endpoint server's Prometheus metrics at this URL during the run "
        "(vLLM, SGLang, TGI, llama.cpp: KV-cache use, requests running and waiting); every "
        "--generation server_metrics_interval_s (default 0.5).",
    ),
    click.option(
        "--generation",
        "generation",
        multiple=True,
        callback=parse_key_values,
        metavar="KEY=VALUE",
        help="Any generation setting, e.g. --generation warmup_requests=4 (repeatable).",
    ),
)


def generation_document(generation: dict[str, Any] | None, **flags: Any) -> dict[str, Any]:
    """The request's `generation` from `--generation KEY=VALUE` pairs and the flags set (a flag wins).

    Raises:
        UserError: a `file:PATH` length whose file cannot be read or holds no lengths; a trace file
            that cannot be read or has a bad line (contract.trace).
    """
    document = with_flags(generation or {}, GENERATION_FLAGS, flags)
    for name in ("prompt_tokens", "output_tokens"):
        value = document.get(name)
        if isinstance(value, str) and value.startswith("file:"):
            document[name] = read_lengths_file(value[len("file:") :], f"generation.{name}")
    if isinstance(document.get("trace"), str):
        document["trace"] = read_trace(document["trace"])
    return document


def check_endpoint_frameworks(frameworks: list[str], generation: dict[str, Any]) -> list[str]:
    """The frameworks of a run: `endpoint` when --endpoint is given (and no other).

    Raises:
        UserError: --endpoint with another framework named.
    """
    if not generation.get("endpoint"):
        return frameworks
    others = [name for name in frameworks if name != ENDPOINT_FRAMEWORK]
    if others:
        raise UserError(
            f"--endpoint measures the model behind the endpoint: it runs on the 'endpoint' framework, "
            f"not {', '.join(others)} (leave --framework out)",
            field="framework",
        )
    return [ENDPOINT_FRAMEWORK]
