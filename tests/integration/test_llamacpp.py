"""llama.cpp end to end: the catalogue's tiny Llama written as GGUF files and run by llama-cpp-python
in the generate scenario (`mlscope run hf:llama -f llamacpp --scenario generate`) at f16 and q8_0,
its logits against transformers' on the same token ids per GGUF type, llama.cpp's own server as the
`--compare-served` target, what it refuses in one line with nothing stored, and the file admission
writes found by a predictor that has no transformers, torch or gguf (a predictor image's)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import llama_cpp
import pytest

from mlscope.contract.errors import UserError
from mlscope.contract.manifest import Manifest
from mlscope.contract.options import PredictorOptions
from mlscope.registry.models import ModelRegistry
from mlscope.runtime.predictors.base import PredictorError
from mlscope.runtime.predictors.llamacpp import gguf_file
from mlscope.runtime.predictors.llamacpp.check import compare_logits
from mlscope.runtime.predictors.llamacpp.gguf_file import gguf_for
from mlscope.store import open_store
from tests.integration.test_run_cli import json_lines, mlscope

pytestmark = pytest.mark.slow

MODEL = "hf:llama"
# Two of the tiny Llama's four layers: the same architecture, half the time.
TWO_LAYERS = ("--config", "num_hidden_layers=2")
# Any spread and any load from other processes accepted: a tiny model on a shared machine.
QUICK = (
    "--min-seconds", "0.1", "--max-seconds", "3", "--measure", "stability=0.99",
    "--measure", "contention_limit=1.0",
)  # fmt: skip
GENERATE = (
    "--scenario", "generate", "--prompt-tokens", "16", "--output-tokens", "8", "--requests", "10", *QUICK,
)  # fmt: skip


@pytest.fixture
def env(mlscope_env: dict[str, str], shared_cache: Path) -> dict[str, str]:
    """mlscope's environment with the session's cache: each GGUF file is written once."""
    return {**mlscope_env, "MLSCOPE_CACHE_DIR": str(shared_cache)}


def _manifest(layers: int = 2) -> Manifest:
    from mlscope.registry.model_options import ModelOptions

    options = ModelOptions.from_dict({"config": {"num_hidden_layers": layers}})
    return ModelRegistry.load().get(MODEL, "llamacpp", options)


def test_the_tiny_llama_generates_on_llamacpp_at_f16_and_q8_0_with_ttft_and_tpot(env: dict[str, str]) -> None:
    # Given the catalogue's tiny Llama, when it generates in process on llama.cpp from its f16 and its
    # q8_0 GGUF file (two evaluations of one command)
    done = mlscope(
        env, "run", MODEL, *TWO_LAYERS, "-f", "llamacpp", "--option", "gguf_type=f16,q8_0", *GENERATE,
        "--json",
    )  # fmt: skip
    assert done.returncode in (0, 3), done.stderr
    results = json_lines(done.stdout)
    # Then each succeeded on the installed llama-cpp-python, in the GGUF type asked for
    assert sorted(r["framework"]["gguf_type"] for r in results) == ["f16", "q8_0"]
    sizes = {}
    for result in results:
        assert result["status"] == "succeeded", result["error"]
        facts = result["framework"]
        assert facts["name"] == "llamacpp" and facts["version"] == llama_cpp.__version__
        sizes[facts["gguf_type"]] = facts["gguf_bytes"]
        (point,) = result["measurements"]
        generation = point["generation"]
        # And every request got every token, timed: a TTFT and a TPOT, in process
        assert generation["via"] == "in_process" and generation["failed_requests"]["count"] == 0
        assert generation["per_request"]["output_tokens"] == [8] * generation["requests"]
        assert generation["ttft_ms"]["median"] > 0 and generation["tpot_ms"]["median"] > 0
        assert point["validity"]["valid"], point["validity"]
    # And q8_0's file is the smaller (about half of f16's: 8.5 bits a weight against 16)
    assert sizes["q8_0"] < 0.6 * sizes["f16"]


@pytest.mark.parametrize(
    ("gguf_type", "rms_bound", "same_argmax"),
    [
        # f32 is transformers' own weights; only the order of float32 sums differs.
        # llama.cpp keeps its KV cache in f16, so attention reads keys and values rounded to f16.
        ("f32", 2e-3, 0.95),
        # f16 rounds each weight to 11 significant bits (relative error 2**-12 at most), and llama.cpp
        # rounds activations for its f16 products the same way: well under 1% of the logits' size.
        ("f16", 1e-2, 0.8),
        # q8_0 rounds each weight to 1/127 of its block's largest (about 1% of a Gaussian weight's
        # size, 0.3% root-mean-square) and quantises the activations it multiplies to q8_0 too; a few
        # layers of that keep the logits within 5% of their size.
        ("q8_0", 5e-2, 0.5),
        # q4_0 has 16 levels a block instead of 255: sixteen times q8_0's rounding error.
        ("q4_0", 0.5, 0.0),
    ],
)
def test_the_gguf_computes_the_logits_transformers_computes_on_the_same_ids(
    shared_cache: Path, gguf_type: str, rms_bound: float, same_argmax: float
) -> None:
    # Given the tiny Llama's GGUF file of one type and the model directory it was written from
    # When both compute the logits of the generate scenario's first prompt (32 tokens)
    check = compare_logits(_manifest(), shared_cache, gguf_type, prompt_tokens=32)
    # Then llama.cpp's differ from transformers' by no more than the type's rounding allows
    assert check.positions == 32
    assert check.relative_rms < rms_bound, check
    assert check.same_argmax >= same_argmax, check


def test_compare_served_runs_the_same_requests_against_llamacpps_own_server(env: dict[str, str]) -> None:
    # Given the tiny Llama's f16 GGUF file, when it generates in process and behind llama.cpp's
    # OpenAI-compatible server (python -m llama_cpp.server) on the same file
    done = mlscope(
        env, "run", MODEL, *TWO_LAYERS, "-f", "llamacpp", "--option", "gguf_type=f16", *GENERATE,
        "--compare-served", "--json",
    )  # fmt: skip
    assert done.returncode in (0, 3), done.stderr
    (result,) = json_lines(done.stdout)
    assert result["status"] == "succeeded", result["error"]
    (point,) = result["measurements"]
    generation = point["generation"]
    served = generation["served"]
    # Then the server was llama-cpp-python's, and both halves got every token of every request
    assert served["server"] == f"llama-cpp-python server ({llama_cpp.__version__})"
    for half in (generation, served):
        assert half["failed_requests"]["count"] == 0, half["failed_requests"]
        assert half["per_request"]["output_tokens"] == [8] * half["requests"]
    # And the prompts were the same tokens: the server counted exactly the in-process lengths, request
    # by request (each half runs until its own figures are stable, so one may run more requests)
    served_lengths = served["per_request"]["prompt_tokens"]
    lengths = generation["per_request"]["prompt_tokens"]
    both = min(len(served_lengths), len(lengths))
    assert both > 0 and served_lengths[:both] == lengths[:both]
    # And what serving adds (HTTP, JSON, detokenising) is reported per metric
    overhead = generation["serving_overhead"]["ttft_ms"]
    assert overhead["in_process_ms"] == generation["ttft_ms"]["median"] and overhead["served_ms"] > 0


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        # a GGUF type the writer does not write
        (
            [MODEL, "-f", "llamacpp", "--option", "gguf_type=q2_k", "--scenario", "generate"],
            ("options.gguf_type", "f32, f16, q8_0, q4_0"),
        ),
        # a GGUF of a model that is no decoder the writer lays out
        (["hf:bert", "-f", "llamacpp", "--scenario", "generate"], ("framework", "llamacpp runs hf:llama")),
        (["hf:gpt2", "-f", "llamacpp", "--scenario", "generate"], ("framework", "llamacpp runs hf:llama")),
        # the GGUF type on another framework
        (
            [MODEL, "-f", "pytorch", "--option", "gguf_type=q8_0", "--scenario", "generate"],
            ("options.gguf_type", "PyTorch has no gguf_type option; llama.cpp has"),
        ),
        # a scenario other than generate
        ([MODEL, "-f", "llamacpp"], ("scenarios", "llama.cpp runs only the generate scenario")),
    ],
)
def test_what_llamacpp_cannot_run_is_refused_in_one_line_storing_nothing(
    mlscope_env: dict[str, str], arguments: list[str], named: tuple[str, ...]
) -> None:
    # When a run asks llama.cpp for what it cannot do
    done = mlscope(mlscope_env, "run", *arguments)
    # Then it exits 2 with one line naming the field and what is possible, and stores nothing
    assert done.returncode == 2, done.stderr
    err = done.stderr.strip()
    assert len(err.splitlines()) == 1 and err.startswith("mlscope: error: "), err
    assert all(part in err for part in named), err
    assert open_store(mlscope_env["MLSCOPE_STORE_URL"]).count_evaluations() == 0


def test_the_writer_refuses_a_type_it_does_not_write_and_a_non_llama_model(shared_cache: Path) -> None:
    # When the GGUF writer is asked for a type it does not write
    with pytest.raises(UserError) as refused:
        gguf_for(_manifest(), shared_cache, 0, "q2_k")
    # Then it names the field and the types it writes
    assert refused.value.field == "options.gguf_type" and "f32, f16, q8_0, q4_0" in str(refused.value)
    # And a model it does not lay out (GPT-2) is refused with what it lays out
    gpt2 = ModelRegistry.load().get("hf:gpt2", "pytorch")
    with pytest.raises(PredictorError, match="model type llama"):
        gguf_for(gpt2, shared_cache, 0, "f16")


def test_the_ggufs_vocabulary_tokenizes_the_prompts_as_transformers_and_decodes_every_token(
    shared_cache: Path,
) -> None:
    from llama_cpp import Llama

    from mlscope.runtime.predictors.pytorch import model_directory

    # Given the tiny Llama's GGUF file and the model directory's tokenizer
    path, directory = gguf_for(_manifest(), shared_cache, 0, "q8_0")
    words = model_directory.PromptWords.of(model_directory.tokenizer_for(directory))
    vocabulary = Llama(model_path=str(path), vocab_only=True, verbose=False)
    try:
        # When llama.cpp tokenizes the served prompts (texts) of a few requests
        for index in range(5):
            text = words.prompt_text(48, 0, index)
            ids = vocabulary.tokenize(text.encode("utf-8"), add_bos=False, special=False)
            # Then it gets the very ids the in-process engines feed the model
            assert ids == words.prompt_ids(48, 0, index)
        # And every ordinary token decodes to whole UTF-8 text by itself (a server streams each
        # token as its own chunk), the end-of-text token to nothing
        assert vocabulary.detokenize([0]) == b""
        for token in range(1, vocabulary.n_vocab()):
            vocabulary.detokenize([token]).decode("utf-8")
    finally:
        vocabulary.close()


# A predictor without the writer's libraries, as in the llama.cpp image: they cannot be imported.
WITHOUT_WRITER = """
import json, sys
from pathlib import Path
for name in ("transformers", "torch", "gguf", "tokenizers", "safetensors"):
    sys.modules[name] = None
