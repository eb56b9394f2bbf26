"""The generate scenario in process on real transformers models with tiny configurations: exact
output lengths, token times in order, the model directory a server would serve (built once, its
weights those the engine runs), prompts of exactly the asked number of tokens, and encoders refused."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers

from mlscope.contract.generation import GenerationSettings
from mlscope.contract.load import LoadSettings
from mlscope.contract.manifest import Manifest
from mlscope.contract.trace import TRACE_BLOCK_TOKENS
from mlscope.registry.catalogue import Catalogue
from mlscope.registry.models import ModelRegistry
from mlscope.registry.references import ModelOptions, apply_options
from mlscope.runtime.generate.driver import build_requests, run_generate
from mlscope.runtime.generate.records import GenerationRequest
from mlscope.runtime.measure.settings import MeasureSettings
from mlscope.runtime.predictors.base import PredictorError
from mlscope.runtime.predictors.pytorch.generate import InProcessEngine, context_length
from mlscope.runtime.predictors.pytorch.model_directory import materialise, prompt_text, tokenizer_for
from mlscope.runtime.predictors.pytorch.predictor import PyTorchPredictor

CATALOGUE = Catalogue.load()
GPT2 = {"n_layer": 2, "n_embd": 64, "n_head": 2}
T5 = {"d_model": 64, "num_layers": 1, "num_decoder_layers": 1, "num_heads": 2, "d_ff": 128, "d_kv": 32}
BERT = {"num_hidden_layers": 1, "hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 64}
# (prompt tokens, output tokens) of three requests
LENGTHS = [(5, 3), (11, 8), (3, 13)]

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def manifest(ref: str, config: dict[str, Any]) -> Manifest:
    return apply_options(CATALOGUE.manifest(ref, "pytorch"), ModelOptions(config=config))


def engine_for(manifest: Manifest, cache_dir: Path) -> InProcessEngine:
    engine = PyTorchPredictor(manifest=manifest, cache_dir=cache_dir).generation_engine(GenerationSettings())
    assert isinstance(engine, InProcessEngine)
    return engine


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("generate-cache")


@pytest.fixture(scope="module")
def gpt2(cache_dir: Path) -> Iterator[InProcessEngine]:
    engine = engine_for(manifest("hf:gpt2", GPT2), cache_dir)
    yield engine
    engine.close()


@pytest.mark.parametrize(("ref", "config"), [("hf:gpt2", GPT2), ("hf:t5", T5)])
def test_each_request_gets_exactly_its_output_tokens_timed_in_order(
    ref: str, config: dict[str, Any], cache_dir: Path
) -> None:
    engine = engine_for(manifest(ref, config), cache_dir)

    records = [engine.generate(GenerationRequest(i, p, n, seed=3)) for i, (p, n) in enumerate(LENGTHS)]

    for record, (prompt, output) in zip(records, LENGTHS, strict=True):
        assert record.error is None
        assert (record.prompt_tokens, record.requested_tokens) == (prompt, output)
        assert record.output_tokens == output == len(record.token_ns) == len(record.chunk_tokens)
        assert set(record.chunk_tokens) == {1}
        assert record.start_ns < record.token_ns[0]
        assert record.token_ns[0] - record.start_ns < record.end_ns - record.start_ns
        assert all(a < b for a, b in zip(record.token_ns, record.token_ns[1:], strict=False))
        assert record.token_ns[-1] <= record.end_ns
    engine.close()


def test_the_engine_describes_its_framework_and_context(gpt2: InProcessEngine) -> None:
    facts = gpt2.describe()

    assert facts["name"] == "pytorch" and facts["version"] == torch.__version__
    assert facts["transformers"] == transformers.__version__
    assert facts["device"] == "cpu" and facts["model_class"] == "GPT2LMHeadModel"
    assert gpt2.max_context == 1024


def test_a_t5_has_no_fixed_context() -> None:
    assert context_length(transformers.AutoConfig.for_model("t5", **T5)) is None


def test_an_encoder_is_refused_with_what_the_scenario_needs(tmp_path: Path) -> None:
    predictor = PyTorchPredictor(manifest=manifest("hf:bert", BERT), cache_dir=tmp_path)

    with pytest.raises(PredictorError, match=r"hf:bert is an encoder .*needs a decoder or encoder-decoder"):
        predictor.generation_engine(GenerationSettings())
    assert not (tmp_path / "generate").exists() or not any((tmp_path / "generate").iterdir())


def test_the_model_directory_is_built_once_and_holds_the_engines_weights(
    gpt2: InProcessEngine, cache_dir: Path
) -> None:
    first = materialise(manifest("hf:gpt2", GPT2), cache_dir, seed=0)
    stamps = {path.name: path.stat().st_mtime_ns for path in first.iterdir()}

    again = materialise(manifest("hf:gpt2", GPT2), cache_dir, seed=0)

    assert again == first == gpt2.directory
    assert {path.name: path.stat().st_mtime_ns for path in again.iterdir()} == stamps
    assert materialise(manifest("hf:gpt2", GPT2), cache_dir, seed=1) != first
    loaded = transformers.AutoModelForCausalLM.from_pretrained(str(first), local_files_only=True)
    assert gpt2.model is not None
    theirs, ours = loaded.state_dict(), gpt2.model.state_dict()
    assert theirs.keys() == ours.keys()
    assert all(torch.equal(theirs[name], ours[name]) for name in ours)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(first), local_files_only=True)
    assert loaded.generation_config.eos_token_id is None
    assert tokenizer.apply_chat_template([{"role": "user", "content": "ab cd"}], tokenize=False) == "ab cd"
    # every id the model can emit decodes to text, so a server streams one chunk per token
    assert len(tokenizer) == loaded.config.vocab_size
    assert all(tokenizer.decode([i]) for i in range(1, loaded.config.vocab_size, 997))


def test_a_prompt_text_is_exactly_the_tokens_the_engine_feeds_the_model(gpt2: InProcessEngine) -> None:
    assert gpt2.directory is not None
    tokenizer = tokenizer_for(gpt2.directory)

    for n_tokens, index in [(1, 0), (7, 1), (64, 2), (300, 3)]:
        text = prompt_text(tokenizer, n_tokens, seed=5, index=index)
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]

        assert len(ids) == n_tokens
        assert ids == gpt2.prompt_ids(GenerationRequest(index, n_tokens, 1, seed=5))
    assert prompt_text(tokenizer, 9, seed=5, index=0) != prompt_text(tokenizer, 9, seed=5, index=1)


def test_a_model_directory_reference_loads_that_directory(gpt2: InProcessEngine, tmp_path: Path) -> None:
    assert gpt2.directory is not None and gpt2.model is not None
    directory_manifest = ModelRegistry.load().get(str(gpt2.directory), "pytorch")

    engine = engine_for(directory_manifest, tmp_path)

    assert engine.directory == gpt2.directory
    assert not (tmp_path / "generate").exists()
    assert engine.model is not None
    assert all(
        torch.equal(a, b) for a, b in zip(engine.model.parameters(), gpt2.model.parameters(), strict=True)
    )
    record = engine.generate(GenerationRequest(0, 4, 5))
    assert record.error is None and record.output_tokens == 5
    engine.close()


def test_requests_from_several_threads_each_get_their_own_tokens(gpt2: InProcessEngine) -> None:
    requests = [GenerationRequest(i, p, n, seed=7) for i, (p, n) in enumerate(LENGTHS)]

    with ThreadPoolExecutor(max_workers=3) as pool:
        records = list(pool.map(gpt2.generate, requests))

    assert [(r.index, r.error, r.output_tokens) for r in records] == [
        (i, None, n) for i, (_, n) in enumerate(LENGTHS)
    ]
    assert all(len(r.token_ns) == r.output_tokens for r in records)


def test_two_builders_racing_end_with_one_complete_directory(tmp_path: Path) -> None:
    gpt2 = manifest("hf:gpt2", GPT2)

    with ThreadPoolExecutor(max_workers=2) as pool:
        paths = list(pool.map(lambda _: materialise(gpt2, tmp_path, seed=0), range(2)))

    assert paths[0] == paths[1]
    assert {path.name for path in (tmp_path / "generate").iterdir()} == {paths[0].name}  # no staging left
    assert transformers.AutoConfig.from_pretrained(str(paths[0]), local_files_only=True).n_layer == 2


def test_a_damaged_directory_is_built_again(tmp_path: Path) -> None:
    directory = materialise(manifest("hf:gpt2", GPT2), tmp_path, seed=0)
    (directory / "model.safetensors").unlink()

    again = materialise(manifest("hf:gpt2", GPT2), tmp_path, seed=0)

    assert again == directory and (again / "model.safetensors").is_file()


def test_a_trace_and_a_conversation_run_in_process_their_shared_blocks_the_same_token_ids(
    gpt2: InProcessEngine,
) -> None:
    block = TRACE_BLOCK_TOKENS
    trace = {
        "name": "shared.jsonl",
        "sha256": "0" * 64,
        "lines": 4,
        "first_line": 1,
        "block_tokens": block,
        "arrivals_ms": [0.0, 20.0, 40.0, 60.0],
        "input_tokens": [block + 6, block + 9, block + 6, 12],
        "output_tokens": [3, 2, 4, 2],
        "hash_ids": [[1, 2], [1, 3], [4, 2], []],
    }
    settings = GenerationSettings(trace=trace, concurrency=2, warmup_requests=0)
    measurement = run_generate(gpt2, settings, LoadSettings(), MeasureSettings(min_count=2, max_seconds=30))
    generation = measurement["generation"]
    assert generation["failed_requests"]["count"] == 0
    # The model saw each line's input length and generated its output length
    assert generation["per_request"]["prompt_tokens"] == trace["input_tokens"]
    assert generation["per_request"]["output_tokens"] == trace["output_tokens"]
    assert measurement["load"]["trace"]["lines"] == 4
    ids = [gpt2.prompt_ids(request) for request in build_requests(settings, 0, 0, gpt2.max_context)]
    # Block 1 opens lines 1 and 2 with the same token ids; block 4 is other ids
    assert ids[0][:block] == ids[1][:block] and ids[2][:block] != ids[0][:block]
    assert ids[0][block:] != ids[1][block : block + 6]
    # A conversation's second turn starts with its first turn's ids
    talk = GenerationSettings(turns=2, prompt_tokens=5, output_tokens=3, requests=2)
    first, second = (gpt2.prompt_ids(r) for r in build_requests(talk, 2, 0, gpt2.max_context))
    assert len(second) == 5 + 3 + 5 and second[:5] == first
