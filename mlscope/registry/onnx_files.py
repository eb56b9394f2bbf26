"""A user's ONNX file as a manifest: its inputs, dtypes and shapes read from the graph, its SHA-256
computed, the dynamic axes filled in (the first is the batch axis; the others take their size from
`input_shapes`).

Only the graph's signature is read (the `onnx` package parses the protobuf; no session is made),
so resolving a reference costs a parse and a hash, not a model load. Given a cache directory, the
signature of a graph that passed onnx's checker is kept there, a small JSON file named by the file's
SHA-256 (`<cache_dir>/onnx-signatures/`): the same bytes resolved again cost the hash alone, and
need no `onnx` import. An entry that cannot be read back is ignored and written anew.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlscope.contract.errors import UserError
from mlscope.contract.manifest import Manifest, parse_manifest
from mlscope.runtime.predictors.files import file_sha256

__all__ = [
    "GraphInput",
    "GraphSignature",
    "manifest_name",
    "onnx_file_manifest",
    "read_signature",
    "shapes_by_input",
    "signature_cache_path",
]

# ONNX TensorProto element types mlscope can feed, by number (onnx.TensorProto.FLOAT == 1, ...).
_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 6: "int32", 7: "int64", 9: "bool", 10: "float16",
           11: "float64", 16: "bfloat16"}  # fmt: skip
_DTYPE_NAMES = {1: "FLOAT", 2: "UINT8", 3: "INT8", 4: "UINT16", 5: "INT16", 6: "INT32", 7: "INT64",
                8: "STRING", 9: "BOOL", 10: "FLOAT16", 11: "DOUBLE", 12: "UINT32", 13: "UINT64",
                16: "BFLOAT16"}  # fmt: skip


@dataclass(frozen=True)
class GraphInput:
    """One input of a graph: its name, dtype, and each dimension's size (an int) or symbol (a
    string, "" when unnamed) for a dynamic axis."""

    name: str
    dtype: str
    dims: tuple[int | str, ...]

    def shape_text(self) -> str:
        return "x".join(str(d) if isinstance(d, int) else (d or "?") for d in self.dims)


@dataclass(frozen=True)
class GraphSignature:
    inputs: tuple[GraphInput, ...]
    outputs: tuple[str, ...]
    opset: int | None


# The kept signatures' directory under the cache directory, and their format: an entry of another
# format (an older mlscope's) is read afresh and replaced.
SIGNATURE_DIR = "onnx-signatures"
_SIGNATURE_FORMAT = 1
_SHA256 = re.compile(r"[0-9a-f]{64}")


def _fail(path: Path, problem: str) -> UserError:
    return UserError(f"{path}: {problem}", field="model")


def read_signature(path: Path) -> GraphSignature:
    """The inputs (initializers left out) and outputs of the ONNX graph at `path`.

    Raises:
        UserError: the file is missing or is not a valid ONNX model (corrupt, truncated), or an
            input is not a tensor of a dtype mlscope can feed (field "model").
    """
    try:
        import onnx
    except ImportError:
        raise UserError(
            "reading an ONNX file's inputs needs the onnx package: pip install 'mlscope[onnxruntime]'",
            field="model",
        ) from None
    if not path.is_file():
        raise _fail(path, "no such file" if not path.exists() else "not a file")
    try:
        model = onnx.load(str(path), load_external_data=False)
        onnx.checker.check_model(model)
    except Exception as exc:  # protobuf's DecodeError, onnx's ValidationError, ...
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise _fail(
            path,
            f"not a valid ONNX model ({reason[:200]}); expected a complete file saved by torch.onnx.export "
            "or onnx.save (a truncated copy fails here too)",
        ) from None
    graph = model.graph
    constant = {initializer.name for initializer in graph.initializer}
    inputs = []
    for value in graph.input:
        if value.name in constant:
            continue
        if not value.type.HasField("tensor_type"):
            raise _fail(path, f"input {value.name!r} is not a tensor; mlscope feeds tensor inputs only")
        tensor = value.type.tensor_type
        dtype = _DTYPES.get(tensor.elem_type)
        if dtype is None:
            kind = _DTYPE_NAMES.get(tensor.elem_type, str(tensor.elem_type))
            raise _fail(
                path, f"input {value.name!r} is of type {kind}; mlscope feeds {', '.join(_DTYPES.values())}"
            )
        dims = tuple(
            dim.dim_value if dim.HasField("dim_value") and dim.dim_value > 0 else dim.dim_param
            for dim in tensor.shape.dim
        )
        inputs.append(GraphInput(value.name, dtype, dims))
    if not inputs:
        raise _fail(path, "the graph has no inputs to feed")
    opset = next((entry.version for entry in model.opset_import if entry.domain in ("", "ai.onnx")), None)
    return GraphSignature(tuple(inputs), tuple(value.name for value in graph.output), opset)


def signature_cache_path(cache_dir: Path, sha256: str) -> Path:
    """Where the signature of the ONNX file of SHA-256 `sha256` is kept under `cache_dir`."""
    return cache_dir / SIGNATURE_DIR / f"{sha256}.json"


def _signature_document(signature: GraphSignature) -> dict[str, Any]:
    return {
        "format": _SIGNATURE_FORMAT,
        "inputs": [
            {"name": spec.name, "dtype": spec.dtype, "dims": list(spec.dims)} for spec in signature.inputs
        ],
        "outputs": list(signature.outputs),
        "opset": signature.opset,
    }


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _signature_from(document: object) -> GraphSignature | None:
    """The signature a kept entry holds; None for anything that is not one, in this format, as
    `read_signature` would have returned it."""
    if (
        not isinstance(document, dict)
        or not _is_int(document.get("format"))
        or document["format"] != _SIGNATURE_FORMAT
    ):
        return None
    inputs, outputs, opset = document.get("inputs"), document.get("outputs"), document.get("opset")
    if not isinstance(inputs, list) or not inputs or not isinstance(outputs, list):
        return None
    if not all(isinstance(name, str) for name in outputs) or not (opset is None or _is_int(opset)):
        return None
    specs = []
    for entry in inputs:
        if not isinstance(entry, dict):
            return None
        name, dtype, dims = entry.get("name"), entry.get("dtype"), entry.get("dims")
        if not isinstance(name, str) or not isinstance(dtype, str) or dtype not in _DTYPES.values():
            return None
        if not isinstance(dims, list):
            return None
        if not all(isinstance(dim, str) or (_is_int(dim) and dim > 0) for dim in dims):
            return None
        specs.append(GraphInput(name, dtype, tuple(dims)))
    return GraphSignature(tuple(specs), tuple(outputs), opset)


def _kept_signature(cache_dir: Path, sha256: str) -> GraphSignature | None:
    """The kept signature of the file of SHA-256 `sha256`; None when there is none or it cannot be
    read back (unreadable, not JSON, not a signature)."""
    try:
        text = signature_cache_path(cache_dir, sha256).read_text(encoding="utf-8")
        return _signature_from(json.loads(text))
    except (OSError, ValueError):
        return None


def _keep_signature(cache_dir: Path, sha256: str, signature: GraphSignature) -> None:
    """Writes the signature under `cache_dir` atomically (a temporary file renamed into place: a
    reader sees the whole entry or none). A cache that cannot be written is no error: the next
    resolution parses the graph again."""
    target = signature_cache_path(cache_dir, sha256)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{sha256[:16]}-", suffix=".tmp")
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as stream:
                json.dump(_signature_document(signature), stream)
            os.replace(temporary, target)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
    except OSError:
        pass


def _file_state(path: Path) -> tuple[int, int]:
    status = path.stat()
    return status.st_size, status.st_mtime_ns


def _read_then_hash(path: Path, sha256: str | None) -> tuple[GraphSignature, str]:
    """Signature, then digest: a missing or unreadable file is named by `read_signature`."""
    signature = read_signature(path)
    return signature, sha256 or file_sha256(path)


def _signature(path: Path, sha256: str | None, cache_dir: Path | None) -> tuple[GraphSignature, str]:
    """The signature of the ONNX file at `path` and its SHA-256 (`sha256` when given): the kept
    signature of that digest when `cache_dir` has one, else read from the graph and kept there. It
    is kept only when the file did not change while it was hashed and read, so that an entry always
    describes the bytes its name is the digest of.

    Raises:
        UserError: as `read_signature`.
    """
    if cache_dir is None or not path.is_file():
        return _read_then_hash(path, sha256)
    try:
        before = _file_state(path)
        digest = sha256 or file_sha256(path)
    except OSError:
        return _read_then_hash(path, sha256)
    if not _SHA256.fullmatch(digest):  # not a digest to name a file by: nothing kept
        return read_signature(path), digest
    kept = _kept_signature(cache_dir, digest)
    if kept is not None:
        return kept, digest
    signature = read_signature(path)
    if _file_state(path) == before:
        _keep_signature(cache_dir, digest, signature)
    return signature, digest


def _shape_for(path: Path, spec: GraphInput, given: Sequence[int] | None) -> tuple[int, ...]:
    """The per-sample shape (no batch axis) of input `spec`, from the graph and the given full shape."""
    if not spec.dims:
        raise _fail(path, f"input {spec.name!r} is a scalar; mlscope needs a batch axis first")
    if given is not None:
        if len(given) != len(spec.dims):
            raise _fail(
                path,
                f"input {spec.name!r} has {len(spec.dims)} dimensions ({spec.shape_text()}) in the graph; "
                f"--input-shape gives {len(given)} ({'x'.join(map(str, given))})",
            )
        for axis, (graph_dim, size) in enumerate(zip(spec.dims, given, strict=True)):
            if isinstance(graph_dim, int) and graph_dim != size:
                raise _fail(
                    path,
                    f"input {spec.name!r}: dimension {axis} is {graph_dim} in the graph "
                    f"({spec.shape_text()}); --input-shape gives {size}",
                )
        return tuple(given[1:])
    open_axes = [axis for axis, dim in enumerate(spec.dims[1:], start=1) if not isinstance(dim, int)]
    if open_axes:
        example = "x".join(str(d) if isinstance(d, int) else "N" for d in spec.dims)
        raise UserError(
            f"{path}: input {spec.name!r} has dynamic axes besides the batch axis ({spec.shape_text()}); "
            f"give their sizes: --input-shape {spec.name}={example.replace('N', '1', 1)} (replacing each N)",
            field="model_options.input_shapes",
        )
    return tuple(int(d) for d in spec.dims[1:])


def shapes_by_input(
    input_shapes: Mapping[str, Sequence[int]], names: Sequence[str], what: str
) -> dict[str, Sequence[int]]:
    """The given shapes by input name: "" (a model's only input) becomes that input's name.

    Raises:
        UserError: "" for a model of several inputs, or a name the model has no input of (field
            `model_options.input_shapes`).
    """
    shapes = dict(input_shapes)
    if "" in shapes:
        if len(names) != 1:
            raise UserError(
                f"{what} has {len(names)} inputs ({', '.join(names)}); name each shape: "
                f"--input-shape {names[0]}=...",
                field="model_options.input_shapes",
            )
        shapes[names[0]] = shapes.pop("")
    unknown = sorted(set(shapes) - set(names))
    if unknown:
        raise UserError(
            f"{what} has no input {unknown[0]!r}; its inputs are: {', '.join(names)}",
            field="model_options.input_shapes",
        )
    return shapes


def manifest_name(stem: str) -> str:
    """A manifest name made from a file or directory name: lowercase, other characters as '-'."""
    name = re.sub(r"[^a-z0-9_.-]+", "-", stem.lower()).strip("-._")
    return name or "model"


def onnx_file_manifest(
    path: Path,
    *,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    url: str | None = None,
    sha256: str | None = None,
    name: str | None = None,
    origin: str | None = None,
    filename: str | None = None,
    cache_dir: Path | None = None,
    framework: str = "onnxruntime",
) -> Manifest:
    """The manifest of the ONNX file at `path` for `framework` (one that runs ONNX sources).

    Args:
        path: the file.
        input_shapes: full shapes (batch axis first) by input name ("" for a graph's only input), for
            the dynamic axes after the first, or to check the graph's fixed ones.
        url: what the manifest names the file by (default: the file's absolute path).
        sha256: the file's SHA-256 when already known (default: computed here).
        name: the manifest's name (default: from the file's name).
        origin: where the manifest came from, for messages (default: the path).
        filename: what the file is called where it came from (an upload's original name; default:
            the path's).
        cache_dir: the mlscope cache directory, where the graph's signature is kept by the file's
            SHA-256 (see the module's docstring); None: the graph is parsed every time.
        framework: the framework the manifest is for (every framework that runs an `onnx` source
            runs the file itself).

    Raises:
        UserError: the file is missing or not a valid ONNX model, an input has no size for a
            dynamic axis, or a given shape does not match the graph.
    """
    path = path.expanduser()
    signature, digest = _signature(path, sha256, cache_dir)
    shapes = shapes_by_input(input_shapes or {}, [spec.name for spec in signature.inputs], str(path))
    batch_dims = {spec.dims[0] for spec in signature.inputs if spec.dims and isinstance(spec.dims[0], int)}
    fixed_batch = batch_dims.pop() if len(batch_dims) == 1 else None
    inputs = [
        {"name": spec.name, "dtype": spec.dtype, "shape": list(_shape_for(path, spec, shapes.get(spec.name)))}
        for spec in signature.inputs
    ]
    location = url or str(path.resolve())
    filename = filename or path.name
    attributes: dict[str, Any] = {"file": filename, "opset": signature.opset}
    if fixed_batch is not None:
        attributes["fixed_batch_size"] = fixed_batch
    document = {
        "name": name or manifest_name(path.stem),
        "version": "1.0",
        "task": "other",
        "description": (
            f"The ONNX graph {filename} (SHA-256 {digest[:12]}...), its inputs read from the graph; "
            "synthetic input values. The weights are the graph's own."
        ),
        "framework": {"name": framework, "version": "*"},
        "source": {"onnx": {"url": location, "sha256": digest}},
        "weights": {"url": location, "sha256": digest},
        "inputs": inputs,
        "outputs": [{"name": output} for output in signature.outputs],
        "attributes": attributes,
    }
    return parse_manifest(document, origin or str(path))
