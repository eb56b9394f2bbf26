"""The model manifest: its frozen dataclasses, its errors, and loading it from YAML.

A manifest says what model to build (source, weights), on which framework, what it takes and
returns (tensors with their pre/post-processing steps), and how to judge it (dataset, published
accuracy). It is validated once, here, by the marshmallow schema in `manifest_schema`; every error
names the file, the field as a dotted path and what was expected. The validated document is
normalised (defaults filled in, one spelling per choice) so that its SHA-256 identifies what the
manifest says, not how it is written.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import semantic_version
import yaml
from marshmallow import ValidationError

from mlscope.contract.errors import MARSHMALLOW_WORDING, UserError
from mlscope.contract.manifest_schema import SOURCE_KINDS, TASKS, _LoadOptions, _ManifestSchema
from mlscope.contract.steps import DTYPES

__all__ = [
    "DTYPES",
    "SOURCE_KINDS",
    "TASKS",
    "FrameworkRequirement",
    "Manifest",
    "ManifestError",
    "OutputSpec",
    "Source",
    "Step",
    "TensorSpec",
    "Weights",
    "load_manifest",
    "parse_manifest",
    "parse_manifest_text",
]


class ManifestError(UserError):
    """A manifest is not valid: one line per problem, each naming the file and the field.

    Args:
        origin: the file (or what the caller passed as origin).
        problems: (dotted field path, what was expected) pairs; an empty path means the whole file.
    """

    def __init__(self, origin: str, problems: Sequence[tuple[str, str]]) -> None:
        self.origin = origin
        self.problems = tuple(problems)
        lines = [f"{origin}: {path}: {text}" if path else f"{origin}: {text}" for path, text in self.problems]
        super().__init__("\n".join(lines), field=self.problems[0][0] if self.problems else None)


# ---- what a loaded manifest is ----------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One named pre/post-processing step with its validated parameters."""

    name: str
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TensorSpec:
    """A model input: per-sample shape (no batch axis), dtype, layout and preprocessing.

    `value_range` is [low, high) for synthetic data, e.g. token ids (0, 30522).
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    layout: str | None = None
    steps: tuple[Step, ...] = ()
    value_range: tuple[float, float] | None = None


@dataclass(frozen=True)
class OutputSpec:
    """A model output and its postprocessing."""

    name: str
    steps: tuple[Step, ...] = ()


@dataclass(frozen=True)
class Source:
    """Where the graph comes from, e.g. Source("torchvision", "resnet18", {})."""

    kind: str
    target: str
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Weights:
    """`random`, or a file at `url` whose SHA-256 is `sha256`."""

    kind: str
    url: str | None = None
    sha256: str | None = None


_RELEASE = re.compile(r"^\s*v?(\d+(?:\.\d+)*)")


@dataclass(frozen=True)
class FrameworkRequirement:
    """A framework name and a semantic-version constraint on it ("*" allows any version)."""

    name: str
    version: str = "*"

    def allows(self, installed: str) -> bool:
        """Whether an installed version satisfies the constraint.

        Local builds and pre-releases count as their release: "2.14.1+cu130" and
        "2.6.0.dev20241001" are 2.14.1 and 2.6.0.

        Args:
            installed: the framework's own version string (`torch.__version__`).

        Raises:
            UserError: `installed` does not start with a version number.
        """
        match = _RELEASE.match(installed)
        if match is None:
            raise UserError(
                f"framework {self.name!r}: installed version {installed!r} is not a version number",
                field="framework.version",
            )
        release = [int(part) for part in match.group(1).split(".")][:3]
        release += [0] * (3 - len(release))
        version = semantic_version.Version(major=release[0], minor=release[1], patch=release[2])
        return semantic_version.SimpleSpec(self.version).match(version)


@dataclass(frozen=True)
class Manifest:
    """A validated manifest. Build it with `load_manifest` or `parse_manifest`, never directly."""

    name: str
    version: str
    task: str
    description: str
    framework: FrameworkRequirement
    source: Source
    weights: Weights
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[OutputSpec, ...]
    dataset: dict[str, Any] | None
    attributes: dict[str, Any]
    origin: str
    document: dict[str, Any]
    sha256: str

    @property
    def key(self) -> tuple[str, str]:
        """(model name, framework name): what the registry looks manifests up by."""
        return self.name, self.framework.name

    def to_dict(self) -> dict[str, Any]:
        """The validated, normalised document: the snapshot stored with a result (a copy)."""
        return copy.deepcopy(self.document)


# ---- errors -----------------------------------------------------------------------------------

# marshmallow's stock wording, in the voice of the rest of the messages (step schemas use it).
_REWORDED = {
    **MARSHMALLOW_WORDING,
    "Not a valid mapping type.": "must be a mapping",
    "Invalid input type.": "must be a mapping",
}


def _flatten(messages: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], str]]:
    if isinstance(messages, Mapping):
        found = []
        for key, value in messages.items():
            found += _flatten(value, path if key == "_schema" else (*path, str(key)))
        return found
    if isinstance(messages, list):
        return [item for message in messages for item in _flatten(message, path)]
    return [(path, _REWORDED.get(str(messages), str(messages)))]


_MISSING = object()


def _value_at(document: Any, path: Sequence[str]) -> Any:
    for part in path:
        if isinstance(document, Mapping) and part in document:
            document = document[part]
        elif isinstance(document, list) and part.isdigit() and int(part) < len(document):
            document = document[int(part)]
        else:
            return _MISSING
    return document


def _show(value: Any) -> str:
    text = repr(value) if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def _problems(messages: Any, document: Any) -> list[tuple[str, str]]:
    problems = []
    for path, text in _flatten(messages):
        value = _value_at(document, path)
        shown = "" if value is _MISSING else _show(value)
        # A message that already quotes the offending string needs no "got".
        repeated = isinstance(value, str) and shown in text
        if shown and not repeated and "got " not in text and not text.startswith(("unknown", "required")):
            text = f"{text}; got {shown}"
        problems.append((".".join(path), text))
    return problems


# ---- building ---------------------------------------------------------------------------------


def _steps(entries: Sequence[Mapping[str, Any]]) -> tuple[Step, ...]:
    return tuple(Step(name, dict(params)) for entry in entries for name, params in entry.items())


def _source(normalised: Mapping[str, Any]) -> Source:
    kind, spec = next(iter(normalised.items()))
    if kind == "python" and isinstance(spec, Mapping):
        return Source(
            kind,
            spec["factory"],
            {"kwargs": spec["kwargs"], **({"sha256": spec["sha256"]} if "sha256" in spec else {})},
        )
    if kind == "transformers":
        options = {"config": spec["config"], "output": spec["output"]}
        return Source(
            kind,
            spec["model_type"],
            {**options, **{k: spec[k] for k in ("directory", "sha256") if k in spec}},
        )
    if kind == "onnx":
        return Source(kind, spec["url"], {"sha256": spec["sha256"]})
    return Source(kind, spec, {})


def _tensor(spec: Mapping[str, Any]) -> TensorSpec:
    value_range = spec["value_range"]
    return TensorSpec(
        name=spec["name"],
        shape=tuple(spec["shape"]),
        dtype=spec["dtype"],
        layout=spec["layout"],
        steps=_steps(spec["steps"]),
        value_range=None if value_range is None else (value_range[0], value_range[1]),
    )


def _weights(normalised: Any) -> Weights:
    return (
        Weights("random")
        if normalised == "random"
        else Weights("url", normalised["url"], normalised["sha256"])
    )


def _build(document: dict[str, Any], origin: str) -> Manifest:
    canonical = json.dumps(
        document, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    # The dataclasses get their own copy, so changing one never changes the stored document.
    parts = copy.deepcopy(document)
    return Manifest(
        name=parts["name"],
        version=parts["version"],
        task=parts["task"],
        description=parts["description"],
        framework=FrameworkRequirement(parts["framework"]["name"], parts["framework"]["version"]),
        source=_source(parts["source"]),
        weights=_weights(parts["weights"]),
        inputs=tuple(_tensor(spec) for spec in parts["inputs"]),
        outputs=tuple(OutputSpec(spec["name"], _steps(spec["steps"])) for spec in parts["outputs"]),
        dataset=parts["dataset"],
        attributes=parts["attributes"],
        origin=origin,
        document=document,
        sha256=hashlib.sha256(canonical.encode("utf-8")).hexdigest(),
    )


def parse_manifest(
    document: Mapping[str, Any], origin: str, *, allow_code: bool = True, base_dir: Path | None = None
) -> Manifest:
    """Validate a manifest document (already parsed from YAML or JSON).

    Args:
        document: the manifest as a mapping.
        origin: where it came from (a file path, "request body"): the first word of every error.
        allow_code: False for manifests from the network: refuses `source: {python: ...}` and
            local file paths in `source.onnx.url` / `weights.url`.
        base_dir: the directory relative file paths are resolved against (the manifest's own).

    Returns:
        The validated manifest.

    Raises:
        ManifestError: the document is not a valid manifest; lists every problem.
    """
    if not isinstance(document, Mapping):
        kind = "nothing (the file is empty)" if document is None else f"a {type(document).__name__}"
        raise ManifestError(
            origin, [("", f"must be a mapping of manifest fields (name, version, ...); got {kind}")]
        )
    schema = _ManifestSchema(_LoadOptions(allow_code=allow_code, base_dir=base_dir))
    try:
        normalised = schema.load(document)
    except ValidationError as exc:
        raise ManifestError(origin, _problems(exc.messages, document)) from None
    return _build(normalised, origin)


# libyaml's parser when PyYAML was built with it (ten times faster: every process that lists the
# models reads every manifest); the same safe constructor either way.
_SafeLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _UniqueKeyLoader(_SafeLoader):  # type: ignore[valid-type,misc]
    """PyYAML keeps the last of two equal keys; in a manifest that hides a mistake."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[tuple[str, str]] = set()
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue
            if (key_node.tag, key_node.value) in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key_node.value!r}", key_node.start_mark
                )
            seen.add((key_node.tag, key_node.value))
        return super().construct_mapping(node, deep=deep)


