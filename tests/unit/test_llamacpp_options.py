"""llama.cpp's `gguf_type` and the parts of it that need no llama.cpp: the option validated by the
request schema, its default keying as unset and the other types named apart, the generate scenario
taking it while still refusing the options transformers' generate loop would ignore, the catalogue
listing llama.cpp for Llama alone, the byte-level spelling the GGUF writer reads tokens with, and the
admission hook refusing what the writer cannot write before it writes anything.
tests/integration/test_llamacpp.py runs llama.cpp."""

from __future__ import annotations

from pathlib import Path

import pytest
from tokenizers import pre_tokenizers

from mlscope.contract.errors import UserError
from mlscope.contract.options import PredictorOptions
from mlscope.contract.request import parse_request
from mlscope.contract.workload import workload_differences, workload_key
from mlscope.registry.catalogue import Catalogue
from mlscope.registry.models import ModelRegistry
from mlscope.runtime.frameworks import get_framework
from mlscope.runtime.predictors.llamacpp import gguf_file
from mlscope.runtime.predictors.llamacpp.gguf_file import _BYTES, _whole_text
from mlscope.workers.admission import admit
from tests.unit.test_workload import evaluation

GENERATE = {"scenarios": ["generate"]}


def test_the_gguf_types_are_the_option_s_values_and_another_is_refused_naming_the_field() -> None:
    # When a request names each GGUF type, and one the writer does not write
    for value in ("f32", "f16", "q8_0", "q4_0"):
        assert parse_request({"model": "hf:llama", "framework": "llamacpp", "options": {"gguf_type": value}})
    with pytest.raises(UserError) as refused:
        parse_request({"model": "hf:llama", "framework": "llamacpp", "options": {"gguf_type": "q2_k"}})
    # Then the last is refused naming options.gguf_type and the types there are
    assert refused.value.field == "options.gguf_type" and "f32, f16, q8_0, q4_0" in str(refused.value)


def test_f32_keys_as_unset_and_the_other_types_are_named_apart() -> None:
    # Given a llama.cpp result that set no type, and one that set the default
    old = evaluation(framework="llamacpp", scenarios=("generate",))
    default = evaluation(framework="llamacpp", scenarios=("generate",), options={"gguf_type": "f32"})
    # Then they are one workload
    assert workload_differences(old, default) == []
    assert workload_key(old, "generate") == workload_key(default, "generate")
    # And q8_0 is another one, named as such
    other = evaluation(framework="llamacpp", scenarios=("generate",), options={"gguf_type": "q8_0"})
    (difference,) = workload_differences(old, other)
    assert difference.text == "options.gguf_type: unset (A) vs q8_0 (B)"


def test_the_generate_scenario_takes_gguf_type_and_still_refuses_another_variant() -> None:
    registry = ModelRegistry.load()
    # When llama.cpp is asked for a q8_0 generate run, it is admitted
    request = {"model": "hf:llama", "framework": "llamacpp", "options": {"gguf_type": "q8_0"}, **GENERATE}
    assert admit(request, registry).manifest.framework.name == "llamacpp"
    # And PyTorch asked to generate in bf16 is still refused, naming the option
    with pytest.raises(UserError) as refused:
        admit(
            {"model": "hf:llama", "framework": "pytorch", "options": {"precision": "bf16"}, **GENERATE},
            registry,
        )
    assert refused.value.field == "options.precision"


def test_the_catalogue_lists_llamacpp_for_llama_alone() -> None:
    catalogue = Catalogue.load()
    # Then hf:llama is meant for llama.cpp after the frameworks its source runs on, and no other is
    assert catalogue.get("hf:llama").frameworks[-1] == "llamacpp"
    assert [entry.ref for entry in catalogue.find(framework="llamacpp")] == ["hf:llama"]


def test_the_writers_byte_table_is_byte_level_bpes_and_a_lone_high_byte_is_no_text() -> None:
    # Given the byte-level alphabet tokenizers uses
    alphabet = set(pre_tokenizers.ByteLevel.alphabet())
    # Then the writer's table spells each of the 256 bytes with one of its characters
    assert set(_BYTES) == alphabet and sorted(_BYTES.values()) == list(range(256))
    # And a word, a space-prefixed word and the special token are text; a lone byte 0xC4 is not
    assert _whole_text("abc") and _whole_text("\u0120abc") and _whole_text("<|endoftext|>")
    assert not _whole_text("\u00c4")


def test_admission_refuses_a_type_or_model_the_writer_cannot_write_in_one_line_writing_nothing(
    tmp_path: Path,
) -> None:
    """The framework's admission hook, called as admission calls it (the request schema refuses an
    unknown type first; a library caller or plugin reaching the hook directly meets this)."""
    registry = ModelRegistry.load()
    # Given llama.cpp's admission hook, the one its registration names
    assert get_framework("llamacpp").admit == "mlscope.runtime.predictors.llamacpp.gguf_file:admit"
    llama = registry.get("hf:llama", "llamacpp")
    cache = tmp_path / "cache"
    cache.mkdir()
    # When it admits a GGUF type the writer does not write
    with pytest.raises(UserError) as refused:
        gguf_file.admit(llama, PredictorOptions(gguf_type="q2_k"), cache)
    # Then it is refused in one line naming options.gguf_type and the types it writes
    message = str(refused.value)
    assert refused.value.field == "options.gguf_type" and len(message.splitlines()) == 1
    assert message.startswith("options.gguf_type: 'q2_k'") and "f32, f16, q8_0, q4_0" in message
    # When it admits a model the writer does not lay out (GPT-2)
    with pytest.raises(UserError) as refused:
        gguf_file.admit(registry.get("hf:gpt2", "pytorch"), PredictorOptions(gguf_type="f16"), cache)
    # Then that is one line naming the model, and what the writer lays out
    assert refused.value.field == "model" and len(str(refused.value).splitlines()) == 1
    assert str(refused.value).startswith("model: hf:gpt2: ") and "model type llama" in str(refused.value)
    # And nothing was written into the cache: no model directory, no GGUF file, no record
    assert list(cache.rglob("*")) == []
