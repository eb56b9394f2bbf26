"""Whether a GGUF file computes what its model directory computes: llama.cpp's logits at every
position of a prompt against transformers' on the same token ids (PyTorch, float32), as error
figures relative to the size of transformers' logits. docs/llamacpp.md#is-the-gguf-right.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from mlscope.contract.manifest import Manifest

__all__ = ["LogitsCheck", "compare_logits"]


@dataclass(frozen=True)
class LogitsCheck:
    """llama.cpp's logits against transformers' on one prompt.

    Attributes:
        gguf_type: the file's tensor type.
        positions: prompt tokens (each position's logits compared).
        relative_rms: root-mean-square of the difference over that of transformers' logits.
        relative_max: the largest absolute difference over transformers' largest absolute logit.
        same_argmax: the share of positions whose most likely next token is the same.
    """

    gguf_type: str
    positions: int
    relative_rms: float
    relative_max: float
    same_argmax: float


def compare_logits(
    manifest: Manifest, cache_dir: Path, gguf_type: str, *, prompt_tokens: int = 32, seed: int = 0
) -> LogitsCheck:
    """Write (or reuse) the manifest's GGUF of `gguf_type`, and compare llama.cpp's logits with
    transformers' on request 0's prompt of `prompt_tokens` tokens (the generate scenario's prompt).

    Raises:
        UserError, PredictorError: as `gguf_file.gguf_for`.
    """
    import torch
    import transformers

    from mlscope.runtime.predictors.llamacpp.engine import default_threads, open_llama, prompt_logits
    from mlscope.runtime.predictors.llamacpp.gguf_file import gguf_for
    from mlscope.runtime.predictors.pytorch import model_directory

    path, directory = gguf_for(manifest, cache_dir, seed, gguf_type)
    words = model_directory.PromptWords.of(model_directory.tokenizer_for(directory))
    ids = words.prompt_ids(prompt_tokens, seed, 0)
    model = transformers.AutoModelForCausalLM.from_pretrained(str(directory), local_files_only=True).eval()
    with torch.inference_mode():
        reference = model(torch.tensor([ids])).logits[0].float().numpy()
    llama = open_llama(path, n_ctx=max(64, prompt_tokens), threads=default_threads(), logits_all=True)
    try:
        ours = prompt_logits(llama, ids)
    finally:
        llama.close()
    difference = ours - reference
    return LogitsCheck(
        gguf_type=gguf_type,
        positions=len(ids),
        relative_rms=float(np.sqrt(np.mean(difference**2)) / np.sqrt(np.mean(reference**2))),
        relative_max=float(np.abs(difference).max() / np.abs(reference).max()),
        same_argmax=float(np.mean(ours.argmax(axis=1) == reference.argmax(axis=1))),
    )
