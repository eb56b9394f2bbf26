"""The tokenize step, with a tokenizer made here by the `tokenizers` library (nothing fetched)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mlscope.contract.errors import UserError
from mlscope.contract.manifest import ManifestError, parse_manifest
from mlscope.contract.steps import apply_steps


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    vocabulary = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "a": 4, "cat": 5, "sat": 6, "dog": 7}
    tokenizer = Tokenizer(models.WordLevel(vocabulary, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", 2), ("[SEP]", 3)],
    )
    folder = tmp_path_factory.mktemp("tokenizer")
    tokenizer.save(str(folder / "tokenizer.json"))
    return folder


def _manifest(tokenizer: Path, field: str = "input_ids", max_length: int = 8) -> dict:
    return {
        "name": "text",
        "version": "1",
        "task": "text_classification",
        "framework": {"name": "pytorch", "version": "*"},
        "source": {"python": "x:y"},
        "weights": "random",
        "inputs": [
            {
                "name": field,
                "shape": [max_length],
                "dtype": "int64",
                "steps": [
                    {"tokenize": {"tokenizer": str(tokenizer), "max_length": max_length, "field": field}}
                ],
            }
        ],
        "outputs": [{"name": "logits"}],
    }


def test_a_sentence_becomes_padded_ids_and_its_mask(tokenizer_dir: Path) -> None:
    ids = parse_manifest(_manifest(tokenizer_dir), origin="test").inputs[0]
    mask = parse_manifest(_manifest(tokenizer_dir, "attention_mask"), origin="test").inputs[0]
    assert apply_steps(ids.steps, "a cat sat").tolist() == [2, 4, 5, 6, 3, 0, 0, 0]
    assert apply_steps(mask.steps, b"a cat sat").tolist() == [1, 1, 1, 1, 1, 0, 0, 0]
    assert apply_steps(ids.steps, "a cat sat").dtype == np.int64


def test_a_tab_makes_a_sentence_pair_and_long_text_is_truncated(tokenizer_dir: Path) -> None:
    types = parse_manifest(_manifest(tokenizer_dir, "token_type_ids"), origin="test").inputs[0]
    assert apply_steps(types.steps, "a cat\ta dog").tolist() == [0, 0, 0, 0, 1, 1, 1, 0]
    ids = parse_manifest(_manifest(tokenizer_dir, max_length=4), origin="test").inputs[0]
    assert apply_steps(ids.steps, "a cat sat a dog").shape == (4,)


def test_bad_tokenize_parameters_name_the_field(tokenizer_dir: Path) -> None:
    document = _manifest(tokenizer_dir)
    document["inputs"][0]["steps"][0]["tokenize"]["field"] = "ids"
    with pytest.raises(ManifestError, match=r"inputs\.0\.steps\.0\.tokenize\.field"):
        parse_manifest(document, origin="test")
    missing = parse_manifest(_manifest(tokenizer_dir / "nowhere"), origin="test").inputs[0]
    with pytest.raises(UserError, match="no tokenizer file at"):
        apply_steps(missing.steps, "a cat")
