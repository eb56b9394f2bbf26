"""The generate scenario in process on the GPU (docs/generate.md): a small GPT-2 built on the device
answers each request with exactly its output tokens, each token timed when it reached the host
(`TokenTimer`: transformers copies each new token to the host before handing it over), in order and
inside the request's own start and end."""

from __future__ import annotations

import statistics
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
import torch

from mlscope.contract.generation import GenerationSettings
from mlscope.registry.catalogue import Catalogue
from mlscope.registry.references import ModelOptions, apply_options
from mlscope.runtime.generate.records import GenerationRequest
from mlscope.runtime.predictors.pytorch.generate import InProcessEngine
from mlscope.runtime.predictors.pytorch.predictor import PyTorchPredictor

pytestmark = pytest.mark.slow

GPT2 = {"n_layer": 4, "n_embd": 256, "n_head": 4}
# (prompt tokens, output tokens) of each request
LENGTHS = [(5, 3), (11, 8), (3, 13), (32, 32)]


def test_generation_on_the_gpu_times_each_token_in_order_within_its_request(
    cuda: torch.device, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, record_property: Any
) -> None:
    # Given a small GPT-2 (random weights, its model directory built here) on the GPU
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    manifest = apply_options(Catalogue.load().manifest("hf:gpt2", "pytorch"), ModelOptions(config=GPT2))
    predictor = PyTorchPredictor(manifest=manifest, device=str(cuda), cache_dir=tmp_path / "cache")
    engine = predictor.generation_engine(GenerationSettings())
    assert isinstance(engine, InProcessEngine) and engine.model is not None
    assert {parameter.device for parameter in engine.model.parameters()} == {cuda}
    # When it answers a warm-up request, then each request greedily
    engine.generate(GenerationRequest(99, 4, 4, seed=1))
    records = [engine.generate(GenerationRequest(i, p, n, seed=3)) for i, (p, n) in enumerate(LENGTHS)]
    engine.close()
    # Then each request got exactly its tokens, one time each, strictly in order after its start, the
    # last one no later than its end
    for record, (prompt, output) in zip(records, LENGTHS, strict=True):
        assert record.error is None, record.error
        assert (record.prompt_tokens, record.output_tokens, len(record.token_ns)) == (prompt, output, output)
        times = [record.start_ns, *record.token_ns]
        assert all(later > earlier for earlier, later in pairwise(times)), times
        assert record.token_ns[-1] <= record.end_ns
        # A stamp taken before the device finished its token would leave the request's end (after
        # generate's last synchronisation) far behind the last token: it lies within half the span.
        assert record.end_ns - record.token_ns[-1] < (record.end_ns - record.start_ns) / 2
    first = [(r.token_ns[0] - r.start_ns) / 1e6 for r in records]
    gaps = [(b - a) / 1e6 for r in records for a, b in pairwise(r.token_ns)]
    record_property(
        "figure",
        f"{sum(r.output_tokens for r in records)} tokens in {len(records)} requests; "
        f"TTFT median {statistics.median(first):.2f} ms, ITL median {statistics.median(gaps):.2f} ms",
    )
