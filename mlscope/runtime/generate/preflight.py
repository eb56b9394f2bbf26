"""What a generate request can be refused for before anything is stored (docs/generate.md, "Bad
input"): a trace line longer than the model's context, an API the endpoint has no route for.

Admission calls `check_generation`. Where the evaluation will run here (the CLI, `mlscope.evaluate`)
it may reach the endpoint: GET /models says the context (vLLM's `max_model_len`), and a GET of the
API's path says whether the server has that route (FastAPI servers, vLLM, SGLang and
`transformers serve` among them, answer 405 to a GET of a POST route and 404 to a path they lack);
only a 404 costs a request, the run's first one sent ahead, whose answer settles it. A farm's API
does not reach a user's URL (it is not the machine that will, and it would let a client make the
API fetch any address): there an endpoint's context and API are checked by the run on the worker,
which fails naming the same field. A model run in process has its context in its configuration,
read here without loading the model.

The job checks the same again (a model's context is also read where it is loaded): what this module
refuses early is what would otherwise fail the run at its start.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

from mlscope.contract.errors import UserError
from mlscope.contract.generation import APIS, ENDPOINT_FRAMEWORK, GenerationSettings
from mlscope.contract.manifest import Manifest
from mlscope.contract.trace import check_fits
from mlscope.runtime.generate.records import GenerationRequest, RequestRecord, context_of

__all__ = ["check_generation", "check_served", "endpoint_url", "first_request", "served_model"]

# The first request: a short prompt and a few tokens, enough to run every code path once.
_FIRST_PROMPT_TOKENS = 8
_FIRST_OUTPUT_TOKENS = 4
# The longest wait for the endpoint's answers here: admission must not hang on a silent server.
_PROBE_TIMEOUT_S = 10.0


def check_generation(settings: GenerationSettings, manifest: Manifest, *, reach: bool, seed: int) -> None:
    """Refuse a generate request that cannot run as asked, before it is stored.

    Args:
        settings: the request's generation settings.
        manifest: the model's (an endpoint's names the served model).
        reach: the evaluation runs on this machine, which may send the endpoint requests.
        seed: the load's seed (the first request's prompt, when one is sent ahead).

    Raises:
        UserError: a trace line over the model's context (field generation.trace, naming the
            line); an API the endpoint has no route for (generation.api, with its answer).
    """
    context = None
    if manifest.framework.name == ENDPOINT_FRAMEWORK:
        if reach:
            context = _check_endpoint(settings, manifest, seed)
    elif settings.trace is not None:
        context = _model_context(manifest)
    if settings.trace is not None and context is not None:
        check_fits(settings.trace, context)


def endpoint_url(settings: GenerationSettings, manifest: Manifest) -> str:
    """The base URL an endpoint request is sent to: the setting, else the manifest's."""
    return settings.endpoint or manifest.source.target


def served_model(settings: GenerationSettings, manifest: Manifest) -> str:
    """The model name an endpoint request carries: the setting, else the manifest's served model."""
    return settings.endpoint_model or str(manifest.attributes.get("served_model") or manifest.name)


def first_request(settings: GenerationSettings, seed: int) -> GenerationRequest:
    """The first request: a short prompt and a few tokens; for a pooling API, one short input per
    text a measured request sends (rerank: the query and each document)."""
    if not settings.pooling:
        return GenerationRequest(0, _FIRST_PROMPT_TOKENS, _FIRST_OUTPUT_TOKENS, seed)
    texts = settings.inputs_per_request + (1 if settings.api == "rerank" else 0)
    inputs = (_FIRST_PROMPT_TOKENS,) * texts
    return GenerationRequest(0, sum(inputs), 0, seed, input_tokens=inputs)


def check_served(first: RequestRecord, settings: GenerationSettings) -> None:
    """Stop when the endpoint answered the first request that it has no such API (HTTP 404 or 405):
    every request would fail alike, and the setting to change is the api.

    Raises:
        UserError: naming generation.api, with the server's answer.
    """
    if settings.endpoint is None or not (first.error or "").startswith(("HTTP 404 ", "HTTP 405 ")):
        return
    raise UserError(
        f"generation.api: the endpoint does not serve api {settings.api!r} ({first.error}); "
        f"the apis: {', '.join(APIS)}",
        field="generation.api",
    )


def _check_endpoint(settings: GenerationSettings, manifest: Manifest, seed: int) -> int | None:
    """The endpoint's context (None when it does not say or cannot be reached), after checking that
    it has a route for the API. An endpoint that cannot be reached is left to the run, which says so
    (a server still starting is not bad input)."""
    from mlscope.runtime.generate.endpoint import EndpointEngine

    engine = EndpointEngine(
        endpoint_url(settings, manifest),
        served_model(settings, manifest),
        api=settings.api,
        timeout_s=min(settings.request_timeout_s, _PROBE_TIMEOUT_S),
        ignore_eos=settings.ignore_eos,
        concurrency=1,
    )
    try:
        if engine.route_status() == 404:
            check_served(engine.generate(first_request(settings, seed)), settings)
        return engine.max_context
    finally:
        engine.close()


def _model_context(manifest: Manifest) -> int | None:
    """The context of a Hugging Face model run in process, from its config.json (a directory of its
    own) or its configuration (a catalogue reference, with its overrides); None for another kind of
    model, or where transformers is not installed in this process (the run then checks it)."""
    source = manifest.source
    if source.kind != "transformers":
        return None
    overrides: dict[str, Any] = dict(source.options.get("config") or {})
    declared = context_of(overrides)
    directory = source.options.get("directory")
    if declared is not None or directory:
        return declared if declared is not None else _directory_context(Path(str(directory)))
    if importlib.util.find_spec("transformers") is None:
        return None
    import transformers

    try:
        return context_of(transformers.AutoConfig.for_model(source.target, **overrides))
    except (ValueError, TypeError, KeyError):
        return None


def _directory_context(directory: Path) -> int | None:
    try:
        config = json.loads((directory / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return context_of(config) if isinstance(config, dict) else None
