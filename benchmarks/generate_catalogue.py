"""Does every generative family of the catalogue run the generate scenario in process here?

For each decoder and encoder-decoder entry of the transformers catalogue (or those named with
--families), builds its generative model through mlscope's PyTorch engine (the model directory with
random weights and a locally trained tokenizer, then the model loaded from it), runs a few requests
and prints one row: family, parameters, seconds to build, TTFT and TPOT medians, output tokens/s
(output tokens over the requests' summed end-to-end time), and ok or the error.

For speed, each model keeps the catalogue's configuration with its layer counts cut to --layers
(where the configuration has such a field and nothing ties other fields to it); a family whose
cut configuration does not build is retried as the catalogue has it.

Usage: python benchmarks/generate_catalogue.py [--requests 5] [--prompt 32] [--output 32]
           [--layers 2] [--families gpt2,llama,t5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import transformers
from rich.markup import escape

from mlscope.cli.progress import progress_board
from mlscope.contract.generation import GenerationSettings
from mlscope.registry.catalogue import Catalogue
from mlscope.registry.references import ModelOptions, apply_options
from mlscope.runtime.generate.records import GenerationRequest, RequestRecord
from mlscope.runtime.predictors.base import PredictorError
from mlscope.runtime.predictors.pytorch.generate import InProcessEngine
from mlscope.runtime.predictors.pytorch.predictor import PyTorchPredictor

GENERATIVE_GROUPS = ("decoder", "encoder-decoder")
LAYER_FIELDS = (
    "num_hidden_layers",
    "n_layer",
    "num_layers",
    "n_layers",
    "encoder_layers",
    "decoder_layers",
    "num_decoder_layers",
    "num_encoder_layers",
)
# Configurations in which another field is sized by the layer count: cut, they would not build.
KEEP_LAYERS = ("attention_types", "layer_types", "attn_layer_period", "block_types", "layers_block_type")


def cut_layers(model_type: str, config: dict[str, Any], layers: int) -> dict[str, Any]:
    """The catalogue's overrides with every layer count the model's configuration has set to `layers`."""
    built = transformers.AutoConfig.for_model(model_type, **config)
    if any(getattr(built, name, None) for name in KEEP_LAYERS if name not in ("layer_types",)):
        return dict(config)
    cut = dict(config)
    for name in LAYER_FIELDS:
        if isinstance(getattr(built, name, None), int) and name in built.to_dict():
            cut[name] = layers
    if "layer_types" in built.to_dict() and getattr(built, "layer_types", None) is not None:
        cut["layer_types"] = list(built.layer_types)[:layers]
    return cut


def summary(records: list[RequestRecord]) -> tuple[float, float, float]:
    """(TTFT median ms, TPOT median ms, output tokens/s) of the requests that succeeded."""
    ok = [r for r in records if r.ok and r.output_tokens > 1]
    ttft = statistics.median((r.token_ns[0] - r.start_ns) / 1e6 for r in ok)
    tpot = statistics.median((r.token_ns[-1] - r.token_ns[0]) / (r.output_tokens - 1) / 1e6 for r in ok)
    seconds = sum(r.end_ns - r.start_ns for r in ok) / 1e9
    return ttft, tpot, sum(r.output_tokens for r in ok) / seconds


def run_family(ref: str, config: dict[str, Any], cache: Path, args: argparse.Namespace) -> dict[str, Any]:
    manifest = apply_options(Catalogue.load().manifest(ref, "pytorch"), ModelOptions(config=config))
    started = time.perf_counter()
    engine = PyTorchPredictor(manifest=manifest, cache_dir=cache).generation_engine(GenerationSettings())
    build_s = time.perf_counter() - started
    assert isinstance(engine, InProcessEngine) and engine.model is not None
    params = sum(p.numel() for p in engine.model.parameters())
    engine.generate(GenerationRequest(0, args.prompt, 2))  # warm-up
    records = [engine.generate(GenerationRequest(i, args.prompt, args.output)) for i in range(args.requests)]
    engine.close()
    errors = [r.error for r in records if r.error]
    row: dict[str, Any] = {"params": params, "build_s": build_s, "status": errors[0] if errors else "ok"}
    if len(errors) < len(records):
        row["ttft"], row["tpot"], row["tokens_s"] = summary(records)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=5)
    parser.add_argument("--prompt", type=int, default=32)
    parser.add_argument("--output", type=int, default=32)
    parser.add_argument("--layers", type=int, default=2, help="layer counts cut to this (0: keep)")
    parser.add_argument("--families", default="", help="comma-separated families (default: all generative)")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()

    entries = [e for e in Catalogue.load().entries() if e.group in GENERATIVE_GROUPS]
    if args.families:
        wanted = args.families.split(",")
        entries = [e for e in entries if e.family in wanted]
    cut = f"layer counts cut to {args.layers}" if args.layers else "catalogue layer counts"
    print(f"prompt {args.prompt}, output {args.output} tokens, {args.requests} requests, {cut}")
    header = (
        f"{'family':20} {'params':>10} {'build s':>8} {'TTFT ms':>9} {'TPOT ms':>9} {'out tok/s':>10}  status"
    )
    print(header)
    print("-" * len(header))
    counts = {"ok": 0, "error": 0}
    # Progress on stderr (none off a terminal): the family now, families done of all, elapsed, ETA.
    board = progress_board(quiet=False)
    sweep = board.add("generative families", total=len(entries))
    with tempfile.TemporaryDirectory() as cache, board:
        for entry in entries:
            sweep.update(now=escape(entry.family))
            spec = entry.source["transformers"]
            config = dict(spec.get("config") or {})
            attempts = (
                [cut_layers(spec["model_type"], config, args.layers), config] if args.layers else [config]
            )
            row: dict[str, Any] = {}
            for overrides in attempts:
                try:
                    row = run_family(entry.ref, overrides, Path(cache), args)
                    break
                except (PredictorError, Exception) as exc:  # a family that fails is a row, not a stop
                    first = (str(exc).strip().splitlines() or [""])[0][:90]
                    row = {"status": f"{type(exc).__name__}: {first}"}
            counts["ok" if row["status"] == "ok" else "error"] += 1
            figures = (
                f"{row['ttft']:9.2f} {row['tpot']:9.2f} {row['tokens_s']:10.1f}"
                if "ttft" in row
                else f"{'-':>9} {'-':>9} {'-':>10}"
            )
            params = f"{row['params'] / 1e6:9.2f}M" if "params" in row else f"{'-':>10}"
            build = f"{row['build_s']:8.1f}" if "build_s" in row else f"{'-':>8}"
            print(f"{entry.family:20} {params} {build} {figures}  {row['status']}", flush=True)
            sweep.update(done=counts["ok"] + counts["error"])
    print(f"{counts['ok']} ok, {counts['error']} failed, of {len(entries)} families")


if __name__ == "__main__":
    main()
