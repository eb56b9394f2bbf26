"""The generate scenario in process: a transformers model generating tokens with `model.generate`,
each token timed as it is produced.

The model is loaded from a local model directory: the one `model_directory.materialise` builds for
a catalogue or config reference (the very weights and tokenizer a server would serve), or the
manifest's own Hugging Face directory.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch
from transformers.generation.streamers import BaseStreamer

from mlscope.runtime.generate.records import GenerationRequest, RequestRecord, context_of
from mlscope.runtime.predictors.base import PredictorError
from mlscope.runtime.predictors.files import directory_digest, model_files
from mlscope.runtime.predictors.pytorch import model_directory

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from mlscope.contract.manifest import Manifest

__all__ = ["InProcessEngine", "TokenTimer", "context_length", "open_engine"]


class TokenTimer(BaseStreamer):
    """Notes `time.perf_counter_ns()` as each generated token reaches the streamer.

    `generate` first puts the prompt (a decoder-only model) or the decoder's start token (an
    encoder-decoder): that put is skipped, every later one is one new token (batch of one).

    On a GPU, `generate` copies each new token to the host (`.cpu()`) before putting it, which waits
    for the device: a timestamp is when the token reached the host, as a caller would see it.
    """

    def __init__(self) -> None:
        self.token_ns: list[int] = []
        self._seen_first = False

    def put(self, value: torch.Tensor) -> None:
        now = time.perf_counter_ns()
        if self._seen_first:
            self.token_ns.append(now)
        else:
            self._seen_first = True

    def end(self) -> None:
        """Nothing to flush: the times are read after `generate` returns."""


def context_length(config: Any) -> int | None:
    """Prompt + output tokens the model's positions allow, None where it has no fixed limit (T5's
    relative positions, Mamba's recurrence)."""
    return context_of(config)


class InProcessEngine:
    """A generative transformers model in this process, implementing `GenerateEngine`.

    Each request's prompt is `prompt_tokens` token ids drawn by a generator seeded with (seed,
    index): single-token words of the directory's tokenizer when it has them (so a served run of
    the same directory gets the very same tokens from `model_directory.prompt_text`), else ids in
    [0, vocab) other than the special tokens. Decoding is greedy with the KV cache, and exactly
    `output_tokens` tokens are forced (`min_new_tokens` = `max_new_tokens`).

    `generate` keeps nothing between calls but the model: several threads may call it at once.

    Attributes:
        model: the generative model (eval mode, on `device`); None once closed.
        directory: the model directory it was loaded from (what a server of the same model serves).
        max_context: prompt + output tokens its positions allow, None when unlimited.
        pad_token_id: the padding id `generate` is given (the generation config's, else the
            model config's, else its lowest special id).
    """

    def __init__(
        self,
        model: PreTrainedModel,
        device: torch.device,
        describe: Callable[[], dict[str, Any]],
        prompt_words: model_directory.PromptWords | None = None,
        directory: Path | None = None,
    ) -> None:
        self.model: PreTrainedModel | None = model
        self.device = device
        self.directory = directory
        self._describe = describe
        self._prompt_words = prompt_words
        config = model.config
        self.max_context: int | None = context_length(config)
        self.vocab_size = int(config.vocab_size)
        generation = model.generation_config
        ids = (config.bos_token_id, config.eos_token_id, config.pad_token_id, generation.pad_token_id)
        self._special = {int(value) for value in ids if isinstance(value, int)}
        pad = generation.pad_token_id if generation.pad_token_id is not None else config.pad_token_id
        self.pad_token_id = int(pad) if pad is not None else min(self._special, default=0)
        self._extra: dict[str, Any] = {}
        if config.is_encoder_decoder and generation.decoder_start_token_id is None:
            start = getattr(config, "decoder_start_token_id", None)
            self._extra["decoder_start_token_id"] = self.pad_token_id if start is None else start

    @property
    def prompt_text(self) -> Callable[[int, int, int], str] | None:
        """The prompts as texts of the very same tokens (what a served run of the directory sends),
        None when the prompts are random ids the directory's tokenizer has no words for."""
        return None if self._prompt_words is None else self._prompt_words.prompt_text

    def prompt_ids(self, request: GenerationRequest) -> list[int]:
        """Request's prompt as token ids (see the class docstring), its pieces (a shared prefix, a
        conversation's earlier turns: `GenerationRequest.parts`) one after the other."""
        ids: list[int] = []
        special = np.array(sorted(self._special), dtype=np.int64)
        for _, tokens, seed, key in request.pieces():
            if self._prompt_words is not None:
                ids += self._prompt_words.prompt_ids(tokens, seed, key)
                continue
            generator = np.random.default_rng([seed, key])
            allowed = np.setdiff1d(np.arange(self.vocab_size), special)
            ids += [int(value) for value in generator.choice(allowed, size=tokens)]
        return ids

    def generate(self, request: GenerationRequest) -> RequestRecord:
        model = self.model
        if model is None:
            raise PredictorError("the generation engine is closed")
        record = RequestRecord(
            index=request.index, prompt_tokens=request.prompt_tokens, requested_tokens=request.output_tokens
        )
        input_ids = torch.tensor([self.prompt_ids(request)], dtype=torch.long, device=self.device)
        attention_mask = torch.ones_like(input_ids)
        timer = TokenTimer()
        generate: Callable[..., Any] = cast(Any, model).generate  # GenerationMixin's, not typed as such
        record.start_ns = time.perf_counter_ns()
        try:
            with torch.inference_mode():
                generate(
                    input_ids=input_ids,
                    attention_mask=attention_mask,
                    max_new_tokens=request.output_tokens,
                    min_new_tokens=request.output_tokens,
                    do_sample=False,
                    use_cache=True,
                    streamer=timer,
                    pad_token_id=self.pad_token_id,
                    **self._extra,
                )
        except Exception as exc:  # one request's failure (e.g. out of memory) is its record's
            record.end_ns = time.perf_counter_ns()
            record.failed(exc)
        else:
            record.end_ns = time.perf_counter_ns()
        record.token_ns = timer.token_ns
        record.counted_in_process()
        return record

    def describe(self) -> dict[str, Any]:
        import transformers

        facts = self._describe()
        facts["transformers"] = transformers.__version__
        if self.model is not None:
            facts["model_class"] = type(self.model).__name__
            facts["dtype"] = str(next(self.model.parameters()).dtype).replace("torch.", "")
        return facts

    def close(self) -> None:
        self.model = None
        if self.device.type == "cuda":
            torch.cuda.empty_cache()


