"""The `tokenize` preprocessing step: text to token ids with a Hugging Face `tokenizers` file.

A text sample becomes one of the encoding's fields (input_ids, attention_mask or token_type_ids),
padded and truncated to `max_length`, so a model's several inputs each list `tokenize` with the
field they take and all see the same encoding. A sample holding a tab is a sentence pair: the two
sides are encoded together, as pair classifiers and cross-encoders expect. The tokenizer is a
`tokenizer.json` file (or a directory holding one, as `save_pretrained` writes it), or
`package:<module>/<folder>` for one an installed package ships (found wherever it is installed),
read once per process; nothing is fetched.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any

from marshmallow import Schema, fields, validate

from mlscope.contract.errors import UserError
from mlscope.contract.step_registry import numpy_on_first_use, register_step

if TYPE_CHECKING:
    import numpy as np
else:
    np = numpy_on_first_use(globals())

__all__ = ["TOKEN_FIELDS", "package_folder", "tokenize"]

TOKEN_FIELDS = ("input_ids", "attention_mask", "token_type_ids")


class TokenizeParams(Schema):
    tokenizer = fields.String(required=True, validate=validate.Length(min=1, max=4096))
    max_length = fields.Integer(
        required=True, strict=True, validate=validate.Range(min=1, max=1 << 20, error="must be ≥ {min}")
    )
    field = fields.String(
        load_default="input_ids", validate=validate.OneOf(TOKEN_FIELDS, error="must be one of {choices}")
    )


def package_folder(module: str) -> Path | None:
    """Where the installed package `module` lives, found without importing it; None when it is not
    installed."""
    import importlib.util

    spec = importlib.util.find_spec(module) if module.isidentifier() else None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _located(location: str) -> Path:
    """A tokenizer's path: `package:<module>/<folder>` inside an installed package, else a path."""
    if not location.startswith("package:"):
        return Path(location).expanduser()
    module, _, inside = location.removeprefix("package:").partition("/")
    folder = package_folder(module)
    if folder is None:
        raise UserError(f"tokenize: no installed package {module!r} to find {location!r} in")
    return folder / inside


@functools.lru_cache(maxsize=8)
def _tokenizer(location: str, max_length: int) -> Any:
    path = _located(location)
    if path.is_dir():
        path = path / "tokenizer.json"
    if not path.is_file():
        raise UserError(f"tokenize: no tokenizer file at {path} (a tokenizer.json, or a folder holding one)")
    try:
        from tokenizers import Tokenizer
    except ImportError as exc:
        raise UserError("the tokenize step needs the tokenizers package: pip install tokenizers") from exc
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as exc:  # the library raises a bare Exception for a malformed file
        raise UserError(f"tokenize: {path} is not a tokenizers file: {exc}") from None
    tokenizer.enable_truncation(max_length)
    tokenizer.enable_padding(length=max_length)
    return tokenizer


def tokenize(text: str | bytes, tokenizer: str, max_length: int, field: str = "input_ids") -> np.ndarray:
    """Encode one text (or a tab-separated sentence pair) and return one field of its encoding.

    Args:
        text: the sample; bytes are read as UTF-8.
        tokenizer: a tokenizer.json file, or a directory holding one.
        max_length: the encoding's length, padded and truncated to it.
        field: input_ids, attention_mask or token_type_ids.

    Returns:
        An int64 array of shape (max_length,).
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    first, tab, second = str(text).partition("\t")
    encoder = _tokenizer(tokenizer, max_length)
    encoding = encoder.encode(first, second) if tab else encoder.encode(first)
    values = {
        "input_ids": encoding.ids,
        "attention_mask": encoding.attention_mask,
        "token_type_ids": encoding.type_ids,
    }
    return np.asarray(values[field], dtype=np.int64)


register_step("tokenize", TokenizeParams, tokenize)