from mlscope.contract.manifest import parse_manifest
from mlscope.runtime.predictors.base import PredictorError
from mlscope.runtime.predictors.llamacpp.gguf_file import find_gguf
job = json.loads(sys.stdin.read())
manifest = parse_manifest(job["manifest"], origin=job["origin"])
found = find_gguf(manifest, Path(job["cache"]), 0, "q8_0")
try:
    find_gguf(manifest, Path(job["empty"]), 0, "q8_0")
    missing = None
except PredictorError as exc:
    missing = str(exc)
print(json.dumps({
    "path": str(found.path), "directory": str(found.directory), "context": found.context,
    "prompt": found.words.prompt_ids(16, 0, 3), "writer": found.writer, "missing": missing,
    "loaded": [m for m in ("transformers", "torch", "gguf") if sys.modules.get(m) is not None],
}))
"""


def test_admission_writes_the_gguf_that_a_predictor_without_transformers_finds(
    shared_cache: Path, tmp_path: Path
) -> None:
    from mlscope.runtime.predictors.pytorch import model_directory

    manifest = _manifest()
    # Given the tiny Llama admitted for llama.cpp at q8_0 (the framework's admission hook)
    gguf_file.admit(manifest, PredictorOptions(gguf_type="q8_0"), shared_cache)
    path, directory = gguf_for(manifest, shared_cache, 0, "q8_0")
    words = model_directory.PromptWords.of(model_directory.tokenizer_for(directory))
    # When a process that cannot import transformers, torch or gguf looks for that file, in the cache
    # admission wrote and in an empty one
    empty = tmp_path / "empty"
    empty.mkdir()
    job = {
        "manifest": manifest.to_dict(),
        "origin": manifest.origin,
        "cache": str(shared_cache),
        "empty": str(empty),
    }
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_WRITER],
        input=json.dumps(job),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    # Then it found the file and directory admission wrote, and draws the prompts transformers' tokenizer
    # makes, without importing any of them
    assert (found["path"], found["directory"]) == (str(path), str(directory))
    assert found["prompt"] == words.prompt_ids(16, 0, 3) and found["context"] > 16
    assert found["writer"]["gguf"] and found["writer"]["transformers"] and found["loaded"] == []
    # And where admission wrote nothing it says so in one line, naming what it lacks to write it
    assert "no GGUF file of type q8_0" in found["missing"] and "transformers" in found["missing"]
    assert len(found["missing"].splitlines()) == 1 and list(empty.iterdir()) == []
    # And the files are readable by any user (a container reads the cache as another uid)
    for written in (path, gguf_file._record_path(manifest, shared_cache, 0, "q8_0")):
        assert written.stat().st_mode & 0o044 == 0o044, written