def load_generative(manifest: Manifest, directory: Path, overrides: dict[str, Any]) -> PreTrainedModel:
    """The directory's generative model in eval mode, on the CPU, from local files only.

    Raises:
        PredictorError: no config transformers can read there, or not a generative model.
    """
    import transformers

    try:
        config = transformers.AutoConfig.from_pretrained(str(directory), local_files_only=True, **overrides)
    except (OSError, ValueError) as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise PredictorError(f"{directory}: not a model directory transformers can read ({first})") from None
    auto = model_directory.generative_model(config, manifest.name)
    model = auto.from_pretrained(str(directory), config=config, local_files_only=True)
    return model.eval()


def open_engine(
    manifest: Manifest,
    device: torch.device,
    cache_dir: Path,
    seed: int,
    describe: Callable[[], dict[str, Any]],
) -> InProcessEngine:
    """Build the manifest's generative model on `device` and wrap it as an engine.

    A catalogue or config reference is first materialised as a model directory under `cache_dir`
    (reused when there); a manifest of a local Hugging Face directory loads that directory, with
    the manifest's config overrides.

    Raises:
        PredictorError: not a transformers manifest, or not a generative model.
    """
    source = manifest.source
    if source.kind != "transformers":
        raise PredictorError(
            f"{manifest.name} is built from {source.kind}; the generate scenario runs transformers "
            "decoder and encoder-decoder language models (hf:<type> or a model directory)"
        )
    given = source.options.get("directory")
    if given:
        directory = Path(given)
        digest = source.options.get("sha256")
        if digest and directory_digest(directory, model_files(directory)) != digest:
            raise PredictorError(
                f"{directory}: its files changed since the manifest was made (SHA-256 differs)"
            )
        overrides = dict(source.options.get("config") or {})
    else:
        directory = model_directory.materialise(manifest, cache_dir, seed)
        overrides = {}  # already in the directory's config.json
    model = load_generative(manifest, directory, overrides)
    cast(torch.nn.Module, model).to(device)  # in place (a module's `to` moves its own parameters)
    words: model_directory.PromptWords | None
    try:
        words = model_directory.PromptWords.of(model_directory.tokenizer_for(directory))
    except PredictorError:
        words = None  # a directory without a suitable tokenizer: random token ids
    return InProcessEngine(model, device, describe, prompt_words=words, directory=directory)
