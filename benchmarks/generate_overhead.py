"""How much does mlscope's in-process generation engine add to the token times it measures?

Prints, in one run on this machine, for a tiny GPT-2-style model (random weights, 4 layers, width
256) generating 64 tokens after a 64-token prompt:
  (a) the TTFT and TPOT medians of mlscope's InProcessEngine (TPOT = (last token - first token) /
      (tokens - 1));
  (b) the same medians from a bare loop: `model.generate` with a minimal streamer noting
      `time.perf_counter_ns()` per token, on the same model object and the same prompt ids, no
      mlscope code;
  and the ratios mlscope / bare (target ≤ 1.02). The two alternate request by request (which goes
  first alternates too), so drift in the machine's load hits both alike.

Usage: python benchmarks/generate_overhead.py [--requests 30] [--prompt 64] [--output 64]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch
from transformers.generation.streamers import BaseStreamer

from mlscope.contract.generation import GenerationSettings
from mlscope.contract.options import PredictorOptions
from mlscope.registry.catalogue import Catalogue
from mlscope.registry.references import ModelOptions, apply_options
from mlscope.runtime.generate.records import GenerationRequest
from mlscope.runtime.predictors.pytorch.generate import InProcessEngine
from mlscope.runtime.predictors.pytorch.predictor import PyTorchPredictor

CONFIG = {"n_layer": 4, "n_embd": 256, "n_head": 4}


class BareStreamer(BaseStreamer):
    """The least a streamer can do to time tokens: note the clock on every put."""

    def __init__(self) -> None:
        self.times: list[int] = []

    def put(self, value: torch.Tensor) -> None:
        self.times.append(time.perf_counter_ns())

    def end(self) -> None:
        pass


def bare_request(model: torch.nn.Module, ids: list[int], output: int, pad: int) -> tuple[int, list[int]]:
    """One request the bare way: (start, token times), the prompt's put dropped."""
    input_ids = torch.tensor([ids], dtype=torch.long)
    mask = torch.ones_like(input_ids)
    streamer = BareStreamer()
    start = time.perf_counter_ns()
    with torch.inference_mode():
        model.generate(  # type: ignore[operator]
            input_ids=input_ids,
            attention_mask=mask,
            max_new_tokens=output,
            min_new_tokens=output,
            do_sample=False,
            use_cache=True,
            streamer=streamer,
            pad_token_id=pad,
        )
    return start, streamer.times[1:]


def ttft_tpot(start: int, times: list[int]) -> tuple[float, float]:
    """(TTFT ms, TPOT ms) of one request."""
    return (times[0] - start) / 1e6, (times[-1] - times[0]) / (len(times) - 1) / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=30, help="requests each way (default 30)")
    parser.add_argument("--prompt", type=int, default=64, help="prompt tokens (default 64)")
    parser.add_argument("--output", type=int, default=64, help="output tokens (default 64)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's)")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    manifest = apply_options(Catalogue.load().manifest("hf:gpt2", "pytorch"), ModelOptions(config=CONFIG))
    with tempfile.TemporaryDirectory() as cache:
        predictor = PyTorchPredictor(
            manifest=manifest, cache_dir=Path(cache), options=PredictorOptions(threads=args.threads or None)
        )
        engine = predictor.generation_engine(GenerationSettings())
        assert isinstance(engine, InProcessEngine) and engine.model is not None
        model, pad = engine.model, engine.pad_token_id
        requests = [GenerationRequest(i, args.prompt, args.output, seed=0) for i in range(args.requests)]
        for request in requests[:3]:  # warm-up: allocator, kernels, caches
            engine.generate(request)
            bare_request(model, engine.prompt_ids(request), args.output, pad)

        ours: list[tuple[float, float]] = []
        bare: list[tuple[float, float]] = []
        for request in requests:
            ids = engine.prompt_ids(request)

            def measure_ours(request: GenerationRequest = request) -> None:
                record = engine.generate(request)
                assert record.error is None, record.error
                ours.append(ttft_tpot(record.start_ns, record.token_ns))

            def measure_bare(ids: list[int] = ids) -> None:
                bare.append(ttft_tpot(*bare_request(model, ids, args.output, pad)))

            first, second = (
                (measure_ours, measure_bare) if request.index % 2 == 0 else (measure_bare, measure_ours)
            )
            first()
            second()
        engine.close()

    print(
        f"tiny GPT-2 {CONFIG}, prompt {args.prompt}, output {args.output}, {args.requests} requests each, "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads"
    )
    print(f"{'':8} {'TTFT median ms':>15} {'TPOT median ms':>15}")
    medians = {}
    for name, rows in (("mlscope", ours), ("bare", bare)):
        medians[name] = (statistics.median(r[0] for r in rows), statistics.median(r[1] for r in rows))
        print(f"{name:8} {medians[name][0]:15.3f} {medians[name][1]:15.3f}")
    ratio_ttft = medians["mlscope"][0] / medians["bare"][0]
    ratio_tpot = medians["mlscope"][1] / medians["bare"][1]
    print(f"{'ratio':8} {ratio_ttft:15.3f} {ratio_tpot:15.3f}   (mlscope / bare; target <= 1.02)")
    paired = [
        statistics.median(a[k] / b[k] for a, b in zip(ours, bare, strict=True)) for k in (0, 1)
    ]  # each request against its bare neighbour: less of the machine's drift
    print(f"{'paired':8} {paired[0]:15.3f} {paired[1]:15.3f}   (median of per-request ratios)")


if __name__ == "__main__":
    main()
