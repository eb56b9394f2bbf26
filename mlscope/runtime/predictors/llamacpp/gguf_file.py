"""A GGUF file of a catalogue decoder, written with the `gguf` package from the model directory the
transformers generate path builds (`pytorch.model_directory.materialise`): the very weights and
tokenizer that PyTorch generates with and `transformers serve` serves, laid out as llama.cpp's
`llama` architecture. docs/llamacpp.md.

What is written, per GGUF type (`options.gguf_type`, `GGUF_TYPES`):

- every matrix (embeddings, attention and MLP projections, the output head) in that type: f32, f16,
  or one of llama.cpp's block formats, q8_0 (32 int8 values and one f16 scale per block) or q4_0
  (32 4-bit values and one f16 scale), quantised by the `gguf` package's own reference code;
- the norms' weights in f32 whatever the type, as llama.cpp's converter writes them;
- the query and key projections' rows reordered from transformers' rotary layout (the two halves of
  each head rotated together) to llama.cpp's (adjacent pairs), as llama.cpp's converter does, so
  both compute the same attention;
- the directory's byte-level BPE tokenizer as a `gpt2` vocabulary with its merges and the GPT-2
  pre-tokeniser, its one special token (id 0) a control token serving as BOS, EOS and padding, its
  lone bytes of multi-byte characters user-defined tokens (each decodes to text by itself), no BOS
  added to a prompt, and the directory's chat template (a chat prompt is its messages' text).

The file is `<cache_dir>/gguf/<key>-<type>.gguf` beside the model directory it came from (the key is
the directory's), written to a temporary name and renamed into place.

The files are made on the machine that admits the request, which has transformers and gguf (`admit`,
the framework's `admit` hook, which writes them in a child process). Beside the file, a record
`<cache_dir>/gguf/<manifest hash>-seed<seed>-<type>.json` (`prepare_gguf`) names it, its model
directory, the model's context length and the prompts' words (the tokenizer's single-token words),
so that the predictor needs neither transformers nor gguf to find and run the file (`find_gguf`): a
predictor image, which reads the host's cache mounted read-only, has llama-cpp-python and numpy
only. docs/llamacpp.md#in-a-container.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mlscope.contract.errors import UserError
from mlscope.contract.options import GGUF_TYPES, PredictorOptions
from mlscope.runtime.predictors.base import PredictorError
from mlscope.runtime.predictors.pytorch.model_directory import PromptWords

if TYPE_CHECKING:
    from mlscope.contract.manifest import Manifest

__all__ = [
    "GGUF_MODEL_TYPES",
    "PreparedGguf",
    "admit",
    "find_gguf",
    "gguf_for",
    "prepare_gguf",
    "write_gguf",
]

# The transformers model types this writer lays out (llama.cpp's `llama` architecture).
GGUF_MODEL_TYPES = ("llama",)
_DEFAULT_TYPE = "f32"
# Bumped when what a file holds changes, so an old cached file is not taken for a new one.
_LAYOUT = 2
# Bumped when what a preparation record holds changes.
_RECORD_LAYOUT = 1
# What writes the files: without them, only a prepared file is found (`find_gguf`).
_WRITER_MODULES = ("transformers", "gguf", "torch")
# The exit status of `admit`'s child for a refusal it explains in one JSON line on standard output.
_REFUSED = 2


def _check_type(gguf_type: str) -> None:
    if gguf_type not in GGUF_TYPES:
        raise UserError(
            f"options.gguf_type: {gguf_type!r} is not a type the GGUF writer writes; it writes "
            f"{', '.join(GGUF_TYPES)}",
            field="options.gguf_type",
        )


def _check_model(manifest: Manifest) -> None:
    source = manifest.source
    model_type = source.target if source.kind == "transformers" else None
    if model_type not in GGUF_MODEL_TYPES or source.options.get("directory"):
        raise PredictorError(
            f"{manifest.name}: llama.cpp runs a GGUF file written from a catalogue decoder of model type "
            f"{' or '.join(GGUF_MODEL_TYPES)} (e.g. hf:llama); this model is "
            f"{source.kind} {model_type or source.target!s}"
        )


def gguf_for(manifest: Manifest, cache_dir: Path, seed: int, gguf_type: str | None) -> tuple[Path, Path]:
    """The manifest's decoder as a GGUF file of `gguf_type` (None: f32), written once and reused.

    Returns:
        (the GGUF file, the model directory it was written from).

    Raises:
        UserError: a GGUF type the writer does not write (field "options.gguf_type").
        PredictorError: not a catalogue decoder of a model type the writer lays out.
    """
    from mlscope.runtime.predictors.pytorch import model_directory

    kind = gguf_type or _DEFAULT_TYPE
    _check_type(kind)
    _check_model(manifest)
    directory = model_directory.materialise(manifest, cache_dir, seed)
    path = cache_dir / "gguf" / f"{directory.name}-v{_LAYOUT}-{kind}.gguf"
    if path.is_file():
        return path, directory
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, staging = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    os.close(handle)
    try:
        write_gguf(directory, Path(staging), kind)
        # mkstemp's 0600 would keep out a container that reads the cache as another user.
        os.chmod(staging, 0o644)
        os.replace(staging, path)
    finally:
        Path(staging).unlink(missing_ok=True)
    return path, directory


@dataclass(frozen=True)
class PreparedGguf:
    """A GGUF file made for a request, with what its predictor needs besides llama.cpp.

    Attributes:
        path: the GGUF file.
        directory: the model directory it was written from (config.json, tokenizer files).
        context: the model's context length (config.json's max_position_embeddings).
        words: the tokenizer's single-token words, which make the prompts (`PromptWords`).
        writer: the versions of what wrote the files (gguf, transformers), by distribution.
    """

    path: Path
    directory: Path
    context: int
    words: PromptWords
    writer: dict[str, str | None]


def _record_path(manifest: Manifest, cache_dir: Path, seed: int, kind: str) -> Path:
    return cache_dir / "gguf" / f"{manifest.sha256}-seed{seed}-{kind}.json"


def prepare_gguf(manifest: Manifest, cache_dir: Path, seed: int, gguf_type: str | None) -> PreparedGguf:
    """Write (or reuse) the manifest's model directory and GGUF file of `gguf_type` (`gguf_for`), and
    the record that lets `find_gguf` find them without transformers. Needs transformers and gguf.

    Raises:
        UserError: a GGUF type the writer does not write (field "options.gguf_type"); nothing is
            written then.
        PredictorError: not a catalogue decoder the writer lays out.
    """
    from mlscope.runtime.predictors.pytorch import model_directory

    kind = gguf_type or _DEFAULT_TYPE
    _check_type(kind)
    path, directory = gguf_for(manifest, cache_dir, seed, kind)
    words = PromptWords.of(model_directory.tokenizer_for(directory))
    context = int(json.loads((directory / "config.json").read_text())["max_position_embeddings"])
    writer = _writer_versions()
    document = {
        "layout": _RECORD_LAYOUT,
        "file": path.relative_to(cache_dir).as_posix(),
        "directory": directory.relative_to(cache_dir).as_posix(),
        "context": context,
        "prompt_words": {"ids": list(words.ids), "words": list(words.words)},
        "writer": writer,
    }
    record = _record_path(manifest, cache_dir, seed, kind)
    text = json.dumps(document, indent=1) + "\n"
    if not record.is_file() or record.read_text() != text:
        handle, staging = tempfile.mkstemp(prefix=f".{record.name}-", dir=record.parent)
        try:
            with os.fdopen(handle, "w") as out:
                out.write(text)
            os.chmod(staging, 0o644)
            os.replace(staging, record)
        finally:
            Path(staging).unlink(missing_ok=True)
    return PreparedGguf(path, directory, context, words, writer)


def find_gguf(manifest: Manifest, cache_dir: Path, seed: int, gguf_type: str | None) -> PreparedGguf:
    """The manifest's GGUF file of `gguf_type` as `prepare_gguf` recorded it; read only, so that a
    read-only cache (a container's) serves it. Where it was not prepared, it is prepared now when
    transformers and gguf are installed.

    Raises:
        UserError: a GGUF type the writer does not write (field "options.gguf_type").
        PredictorError: not prepared, and transformers or gguf missing here (a predictor image); or
            as `prepare_gguf`.
    """
    kind = gguf_type or _DEFAULT_TYPE
    _check_type(kind)
    record = _record_path(manifest, cache_dir, seed, kind)
    found = _read_record(record, cache_dir)
    if found is not None:
        return found
    missing = [name for name in _WRITER_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        raise PredictorError(
            f"{manifest.name}: no GGUF file of type {kind} in the cache ({record.name}); it is written "
            f"when the request is admitted, by a machine with transformers and gguf, and this one lacks "
            f"{', '.join(missing)}"
        )
    return prepare_gguf(manifest, cache_dir, seed, kind)


def _read_record(record: Path, cache_dir: Path) -> PreparedGguf | None:
    """The record's files, or None when it, or a file it names, is missing or of another layout."""
    try:
        document = json.loads(record.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(document, dict) or document.get("layout") != _RECORD_LAYOUT:
        return None
    path, directory = cache_dir / document["file"], cache_dir / document["directory"]
    if not path.is_file() or not directory.is_dir():
        return None
    words = document["prompt_words"]
    return PreparedGguf(
        path,
        directory,
        int(document["context"]),
        PromptWords(tuple(int(i) for i in words["ids"]), tuple(str(w) for w in words["words"])),
        dict(document.get("writer") or {}),
    )


def _writer_versions() -> dict[str, str | None]:
    """The installed versions of what writes the files, read without importing them."""
    import importlib.metadata

    versions: dict[str, str | None] = {}
    for name in ("gguf", "transformers"):
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def admit(manifest: Manifest, options: PredictorOptions, cache_dir: Path, timeout_s: float = 1800) -> None:
    """The framework's admission hook (`FrameworkSpec.admit`): write the GGUF file and its record
    into the cache now, on the machine that admits the request, so that its predictor, here or in a
    container that mounts the cache, only finds them.

    The writing runs in a child process (`python -m mlscope.runtime.predictors.llamacpp.gguf_file`),
    so the admitting process (the CLI, a worker) never imports torch or transformers, and what they
    print stays out of its output. A record written by the same gguf and transformers versions, whose
    files are there, is taken as it is, without a child.

    Raises:
        UserError: in one line: a GGUF type the writer does not write (field "options.gguf_type") or
            a model it does not lay out (field "model"), nothing written then; or no transformers,
            torch or gguf on this machine (field "framework").
        PredictorError: the child failed otherwise; its last line.
        subprocess.TimeoutExpired: the child ran longer than `timeout_s`.
    """
    kind = options.gguf_type or _DEFAULT_TYPE
    _check_type(kind)
    try:
        _check_model(manifest)
    except PredictorError as exc:
        raise UserError(f"model: {exc}", field="model") from None
    found = _read_record(_record_path(manifest, cache_dir, options.seed, kind), cache_dir)
    if found is not None and found.writer == _writer_versions():
        return
    missing = [name for name in _WRITER_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        raise UserError(
            "framework: llama.cpp's GGUF file is written where the request is admitted, with transformers, "
            f"torch and gguf; this machine lacks {', '.join(missing)} "
            "(pip install 'mlscope[llamacpp,pytorch]')",
            field="framework",
        )
    document = {
        "manifest": manifest.to_dict(),
        "origin": manifest.origin,
        "seed": options.seed,
        "gguf_type": kind,
        "cache_dir": str(cache_dir),
    }
    completed = subprocess.run(
        [sys.executable, "-m", "mlscope.runtime.predictors.llamacpp.gguf_file"],
        input=json.dumps(document),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    if completed.returncode == _REFUSED:
        for line in reversed(completed.stdout.splitlines()):
            if line.startswith("{"):
                refusal = json.loads(line)
                raise UserError(refusal["message"], field=refusal["field"])
    if completed.returncode != 0:
        lines = [line.strip() for line in completed.stderr.splitlines() if line.strip()]
        last = lines[-1][:300] if lines else f"exit status {completed.returncode}"
        raise PredictorError(f"writing the GGUF file of {manifest.name} failed: {last}")


def _main() -> None:
    """The child of `admit`: the job on standard input; a refusal as one JSON line on standard output
    and exit status 2."""
    from mlscope.contract.manifest import parse_manifest

    job = json.loads(sys.stdin.read())
    manifest = parse_manifest(job["manifest"], origin=job["origin"])
    try:
        prepare_gguf(manifest, Path(job["cache_dir"]), int(job["seed"]), job["gguf_type"])
    except UserError as exc:
        print(json.dumps({"field": exc.field or "options.gguf_type", "message": exc.message}))
        sys.exit(_REFUSED)
    except PredictorError as exc:
        print(json.dumps({"field": "model", "message": f"model: {exc}"}))
        sys.exit(_REFUSED)


def _rotary_rows(weight: np.ndarray, heads: int) -> np.ndarray:
    """A query or key projection's rows from transformers' rotary layout to llama.cpp's: within each
    head, row i of the first half and row i of the second half become rows 2i and 2i+1."""
    rows = weight.shape[0]
    return (
        weight.reshape(heads, 2, rows // heads // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)
    )


def _tensor_names(layers: int) -> dict[str, str]:
    """transformers' LlamaForCausalLM tensor names → GGUF's."""
    names = {
        "model.embed_tokens.weight": "token_embd.weight",
        "model.norm.weight": "output_norm.weight",
        "lm_head.weight": "output.weight",
    }
    per_layer = {
        "input_layernorm": "attn_norm",
        "self_attn.q_proj": "attn_q",
        "self_attn.k_proj": "attn_k",
        "self_attn.v_proj": "attn_v",
        "self_attn.o_proj": "attn_output",
        "post_attention_layernorm": "ffn_norm",
        "mlp.gate_proj": "ffn_gate",
        "mlp.up_proj": "ffn_up",
        "mlp.down_proj": "ffn_down",
    }
    for layer in range(layers):
        for theirs, ours in per_layer.items():
            names[f"model.layers.{layer}.{theirs}.weight"] = f"blk.{layer}.{ours}.weight"
    return names


def _rope_theta(config: dict[str, Any]) -> float:
    parameters = config.get("rope_parameters") or {}
    theta = parameters.get("rope_theta", config.get("rope_theta", 10000.0))
    return float(theta)


def write_gguf(directory: Path, path: Path, gguf_type: str) -> None:
    """Write the Llama model directory `directory` (config.json, model.safetensors, tokenizer.json)
    as a GGUF file of `gguf_type` at `path` (see the module docstring for the layout).

    Raises:
        UserError: a GGUF type the writer does not write.
        PredictorError: the directory is not a Llama decoder this writer lays out (rotary scaling,
            biases), or a matrix's rows do not split into the type's blocks.
    """
    import gguf
    from safetensors.numpy import load_file

    _check_type(gguf_type)
    config = json.loads((directory / "config.json").read_text())
    if config.get("model_type") not in GGUF_MODEL_TYPES:
        raise PredictorError(
            f"{directory}: model type {config.get('model_type')!r} is not one the GGUF writer lays out"
        )
    scaling = (config.get("rope_parameters") or {}).get("rope_type", "default")
    if scaling != "default" or config.get("attention_bias") or config.get("mlp_bias"):
        raise PredictorError(
            f"{directory}: the GGUF writer lays out Llama without rotary scaling or biases "
            f"(rope_type {scaling!r}, attention_bias {config.get('attention_bias')}, "
            f"mlp_bias {config.get('mlp_bias')})"
        )
    heads = int(config["num_attention_heads"])
    kv_heads = int(config.get("num_key_value_heads") or heads)
    width = int(config["hidden_size"])
    head_dim = int(config.get("head_dim") or width // heads)
    layers = int(config["num_hidden_layers"])
    qtype = {
        "f32": gguf.GGMLQuantizationType.F32,
        "f16": gguf.GGMLQuantizationType.F16,
        "q8_0": gguf.GGMLQuantizationType.Q8_0,
        "q4_0": gguf.GGMLQuantizationType.Q4_0,
    }[gguf_type]
    file_type = {
        "f32": gguf.LlamaFileType.ALL_F32,
        "f16": gguf.LlamaFileType.MOSTLY_F16,
        "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
        "q4_0": gguf.LlamaFileType.MOSTLY_Q4_0,
    }[gguf_type]

    writer = gguf.GGUFWriter(str(path), arch="llama")
    writer.add_name(directory.name)
    writer.add_file_type(int(file_type))
    writer.add_context_length(int(config["max_position_embeddings"]))
    writer.add_embedding_length(width)
    writer.add_block_count(layers)
    writer.add_feed_forward_length(int(config["intermediate_size"]))
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_dimension_count(head_dim)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_freq_base(_rope_theta(config))
    writer.add_layer_norm_rms_eps(float(config["rms_norm_eps"]))
    writer.add_vocab_size(int(config["vocab_size"]))
    _add_tokenizer(writer, directory, int(config["vocab_size"]))

    state = load_file(str(directory / "model.safetensors"))
    if "lm_head.weight" not in state:  # tied: the output head is the embedding matrix
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
    names = _tensor_names(layers)
    missing = sorted(set(names) - set(state))
    if missing:
        raise PredictorError(f"{directory}: not a Llama checkpoint the GGUF writer knows (no {missing[0]})")
    for theirs, ours in names.items():
        data = np.ascontiguousarray(state[theirs].astype(np.float32))
        if theirs.endswith("q_proj.weight"):
            data = _rotary_rows(data, heads)
        elif theirs.endswith("k_proj.weight"):
            data = _rotary_rows(data, kv_heads)
        if data.ndim == 1 or qtype == gguf.GGMLQuantizationType.F32:
            writer.add_tensor(ours, data)
            continue
        try:
            packed = gguf.quants.quantize(data, qtype)
        except ValueError as exc:  # a row that does not split into whole blocks
            raise PredictorError(f"{directory}: {theirs} cannot be written as {gguf_type} ({exc})") from None
        writer.add_tensor(ours, packed, raw_dtype=qtype if qtype != gguf.GGMLQuantizationType.F16 else None)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _add_tokenizer(writer: Any, directory: Path, vocab_size: int) -> None:
    """The directory's byte-level BPE (tokenizer.json) as a GGUF `gpt2` vocabulary."""
    import gguf

    from mlscope.runtime.predictors.pytorch.model_directory import CHAT_TEMPLATE

    document = json.loads((directory / "tokenizer.json").read_text())
    model = document["model"]
    vocabulary: dict[str, int] = model["vocab"]
    if sorted(vocabulary.values()) != list(range(vocab_size)):
        raise PredictorError(f"{directory}: the tokenizer's ids are not 0..{vocab_size - 1}")
    tokens = [""] * vocab_size
    for token, index in vocabulary.items():
        tokens[index] = token
    special = {int(added["id"]) for added in document.get("added_tokens", []) if added.get("special")}
    types = [
        gguf.TokenType.CONTROL
        if index in special
        else gguf.TokenType.USER_DEFINED
        if not _whole_text(tokens[index])
        else gguf.TokenType.NORMAL
        for index in range(vocab_size)
    ]
    merges = [merge if isinstance(merge, str) else " ".join(merge) for merge in model.get("merges", [])]
    end = min(special) if special else 0
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(end)
    writer.add_eos_token_id(end)
    writer.add_pad_token_id(end)
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHAT_TEMPLATE)


def _byte_level_bytes() -> dict[str, int]:
    """Byte-level BPE's spelling of each byte (GPT-2's table: printable bytes as themselves, the
    others as the characters from U+0100 on), character → byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    spelled = {byte: chr(byte) for byte in printable}
    extra = 0
    for byte in range(256):
        if byte not in spelled:
            spelled[byte] = chr(256 + extra)
            extra += 1
    return {char: byte for byte, char in spelled.items()}


_BYTES = _byte_level_bytes()


def _whole_text(token: str) -> bool:
    """Whether a byte-level token's bytes are whole UTF-8 text on their own. One that is a part of a
    multi-byte character (a lone byte from 0x80 up) is written as a user-defined token, its piece
    its byte-level spelling: it then decodes to text by itself, and llama.cpp's server streams it
    as one chunk, as transformers serve streams it (decoded to U+FFFD), instead of holding it back
    until a character completes."""
    try:
        bytes(_BYTES[char] for char in token).decode("utf-8")
    except (KeyError, UnicodeDecodeError):
        return False
    return True


if __name__ == "__main__":
    _main()
