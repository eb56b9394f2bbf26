"""The manifest schema: the marshmallow fields and schemas that validate and normalise a manifest.

It owns the constants the schema checks against (`TASKS`, `SOURCE_KINDS`; `DTYPES` comes from
`mlscope.contract.steps`), the load options (`_LoadOptions`) and `_ManifestSchema` with its nested
schemas and field types. `mlscope.contract.manifest` loads documents with it, turns its messages
into `ManifestError`s and builds the dataclasses from what it returns.
"""

from __future__ import annotations

import copy
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import semantic_version
from marshmallow import EXCLUDE, Schema, ValidationError, fields, validate, validates_schema

from mlscope.contract.steps import DTYPES, STEPS, steps_for

TASKS = (
    "image_classification",
    "object_detection",
    "semantic_segmentation",
    "text_embedding",
    "text_classification",
    "other",
)

SOURCE_KINDS = (
    "torchvision",
    "timm",
    "transformers",
    "keras_applications",
    "gluon",
    "onnx",
    "python",
    # A model served behind an OpenAI-compatible endpoint (its base URL): measured, never loaded here.
    "served",
)


# ---- schema: fields ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _LoadOptions:
    allow_code: bool = True
    base_dir: Path | None = None


def _options(owner: fields.Field) -> _LoadOptions:
    return getattr(owner.root, "load_options", _LoadOptions())


class _Strict(Schema):
    """Unknown keys are errors that list the keys this mapping does take."""

    class Meta:
        unknown = EXCLUDE

    def __init__(self, load_options: _LoadOptions | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.error_messages = {**self.error_messages, "type": "must be a mapping"}
        self.load_options = load_options or _LoadOptions()

    @validates_schema(pass_original=True, skip_on_field_errors=False)
    def _reject_unknown_keys(self, data: Any, original_data: Any, **kwargs: Any) -> None:
        if not isinstance(original_data, Mapping):
            return
        unknown = [key for key in original_data if key not in self.load_fields]
        if unknown:
            expected = f"unknown field; expected one of: {', '.join(self.load_fields)}"
            raise ValidationError({str(key): [expected] for key in unknown})


def _pattern(regex: str, expected: str) -> validate.Regexp:
    return validate.Regexp(regex, error=f"must be {expected}")


def _one_of(choices: Sequence[str]) -> validate.OneOf:
    return validate.OneOf(choices, error="must be one of {choices}")


_PY_NAME = r"[A-Za-z_][A-Za-z0-9_]*"


class _VersionText(fields.String):
    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> str:
        if not isinstance(value, str):
            raise ValidationError(f'must be a string; quote numbers in YAML ({attr}: "1.0")')
        return super()._deserialize(value, attr, data, **kwargs)


def _semver_constraint(value: str) -> None:
    try:
        semantic_version.SimpleSpec(value)
    except ValueError:
        raise ValidationError(
            "must be a version constraint such as '>=2.0,<3', '^1.16', '~2.1' or '*'"
        ) from None


class _Sha256(fields.String):
    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> str:
        if not isinstance(value, str) or not re.fullmatch(r"[0-9a-fA-F]{64}", value):
            raise ValidationError("must be a SHA-256 digest: 64 hexadecimal digits")
        return value.lower()


_UPLOADED = re.compile(r"^sha256:[0-9a-f]{64}$")


class _Location(fields.String):
    """An http(s):// or file:// URL, a file path (resolved against the manifest's directory), or an
    uploaded model's `sha256:<hex>` (a farm's workers fetch it from the API, so remote requests may
    name it too)."""

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> str:
        text = super()._deserialize(value, attr, data, **kwargs)
        if _UPLOADED.match(text):
            return text
        scheme = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*)://", text)
        options = _options(self)
        if not options.allow_code and (scheme is None or scheme.group(1).lower() not in ("http", "https")):
            raise ValidationError(
                "must be an http:// or https:// URL here: local files are not read for remote requests"
            )
        if scheme is None:
            if not text:
                raise ValidationError("must be a URL or a file path")
            if options.base_dir is not None and not os.path.isabs(text):
                return os.path.abspath(os.path.join(options.base_dir, text))
            return text
        if scheme.group(1).lower() not in ("http", "https", "file"):
            raise ValidationError("must be an http://, https:// or file:// URL, or a file path")
        return text


