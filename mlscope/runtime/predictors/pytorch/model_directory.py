"""A local Hugging Face model directory for the generate scenario: the generative model of a
catalogue or config reference, saved with its random weights and a tokenizer trained here.

The in-process engine loads this directory and a server (`transformers serve <directory>`) serves
it, so both run bit-identical weights. Nothing is downloaded: the tokenizer is a byte-level BPE
trained in about a second on a corpus of seeded random words, and its generation config names no
end-of-sequence token, so a server cannot stop a request early at EOS.

The directory is `<cache_dir>/generate/<key>/`, the key a digest of the manifest's source, weights
and the seed; it is written to a temporary directory and renamed into place, so a reader never sees
half of one and two processes that build it at once both end up using one complete copy.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
import string
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mlscope.runtime.predictors.base import PredictorError

if TYPE_CHECKING:
    import torch
    import transformers
    from tokenizers import Tokenizer

    from mlscope.contract.manifest import Manifest

__all__ = [
    "CHAT_TEMPLATE",
    "PromptWords",
    "generative_model",
    "load_weights",
    "materialise",
    "prompt_text",
    "tokenizer_for",
]

#: The chat template written into the tokenizer: a chat request's prompt is its messages' text, so
#: a served prompt holds the same tokens as the text sent (no role markers, no BOS).
CHAT_TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
#: The tokenizer's one special token (id 0): end of text, also its BOS and padding.
SPECIAL_TOKEN = "<|endoftext|>"
# Bumped when what a directory holds changes, so an old cache entry is not taken for a new one.
_LAYOUT = 2
_TOKENIZER_VOCAB = 4096
_REQUIRED = ("config.json", "model.safetensors", "generation_config.json", "tokenizer.json")
_WORD = re.compile(r"^ [a-z]+$")
# A word's token as byte-level (GPT-2) or SentencePiece vocabularies spell it, before decoding.
_WORD_TOKEN = re.compile("^[\u0120\u2581][a-z]+$")
_SEEDED = threading.Lock()


def generative_model(config: transformers.PretrainedConfig, ref: str) -> Any:
    """transformers' auto class that generates tokens with a model of this configuration:
    AutoModelForSeq2SeqLM for an encoder-decoder, AutoModelForCausalLM for a decoder.

    An encoder (BERT, RoBERTa...) has a causal-LM head class in transformers too, but it is a
    masked-language model run as a decoder it was never built as, so it is refused like a vision
    model.

    Raises:
        PredictorError: the model is neither; names the model type.
    """
    import transformers
    from transformers.models.auto import modeling_auto

    model_type = getattr(config, "model_type", "?")
    seq2seq = modeling_auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES
    causal = modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    masked = modeling_auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES
    if getattr(config, "is_encoder_decoder", False) and model_type in seq2seq:
        return transformers.AutoModelForSeq2SeqLM
    if model_type in causal and (model_type not in masked or getattr(config, "is_decoder", False)):
        return transformers.AutoModelForCausalLM
    what = "an encoder" if model_type in masked else "not a language model transformers can generate with"
    raise PredictorError(
        f"{ref} is {what} (model type {model_type!r}); the generate scenario needs a decoder or "
        "encoder-decoder language model (e.g. hf:gpt2, hf:llama, hf:t5)"
    )


def load_weights(model: torch.nn.Module, manifest: Manifest) -> None:
    """Load the manifest's checkpoint (`--weights`, a state dict of transformers' base model, as
    the predict scenario loads it) into the generative model's base model.

    Raises:
        PredictorError: the checkpoint does not fit the base model.
    """
    import torch

    from mlscope.runtime.predictors.files import local_file

    weights = manifest.weights
    if weights.kind != "url" or not weights.url:
        return
    path = local_file(weights.url, weights.sha256)
    state: Any
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        state = load_file(str(path))
    else:
        state = torch.load(path, map_location="cpu", weights_only=True)
    if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
        state = state["state_dict"]
    base = getattr(model, "base_model", model)
    try:
        base.load_state_dict(state)
    except (RuntimeError, TypeError) as exc:
        first = str(exc).strip().splitlines()[0]
        raise PredictorError(f"{path}: does not fit {type(base).__name__} ({first})") from None


def _key(manifest: Manifest, seed: int) -> str:
    import transformers

    source = manifest.source
    document = {
        "layout": _LAYOUT,
        "transformers": transformers.__version__,
        "source": {"kind": source.kind, "target": source.target, "options": source.options},
        "weights": manifest.weights.sha256,
        "seed": seed,
    }
    text = json.dumps(document, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _complete(directory: Path) -> bool:
    return all((directory / name).is_file() for name in _REQUIRED)


def materialise(manifest: Manifest, cache_dir: Path, seed: int = 0) -> Path:
    """The manifest's generative model as a local model directory, built once and reused.

    Args:
        manifest: a transformers manifest built from a config (a catalogue `hf:` reference, with
            any `--config` overrides), not from a directory of its own.
        cache_dir: where `generate/<key>/` goes.
        seed: seeds the random weights (torch.manual_seed), as `build_module` does.

    Returns:
        The directory: config.json, model.safetensors, generation_config.json (no EOS), and the
        tokenizer's files (tokenizer.json, tokenizer_config.json with the chat template).

    Raises:
        PredictorError: the manifest is not a transformers config model, or not a generative one.
    """
    source = manifest.source
    if source.kind != "transformers" or source.options.get("directory"):
        raise PredictorError(
            f"{manifest.name}: only a transformers model built from a configuration is materialised "
            f"(this one is {source.kind}{' from a directory' if source.options.get('directory') else ''})"
        )
    directory = cache_dir / "generate" / _key(manifest, seed)
    if _complete(directory):
        return directory
    # Copies appear whole (renamed into place), so one that is there but incomplete was damaged
    # after the fact; it goes, since nothing can be renamed onto a non-empty directory.
    if directory.exists() and not _complete(directory):
        shutil.rmtree(directory, ignore_errors=True)
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{directory.name}-", dir=directory.parent))
    try:
        _write(manifest, staging, seed)
        staging.chmod(0o755)  # mkdtemp's 0700 would keep out a server running as another user
        try:
            os.rename(staging, directory)
        except OSError:
            if not _complete(directory):  # not another process's finished copy: a real failure
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return directory


def _write(manifest: Manifest, directory: Path, seed: int) -> None:
    import torch
    import transformers

    overrides = dict(manifest.source.options.get("config") or {})
    config = transformers.AutoConfig.for_model(manifest.source.target, **overrides)
    auto = generative_model(config, manifest.name)
    vocab_size = int(getattr(config, "vocab_size", 0) or 0)
    tokenizer = _train_tokenizer(vocab_size, manifest.name, seed)
    with _SEEDED, torch.random.fork_rng(devices=[]):  # the global generator: one build at a time
        torch.manual_seed(seed)
        model = auto.from_config(config)
    load_weights(model, manifest)
    special = tokenizer.convert_tokens_to_ids(SPECIAL_TOKEN)
    # After building: a padding index changes how some embeddings are initialised, not what the
    # model computes, and the seeded weights stay those of the configuration as given.
    for name in ("bos_token_id", "eos_token_id", "pad_token_id"):
        setattr(model.config, name, special)
    generation = transformers.GenerationConfig(
        bos_token_id=special, pad_token_id=special, eos_token_id=None, use_cache=True
    )
    if config.is_encoder_decoder:
        model.config.decoder_start_token_id = special
        generation.decoder_start_token_id = special
    model.generation_config = generation
    model.save_pretrained(directory, safe_serialization=True)
    tokenizer.save_pretrained(directory)


def _corpus(seed: int) -> list[str]:
    """Lines of random lower-case words: letters only, so byte-level pre-tokenisation keeps each
    space-prefixed word whole and most frequent words become one token each."""
    chooser = random.Random(seed)
    words = ["".join(chooser.choices(string.ascii_lowercase, k=chooser.randint(2, 7))) for _ in range(3000)]
    return [" ".join(chooser.choices(words, k=40)) for _ in range(2000)]


def _fill_vocabulary(tokenizer: Tokenizer, vocab_size: int) -> Tokenizer:
    """The tokenizer with its vocabulary filled up to `vocab_size` ids by tokens " t<id>".

    A random-weight model emits any id below its vocab_size; an id the tokenizer lacks decodes to
    nothing, and a server then streams no text for it (one token, no chunk). No merge builds these
    tokens, so encoding never yields them, and their digits keep them out of `PromptWords`.
    """
    from tokenizers import Tokenizer

    document = json.loads(tokenizer.to_str())
    vocabulary: dict[str, int] = document["model"]["vocab"]
    for index in range(len(vocabulary), vocab_size):
        vocabulary[f"\u0120t{index}"] = index  # \u0120 ("Ġ") is byte-level's space
    return Tokenizer.from_str(json.dumps(document))


def _train_tokenizer(vocab_size: int, ref: str, seed: int) -> transformers.PreTrainedTokenizerFast:
    """A byte-level BPE trained on `_corpus` (at most 4096 tokens, id 0 the special token), its
    vocabulary then filled to the model's `vocab_size`, so every id the model emits decodes to text.

    Raises:
        PredictorError: a vocab_size too small for the 256 byte tokens and the special one.
    """
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    if vocab_size < len(alphabet) + 1:
        raise PredictorError(
            f"{ref}: vocab_size {vocab_size} is below the {len(alphabet) + 1} tokens a byte-level "
            "tokenizer needs; give --config vocab_size=512 or more"
        )
    tokenizer = Tokenizer(models.BPE(unk_token=None))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=min(vocab_size, _TOKENIZER_VOCAB),
        special_tokens=[SPECIAL_TOKEN],
        initial_alphabet=alphabet,
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus(seed), trainer)
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=_fill_vocabulary(tokenizer, vocab_size),
        eos_token=SPECIAL_TOKEN,
        bos_token=SPECIAL_TOKEN,
        pad_token=SPECIAL_TOKEN,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def tokenizer_for(directory: Path) -> transformers.PreTrainedTokenizerBase:
    """The directory's tokenizer, loaded from its files only.

    Raises:
        PredictorError: the directory has no tokenizer transformers can load.
    """
    import transformers

    try:
        return transformers.AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
    except (OSError, ValueError, TypeError) as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise PredictorError(f"{directory}: no tokenizer transformers can load ({first})") from None


@dataclass(frozen=True)
class PromptWords:
    """The tokenizer's words that are one token each with a leading space (" abc"), by token id.

    A text of k such words is exactly k tokens: byte-level pre-tokenisation splits before each
    space, and each piece is a whole vocabulary entry. Prompts drawn from them are the same tokens
    in process (as ids) and served (as text).
    """

    ids: tuple[int, ...]
    words: tuple[str, ...]

    @classmethod
    def of(cls, tokenizer: transformers.PreTrainedTokenizerBase) -> PromptWords:
        """The tokenizer's single-token words, each checked by encoding it.

        Raises:
            PredictorError: fewer than 16 (a tokenizer that does not split on spaces this way).
        """
        special = set(tokenizer.all_special_ids)
        tokens = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
        likely = [index for index, token in enumerate(tokens) if _WORD_TOKEN.match(str(token))]
        candidates = [
            (index, text)
            for index in likely
            if index not in special and _WORD.match(text := str(tokenizer.decode([index])))
        ]
        encoded = tokenizer([text for _, text in candidates], add_special_tokens=False)["input_ids"]
        pairs = zip(candidates, encoded, strict=True)
        kept = [(index, text) for (index, text), ids in pairs if ids == [index]]
        if len(kept) < 16:
            raise PredictorError(
                f"{type(tokenizer).__name__}: only {len(kept)} words encode to one token each; exact "
                "prompt lengths need a byte-level tokenizer like the one mlscope trains"
            )
        return cls(tuple(index for index, _ in kept), tuple(text for _, text in kept))

    def choose(self, n_tokens: int, seed: int, index: int) -> np.ndarray:
        """Positions (into ids/words) of request `index`'s prompt: seeded by (seed, index)."""
        return np.random.default_rng([seed, index]).integers(0, len(self.ids), size=n_tokens)

    def prompt_ids(self, n_tokens: int, seed: int, index: int) -> list[int]:
        return [self.ids[at] for at in self.choose(n_tokens, seed, index)]

    def prompt_text(self, n_tokens: int, seed: int, index: int) -> str:
        return "".join(self.words[at] for at in self.choose(n_tokens, seed, index))


def prompt_text(
    source: Path | transformers.PreTrainedTokenizerBase, n_tokens: int, seed: int, index: int
) -> str:
    """A text the tokenizer turns into exactly `n_tokens` tokens (no special tokens added, as a
    chat request through `CHAT_TEMPLATE` or a completion sends it): request `index`'s prompt, the
    same token ids the in-process engine feeds the model for that request.

    Args:
        source: a model directory (its tokenizer is loaded) or a tokenizer.

    Raises:
        PredictorError: no tokenizer, or one whose words are not single tokens (see PromptWords).
    """
    tokenizer = tokenizer_for(source) if isinstance(source, Path) else source
    return PromptWords.of(tokenizer).prompt_text(n_tokens, seed, index)