def parse_manifest_text(
    text: str, origin: str, *, allow_code: bool = True, base_dir: Path | None = None
) -> Manifest:
    """Parse YAML (or JSON) text and validate it as a manifest; arguments as for `parse_manifest`.

    Raises:
        ManifestError: the text is not YAML (names the line and column) or not a valid manifest.
    """
    try:
        document = yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        raise ManifestError(origin, [("", f"{where}not valid YAML: {exc.problem or exc.context}")]) from None
    except yaml.YAMLError as exc:
        raise ManifestError(origin, [("", f"not valid YAML: {exc}")]) from None
    return parse_manifest(document, origin, allow_code=allow_code, base_dir=base_dir)


def load_manifest(path: Path, *, allow_code: bool = True) -> Manifest:
    """Load and validate one manifest file; relative paths in it are relative to its directory.

    Args:
        path: a .yaml/.yml file.
        allow_code: as for `parse_manifest` (files on this machine may name Python factories).

    Returns:
        The manifest, with `origin` set to `str(path)`.

    Raises:
        ManifestError: the file cannot be read, is not YAML, or is not a valid manifest.
    """
    origin = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ManifestError(origin, [("", f"cannot read the manifest: {exc}")]) from None
    return parse_manifest_text(text, origin, allow_code=allow_code, base_dir=Path(path).parent)