def _json_problem(value: Any) -> dict[Any, Any] | list[str] | None:
    """The first value that JSON cannot hold, as a marshmallow message tree, or None."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                return {str(key): ["keys must be strings"]}
            problem = _json_problem(item)
            if problem is not None:
                return {key: problem}
        return None
    if isinstance(value, list):
        for index, item in enumerate(value):
            problem = _json_problem(item)
            if problem is not None:
                return {index: problem}
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return ["must be a finite number"]
    if value is None or isinstance(value, (str, int, float, bool)):
        return None
    return [f"must be a string, number, boolean, list or mapping (not {type(value).__name__})"]


class _JsonMapping(fields.Field):
    """A free-form mapping that survives the round trip through JSON (the stored snapshot)."""

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> dict[str, Any]:
        if not isinstance(value, Mapping):
            raise ValidationError("must be a mapping")
        problem = _json_problem(value)
        if problem is not None:
            raise ValidationError(problem)
        return copy.deepcopy(dict(value))


class _Dataset(_JsonMapping):
    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> dict[str, Any]:
        mapping = super()._deserialize(value, attr, data, **kwargs)
        for key in ("name", "split"):
            if key in mapping and not (isinstance(mapping[key], str) and mapping[key]):
                raise ValidationError({key: ["must be a non-empty string"]})
        if "name" not in mapping:
            raise ValidationError({"name": ["required field is missing"]})
        return mapping


class _Attributes(_JsonMapping):
    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> dict[str, Any]:
        mapping = super()._deserialize(value, attr, data, **kwargs)
        for key in ("top1", "top5"):
            score = mapping.get(key, 0)
            if isinstance(score, bool) or not isinstance(score, (int, float)) or not 0 <= score <= 100:
                raise ValidationError({key: ["must be a percentage between 0 and 100"]})
        return mapping


class _StepField(fields.Field):
    """`name` or `{name: {params}}`, checked against the step registry and the step's own schema."""

    def __init__(self, stage: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.stage = stage

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> dict[str, Any]:
        raw: Any
        if isinstance(value, str):
            name, raw = value, {}
        elif isinstance(value, Mapping) and len(value) == 1 and isinstance(next(iter(value)), str):
            name, raw = next(iter(value.items()))
            raw = {} if raw is None else raw
        else:
            raise ValidationError("must be a step name or a single-key mapping {name: {parameters}}")
        stage_word = "preprocessing" if self.stage == "pre" else "postprocessing"
        definition = STEPS.get(name)
        if definition is None or definition.stage != self.stage:
            known = f"{stage_word} steps: {', '.join(steps_for(self.stage))}"
            if definition is None:
                raise ValidationError(f"unknown {stage_word} step {name!r}; known {known}")
            raise ValidationError(f"{name!r} is a {definition.stage}processing step; {known}")
        if not isinstance(raw, Mapping):
            raise ValidationError({name: ["must be a mapping of parameters"]})
        try:
            params = definition.schema.load(raw)
        except ValidationError as exc:
            takes = ", ".join(definition.schema.load_fields) or "no parameters"
            messages = exc.messages if isinstance(exc.messages, dict) else {"_schema": exc.messages}
            for key, text in messages.items():
                if text == ["Unknown field."]:
                    messages[key] = [f"unknown parameter; {name} takes: {takes}"]
            raise ValidationError({name: messages}) from None
        return {name: params}


_FACTORY = re.compile(rf"^(?:{_PY_NAME}(\.{_PY_NAME})*|(?P<file>.+\.py)):{_PY_NAME}(\.{_PY_NAME})*$")


class _Factory(fields.String):
    """`pkg.module:factory`, or `path/to/file.py:factory` (resolved against the manifest's directory)."""

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> str:
        text = super()._deserialize(value, attr, data, **kwargs)
        match = _FACTORY.match(text)
        if match is None:
            raise ValidationError("must be 'pkg.module:factory' or 'path/to/file.py:factory'")
        options = _options(self)
        file = match.group("file")
        if file is not None and options.base_dir is not None and not os.path.isabs(file):
            return os.path.abspath(os.path.join(options.base_dir, file)) + text[len(file) :]
        return text


class _PythonSource(_Strict):
    factory = _Factory(required=True)
    kwargs = _JsonMapping(load_default=dict)
    # The SHA-256 of the factory's file, for a `file.py:factory` (checked before it is imported).
    sha256 = _Sha256(load_default=None)


class _LocalDirectory(fields.String):
    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> str:
        text = super()._deserialize(value, attr, data, **kwargs)
        options = _options(self)
        if not options.allow_code:
            raise ValidationError("local directories are not read for remote requests")
        if not text:
            raise ValidationError("must be a directory path")
        if options.base_dir is not None and not os.path.isabs(text):
            return os.path.abspath(os.path.join(options.base_dir, text))
        return text


class _TransformersSource(_Strict):
    model_type = fields.String(
        required=True, validate=_pattern(r"^[a-z0-9][a-z0-9_-]*$", "a model type such as 'bert'")
    )
    config = _JsonMapping(load_default=dict)
    output = fields.String(required=True, validate=validate.Length(min=1, error="must not be empty"))
    # A `save_pretrained` directory (config.json and weights) the model is loaded from, and the
    # SHA-256 of its files (see the registry's references); without it, built from `config`.
    directory = _LocalDirectory(load_default=None)
    sha256 = _Sha256(load_default=None)


class _OnnxSource(_Strict):
    url = _Location(required=True)
    sha256 = _Sha256(required=True)


_NAMED_SOURCE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")


class _SourceField(fields.Field):
    """`{kind: target}`; normalised to one spelling per kind (see Source)."""

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> dict[str, Any]:
        if not isinstance(value, Mapping) or len(value) != 1:
            raise ValidationError(
                f"must be a single-key mapping {{kind: target}}, kind one of {', '.join(SOURCE_KINDS)}"
            )
        kind, spec = next(iter(value.items()))
        if kind not in SOURCE_KINDS:
            raise ValidationError(
                {str(kind): [f"unknown source kind; expected one of {', '.join(SOURCE_KINDS)}"]}
            )
        options = _options(self)
        if kind == "python" and not options.allow_code:
            raise ValidationError(
                {kind: ["code references are not accepted here: no code strings travel over the wire"]}
            )
        try:
            return {kind: self._normalise(kind, spec, options)}
        except ValidationError as exc:
            raise ValidationError({kind: exc.messages}) from None

    @staticmethod
    def _normalise(kind: str, spec: Any, options: _LoadOptions) -> Any:
        if kind in ("torchvision", "timm", "keras_applications", "gluon"):
            # A bare name: no "hf-hub:..." reference, so a timm model is never fetched from a hub.
            if not isinstance(spec, str) or not _NAMED_SOURCE.match(spec):
                raise ValidationError(f"must be a model name from {kind} (e.g. resnet18)")
            return spec
        if kind == "python":
            loaded = _PythonSource(options).load({"factory": spec} if isinstance(spec, str) else spec)
            if loaded["sha256"] is None:
                del loaded["sha256"]
            return (
                loaded["factory"] if set(loaded) == {"factory", "kwargs"} and not loaded["kwargs"] else loaded
            )
        if kind == "served":
            if not isinstance(spec, str) or not re.match(r"^https?://\S+$", spec):
                raise ValidationError(
                    "must be an endpoint's http(s) base URL (e.g. http://127.0.0.1:8000/v1)"
                )
            return spec
        if kind == "transformers":
            loaded = _TransformersSource(options).load(spec)
            return {key: value for key, value in loaded.items() if value is not None}
        return _OnnxSource(options).load(spec)


class _Weights(_Strict):
    url = _Location(required=True)
    sha256 = _Sha256(required=True)


class _WeightsField(fields.Field):
    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> Any:
        if value == "random":
            return value
        if not isinstance(value, Mapping):
            raise ValidationError("must be 'random' or a mapping {url, sha256}")
        return _Weights(_options(self)).load(value)


def _unique_names(data: Mapping[str, Any], key: str) -> None:
    names = [item["name"] for item in data.get(key) or () if "name" in item]
    for index, name in enumerate(names):
        if name in names[:index]:
            raise ValidationError({key: {index: {"name": [f"must be unique; {name!r} is used twice"]}}})


_TENSOR_NAME = _pattern(r"^\S+$", "a tensor name without spaces")


class _InputSchema(_Strict):
    name = fields.String(required=True, validate=_TENSOR_NAME)
    shape = fields.List(
        fields.Integer(
            strict=True, validate=validate.Range(min=1, error="must be ≥ 1 (per-sample size; no batch axis)")
        ),
        required=True,
        validate=validate.Length(min=1, error="must list at least one dimension"),
    )
    dtype = fields.String(required=True, validate=_one_of(DTYPES))
    layout = fields.String(
        load_default=None,
        allow_none=True,
        validate=_pattern(r"^N[A-Z]+$", "axis letters starting with N (NCHW, NT)"),
    )
    steps = fields.List(_StepField("pre"), load_default=list)
    value_range = fields.List(
        fields.Float(allow_nan=False),
        load_default=None,
        allow_none=True,
        validate=validate.Length(equal=2, error="must be [low, high]"),
    )

    @validates_schema(pass_original=True, skip_on_field_errors=False)
    def _check_layout_and_range(self, data: dict[str, Any], original: Any, **kwargs: Any) -> None:
        # Runs despite other fields' errors (a list field may hold only its valid items then),
        # so the number of dimensions is read from what was written.
        if not isinstance(original, Mapping):
            return
        problems: dict[str, list[str]] = {}
        layout, value_range = data.get("layout"), data.get("value_range")
        shape = original.get("shape")
        if layout is not None and len(layout) != len(set(layout)):
            problems["layout"] = ["must not repeat an axis letter"]
        elif layout is not None and isinstance(shape, list) and len(layout) != len(shape) + 1:
            problems["layout"] = [
                f"must have one letter per dimension of shape plus N ({len(shape) + 1} letters)"
            ]
        if value_range is not None and not value_range[0] < value_range[1]:
            problems["value_range"] = ["must be [low, high] with low < high"]
        if problems:
            raise ValidationError(problems)


class _OutputSchema(_Strict):
    name = fields.String(required=True, validate=_TENSOR_NAME)
    steps = fields.List(_StepField("post"), load_default=list)


class _ManifestSchema(_Strict):
    name = fields.String(
        required=True,
        # One optional namespace prefix: catalogue models are named "torchvision:resnet18", "hf:bert".
        validate=_pattern(
            r"^[a-z0-9][a-z0-9_.-]*(:[a-z0-9][a-z0-9_.-]*)?$",
            "lowercase letters, digits, '_', '.' or '-', starting with a letter or digit, "
            "with at most one 'namespace:' prefix",
        ),
    )
    version = _VersionText(
        required=True, validate=_pattern(r"^[0-9A-Za-z][0-9A-Za-z.+_-]*$", "a version such as '1.0'")
    )
    task = fields.String(required=True, validate=_one_of(TASKS))
    description = fields.String(load_default="")
    framework = fields.Nested(lambda: _FrameworkSchema(), required=True)
    source = _SourceField(required=True)
    weights = _WeightsField(required=True)
    inputs = fields.List(
        fields.Nested(lambda: _InputSchema()),
        required=True,
        validate=validate.Length(min=1, error="must list at least one input"),
    )
    outputs = fields.List(
        fields.Nested(lambda: _OutputSchema()),
        required=True,
        validate=validate.Length(min=1, error="must list at least one output"),
    )
    dataset = _Dataset(load_default=None, allow_none=True)
    attributes = _Attributes(load_default=dict)

    @validates_schema(skip_on_field_errors=False)
    def _check_unique_tensor_names(self, data: dict[str, Any], **kwargs: Any) -> None:
        _unique_names(data, "inputs")
        _unique_names(data, "outputs")


class _FrameworkSchema(_Strict):
    name = fields.String(
        required=True, validate=_pattern(r"^[a-z][a-z0-9_]*$", "a lowercase framework name such as 'pytorch'")
    )
    version = fields.String(load_default="*", validate=_semver_constraint)
