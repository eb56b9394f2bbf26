"""Does each GGUF file compute what its model directory computes?

Writes the catalogue's tiny Llama (hf:llama, 4 layers, width 512, random weights) as a GGUF file of
each type the writer writes, and prints llama.cpp's logits at every position of the generate
scenario's first prompt against transformers' (PyTorch, float32) on the same token ids: the
difference's root-mean-square and largest value relative to transformers' logits, and the share of
positions whose most likely next token agrees. docs/llamacpp.md#is-the-gguf-right.

Usage: python benchmarks/llamacpp_logits.py [--prompt 64] [--cache DIR]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from mlscope.contract.options import GGUF_TYPES
from mlscope.registry.models import ModelRegistry
from mlscope.runtime.predictors.llamacpp.check import compare_logits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompt", type=int, default=64, help="prompt tokens")
    parser.add_argument("--cache", type=Path, help="where the model directory and GGUF files go")
    args = parser.parse_args()
    cache = args.cache or Path(tempfile.mkdtemp(prefix="mlscope-llamacpp-"))
    manifest = ModelRegistry.load().get("hf:llama", "llamacpp")
    print(f"hf:llama, prompt {args.prompt} tokens: llama.cpp's logits against transformers' (float32)")
    print(f"{'type':>5} {'file MB':>8} {'rms diff / rms':>15} {'max diff / max':>15} {'same argmax':>12}")
    for gguf_type in GGUF_TYPES:
        check = compare_logits(manifest, cache, gguf_type, prompt_tokens=args.prompt)
        size = sum(path.stat().st_size for path in (cache / "gguf").glob(f"*-{gguf_type}.gguf")) / 1e6
        print(
            f"{gguf_type:>5} {size:8.1f} {check.relative_rms:15.2e} {check.relative_max:15.2e} "
            f"{check.same_argmax:12.3f}"
        )


if __name__ == "__main__":
    main()
