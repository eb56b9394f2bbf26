"""The served half of `--compare-served`: the model this job loaded, served from its directory on
this machine by `transformers serve` (or by the engine's own server: llama.cpp's on its GGUF file),
sent the same requests, and the difference per metric.

Both halves run the same weights (the engine loaded them from the directory the server loads), the
same request lengths and seed, the same concurrency and arrivals; the served prompts are texts that
the model's own tokenizer turns into exactly the in-process prompt lengths where the engine can make
them. So what differs is what serving adds: HTTP, JSON, the server's scheduling and detokenising.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from mlscope.contract.generation import GenerationSettings
from mlscope.contract.load import LoadSettings
from mlscope.runtime.generate.driver import run_generate
from mlscope.runtime.generate.endpoint import EndpointEngine
from mlscope.runtime.generate.records import GenerateEngine
from mlscope.runtime.generate.serve import LocalServer
from mlscope.runtime.measure.settings import MeasureSettings
from mlscope.runtime.predictors.base import PredictorError

__all__ = ["OVERHEAD_METRICS", "add_served", "serving_overhead"]

OVERHEAD_METRICS = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")


def add_served(
    measurement: dict[str, Any],
    engine: GenerateEngine,
    settings: GenerationSettings,
    load: LoadSettings,
    measure: MeasureSettings,
    device: str,
) -> None:
    """Serve the engine's model directory, run the same requests against it, and add
    `generation.served` (its figures) and `generation.serving_overhead` (per metric) to the in-process
    `measurement`; a served run that is not valid makes the comparison invalid too.

    Raises:
        PredictorError: the engine has no model directory to serve, or the server does not start.
    """
    directory = getattr(engine, "directory", None)
    if directory is None:
        raise PredictorError(
            "compare_served needs the model as a directory a server can load (a Hugging Face model "
            "with a tokenizer); this engine has none"
        )
    prompt_text = getattr(engine, "prompt_text", None)
    served_settings = dataclasses.replace(settings, compare_served=False)
    # An engine with a server of its own (llama.cpp's) is served by it; any other by transformers serve.
    own_server = getattr(engine, "server", None)
    server: Any = own_server() if callable(own_server) else LocalServer(directory, device=device)
    with server:
        client = EndpointEngine(
            server.base_url,
            server.model,
            api=settings.api,
            timeout_s=settings.request_timeout_s,
            ignore_eos=bool(getattr(server, "ignore_eos", False)),
            prompt_text=prompt_text,
            tokenizer_directory=None if prompt_text is not None else directory,
            max_context=server.max_context,
            concurrency=settings.concurrency,
        )
        try:
            served = run_generate(client, served_settings, load, measure, remote=True)
            described = client.describe()
        finally:
            client.close()
    generation = measurement["generation"]
    generation["served"] = {
        **served["generation"],
        "via": "endpoint",
        "server": getattr(server, "label", None) or f"transformers serve ({described.get('version')})",
        "validity": served["validity"],
        **({"load": served["load"]} if "load" in served else {}),
    }
    generation["serving_overhead"] = serving_overhead(generation, served["generation"])
    if not served["validity"]["valid"]:
        validity = measurement["validity"]
        validity["valid"] = False
        validity["reasons"] = [
            *(f"served: {reason}" for reason in served["validity"]["reasons"]),
            *validity["reasons"],
        ]


def serving_overhead(in_process: dict[str, Any], served: dict[str, Any]) -> dict[str, Any]:
    """Per metric, the medians in process and served, what serving added (ms) and the ratio."""
    overhead: dict[str, Any] = {}
    for metric in OVERHEAD_METRICS:
        here, there = (in_process.get(metric) or {}).get("median"), (served.get(metric) or {}).get("median")
        if here is None or there is None:
            continue
        overhead[metric] = {
            "in_process_ms": here,
            "served_ms": there,
            "added_ms": there - here,
            "ratio": there / here if here > 0 else None,
        }
    for rate in ("output_tokens_per_s", "requests_per_s"):
        here, there = in_process.get(rate), served.get(rate)
        if here and there is not None:
            overhead[rate] = {"in_process": here, "served": there, "ratio": there / here}
    return overhead
