"""What a stored evaluation measured, beyond where and on what: its display name (the model with its
overrides, `hf:gpt2[n_layer=2]`) and the workload differences between two evaluations, which make a
comparison of their latencies one of unlike things (docs/verdicts.md, "Like with like").

A verdict compares two runs of one workload: the same model definition with the same options, fed
the same inputs under the same load. What a user compares on purpose — the framework and its version,
the system, the device, the runner — is not a difference here, nor is a setting that only changes how
precisely the same workload is measured (durations, sample counts, warm-up, seeds, confidence). Both
functions read the evaluation document the store returns (its `model`, `framework`, `manifest` and
`request`), so they apply to every stored result, old ones included: a setting a request left out
reads as its default.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from mlscope.contract.trace import trace_identity

__all__ = ["Difference", "display_name", "model_options", "workload_differences", "workload_key"]

# The load settings that change the load itself (the rate, the queries, what a search looks for);
# confidence, resolution and seed only change how surely or precisely it is measured.
_LOAD_WORKLOAD = (
    "qps",
    "max_in_flight",
    "samples_per_query",
    "interval_ms",
    "back_to_back",
    "find_max_qps",
    "latency_bound_ms",
    "percentile",
)
# The generation settings that change the requests sent. The endpoint is the server measured and
# endpoint_model the name it knows the model by (a comparison of two servers is on purpose, like one
# of two frameworks; the model itself is the evaluation's); requests, warm-up, timeout, slo and
# compare_served change how much is measured or what else is reported, not the requests.
_GENERATION_WORKLOAD = ("prompt_tokens", "output_tokens", "concurrency", "api", "ignore_eos")
# ... and those that count only where a request set them to other than their default, so that a
# result from before they existed keys as it did: a pooling API's inputs per request, a replayed trace
# and its speed, conversations and their think time, shared prefixes.
_GENERATION_WHERE_SET: dict[str, Any] = {
    "inputs_per_request": 1,
    "trace": None,
    "trace_speed": 1.0,
    "turns": 1,
    "think_time_ms": 0.0,
    "shared_prefix_tokens": 0,
    "prefix_groups": 1,
}
# The load settings that count only where a request set them (a generate sweep's setting and values),
# so that a result from before they existed keys as it did.
_LOAD_WHERE_SET: dict[str, Any] = {"sweep": None}
# Settings compared by what names them rather than whole: a trace by its file's name, SHA-256 and
# line count (its thousands of arrivals and lengths would be the difference's text otherwise).
_WORKLOAD_VIEWS = {("generation", "trace"): trace_identity}
# The scenarios each request section applies to: a section's differences count only when a scenario
# it shapes is compared.
_LOAD_SCENARIOS = frozenset({"server", "multi_stream", "generate"})
_GENERATION_SCENARIOS = frozenset({"generate"})
# Measurement settings that change the workload rather than its precision: the offline scenario's
# threads issuing batches at once (MeasureSettings.concurrency).
_MEASURE_WORKLOAD = {"concurrency": 1}
_MEASURE_SCENARIOS = frozenset({"offline"})


@dataclass(frozen=True)
class Difference:
    """One way two evaluations measured different workloads: the field (a dotted path in the request,
    or `model`, `model version`, `manifest`), each side's value (None: unset) and the line that says so."""

    field: str
    a: Any
    b: Any

    @property
    def text(self) -> str:
        return self.said()

    def said(self, a: str = "A", b: str = "B") -> str:
        """The difference in one line, its sides named `a` and `b`."""
        return f"{self.field}: {_shown(self.a)} ({a}) vs {_shown(self.b)} ({b})"

    def to_dict(self, a: str = "A", b: str = "B") -> dict[str, Any]:
        return {"field": self.field, "a": self.a, "b": self.b, "text": self.said(a, b)}


def _shown(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def _request(evaluation: Mapping[str, Any]) -> Mapping[str, Any]:
    request = evaluation.get("request")
    return request if isinstance(request, Mapping) else {}


def model_options(evaluation: Mapping[str, Any]) -> dict[str, Any]:
    """The model options (`--config`, `--input-shape`, `--input-dtype`, `--weights`) the evaluation's
    model was resolved with: the request's, else those its manifest snapshot records; {} for none."""
    options = _request(evaluation).get("model_options")
    if not options:
        manifest = evaluation.get("manifest")
        attributes = manifest.get("attributes") if isinstance(manifest, Mapping) else None
        options = attributes.get("model_options") if isinstance(attributes, Mapping) else None
    return {key: value for key, value in dict(options or {}).items() if value not in (None, {}, [], "")}


def _flat(prefix: str, value: Any) -> dict[str, Any]:
    """A nested mapping as {dotted path: leaf}; an empty key ("" for a model's only input) is left out
    of the path."""
    if not isinstance(value, Mapping):
        return {prefix: value}
    flat: dict[str, Any] = {}
    for key, inner in value.items():
        flat.update(_flat(f"{prefix}.{key}" if key else prefix, inner))
    return flat


def _override_parts(options: Mapping[str, Any]) -> list[str]:
    parts = [f"{key}={_shown(value)}" for key, value in (options.get("config") or {}).items()]
    for key, label in (("input_shapes", "shape"), ("input_dtypes", "dtype")):
        for name, value in (options.get(key) or {}).items():
            shown = "x".join(str(n) for n in value) if isinstance(value, list | tuple) else str(value)
            parts.append(f"{label}{'.' + name if name else ''}={shown}")
    weights = options.get("weights")
    if weights:
        parts.append(f"weights={str(weights).replace(chr(92), '/').rsplit('/', 1)[-1]}")
    return parts


def display_name(evaluation: Mapping[str, Any]) -> str:
    """The model as users read it: its stored name, with the options it was resolved with in brackets
    (`hf:gpt2[n_layer=2]`, `model.onnx[shape=1x3x256x256]`); the bare name when it has none. Derived:
    the stored `model.name` stays the catalogue's name, which filters and series key on."""
    name = str((evaluation.get("model") or {}).get("name") or "?")
    parts = _override_parts(model_options(evaluation))
    return f"{name}[{','.join(parts)}]" if parts else name


def _section(request: Mapping[str, Any], key: str, defaults: Mapping[str, Any]) -> dict[str, Any]:
    given = request.get(key)
    given = given if isinstance(given, Mapping) else {}
    section = {name: given.get(name, default) for name, default in defaults.items()}
    for (where, name), view in _WORKLOAD_VIEWS.items():
        if where == key and name in section:
            section[name] = view(section[name])
    return section


def _defaults(settings: Any, names: Iterable[str]) -> dict[str, Any]:
    every = settings().to_dict()
    return {name: every[name] for name in names}


def _scenarios(evaluation: Mapping[str, Any]) -> set[str]:
    measured = {str(m.get("scenario")) for m in evaluation.get("measurements") or []}
    return measured or {str(s) for s in _request(evaluation).get("scenarios") or []}


def _manifest_differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[Difference]:
    """The model itself: name, version and manifest. The manifest's hash is compared only between
    evaluations on one framework (each framework has a manifest of its own for one model); across
    frameworks its inputs and weights are, the parts that define the workload."""
    model_a, model_b = a.get("model") or {}, b.get("model") or {}
    found = [
        Difference(label, model_a.get(key), model_b.get(key))
        for label, key in (("model", "name"), ("model version", "version"))
        if model_a.get(key) != model_b.get(key)
    ]
    if found:
        return found
    same_framework = (a.get("framework") or {}).get("name") == (b.get("framework") or {}).get("name")
    hash_a, hash_b = model_a.get("manifest_sha256"), model_b.get("manifest_sha256")
    if same_framework:
        if hash_a and hash_b and hash_a != hash_b:
            return [Difference("model manifest", f"sha256 {hash_a[:12]}", f"sha256 {hash_b[:12]}")]
        return []
    manifest_a, manifest_b = a.get("manifest") or {}, b.get("manifest") or {}
    inputs_a, inputs_b = _inputs(manifest_a), _inputs(manifest_b)
    if inputs_a and inputs_b and _input_key(inputs_a) != _input_key(inputs_b):
        found.append(Difference("model inputs", ", ".join(inputs_a), ", ".join(inputs_b)))
    weights_a, weights_b = manifest_a.get("weights"), manifest_b.get("weights")
    if weights_a is not None and weights_b is not None and weights_a != weights_b:
        found.append(Difference("model weights", weights_a, weights_b))
    return found


def _inputs(manifest: Mapping[str, Any]) -> list[str]:
    """The manifest's inputs as `float32 3x224x224`, in its order."""
    inputs = manifest.get("inputs")
    return [
        f"{spec.get('dtype')} {'x'.join(str(n) for n in spec.get('shape') or [])}"
        for spec in (inputs if isinstance(inputs, list) else [])
        if isinstance(spec, Mapping)
    ]


def _input_key(inputs: list[str]) -> list[tuple[str, list[int]]]:
    """Inputs compared across frameworks: dtype and dimensions, whatever their names and order (one
    framework's NCHW image is another's NHWC)."""
    keys = []
    for text in inputs:
        dtype, _, shape = text.partition(" ")
        keys.append((dtype, sorted(int(n) for n in shape.split("x") if n.lstrip("-").isdigit())))
    return sorted(keys)


def workload_differences(
    a: Mapping[str, Any], b: Mapping[str, Any], *, scenarios: Iterable[str] | None = None
) -> list[Difference]:
    """How evaluations A and B measured different workloads, one Difference each; [] when alike.

    Compared: the model (name, version, manifest; see `_manifest_differences`), its options (each
    `--config` key, input shape and dtype, the weights), the predictor options (threads, graph
    optimisation, execution providers, input pool, brick; a framework option other than its default:
    a compile mode other than `none`, an OpenVINO hint or precision), the
    dataset, and where a compared scenario
    uses them the load settings (rate, queries in flight, multi_stream's query shape, a latency
    search's bound and percentile), the generation settings (prompt and output lengths, concurrency,
    api, ignore_eos, and where set a pooling API's inputs per request, a replayed trace by name,
    SHA-256 and lines and its speed, turns and think time, shared prefixes) and offline's
    concurrency. A manifest hash that differs because the model options do is not named twice.

    Args:
        a, b: evaluations as the store returns them.
        scenarios: the scenarios being compared (a section applies only to its scenarios); None for
            those both measured.
    """
    compared = set(scenarios) if scenarios is not None else _scenarios(a) & _scenarios(b)
    options_a, options_b = _flat("model_options", model_options(a)), _flat("model_options", model_options(b))
    found = [
        Difference(key, options_a.get(key), options_b.get(key))
        for key in sorted(options_a.keys() | options_b.keys())
        if options_a.get(key) != options_b.get(key)
    ]
    found = [d for d in _manifest_differences(a, b) if not (found and d.field == "model manifest")] + found
    request_a, request_b = _request(a), _request(b)
    for key, defaults in _sections(compared):
        section_a, section_b = _section(request_a, key, defaults), _section(request_b, key, defaults)
        found += [
            Difference(f"{key}.{name}", _plain(section_a[name]), _plain(section_b[name]))
            for name in defaults
            if _plain(section_a[name]) != _plain(section_b[name])
        ]
    if compared & _LOAD_SCENARIOS:
        load_a, load_b = (
            _where_set(request_a, "load", _LOAD_WHERE_SET),
            _where_set(request_b, "load", _LOAD_WHERE_SET),
        )
        found += [
            Difference(f"load.{name}", load_a.get(name, default), load_b.get(name, default))
            for name, default in _LOAD_WHERE_SET.items()
            if load_a.get(name, default) != load_b.get(name, default)
        ]
    if compared & _GENERATION_SCENARIOS:
        set_a, set_b = _generation_where_set(request_a), _generation_where_set(request_b)
        found += [
            Difference(f"generation.{name}", set_a.get(name, default), set_b.get(name, default))
            for name, default in _GENERATION_WHERE_SET.items()
            if set_a.get(name, default) != set_b.get(name, default)
        ]
    framework_a, framework_b = _framework_options(request_a), _framework_options(request_b)
    found += [
        Difference(f"options.{name}", framework_a.get(name), framework_b.get(name))
        for name in sorted(framework_a.keys() | framework_b.keys())
        if framework_a.get(name) != framework_b.get(name)
    ]
    if request_a.get("dataset") != request_b.get("dataset"):
        found.append(Difference("dataset", request_a.get("dataset"), request_b.get("dataset")))
    return found


def _generation_where_set(request: Mapping[str, Any]) -> dict[str, Any]:
    """The generation settings of `_GENERATION_WHERE_SET` the request set to other than the default."""
    given = request.get("generation")
    given = given if isinstance(given, Mapping) else {}
    return {
        name: _WORKLOAD_VIEWS.get(("generation", name), _same)(given[name])
        for name, default in _GENERATION_WHERE_SET.items()
        if given.get(name, default) != default
    }


def _where_set(request: Mapping[str, Any], key: str, defaults: Mapping[str, Any]) -> dict[str, Any]:
    """The settings of section `key` among `defaults` the request set to other than the default."""
    given = request.get(key)
    given = given if isinstance(given, Mapping) else {}
    return {name: given[name] for name, default in defaults.items() if given.get(name, default) != default}


def _same(value: Any) -> Any:
    return value


def _framework_options(request: Mapping[str, Any]) -> dict[str, Any]:
    """The framework-specific options (contract.options.FRAMEWORK_OPTIONS) the request set to other than
    the model as loaded (`contract.options.variant_options`): a model compiled or quantised is another
    workload than it as loaded, and one that set none keys as it did before such options existed."""
    from mlscope.contract.options import variant_options

    options = request.get("options")
    return variant_options(options if isinstance(options, Mapping) else {})


def _plain(value: Any) -> Any:
    """A setting as JSON holds it, so that a tuple default equals a stored list."""
    return list(value) if isinstance(value, tuple) else value


def _sections(scenarios: set[str]) -> list[tuple[str, Mapping[str, Any]]]:
    """The request sections whose settings change the workload of any of `scenarios`, each with the
    settings it compares and their defaults (what a request that left one out measured)."""
    # Imported here: the settings' schemas (marshmallow) are not needed to name a result
    # (display_name, which `mlscope results list` calls for every row).
    from mlscope.contract.generation import GenerationSettings
    from mlscope.contract.load import LoadSettings
    from mlscope.contract.options import FRAMEWORK_OPTIONS, REQUEST_OPTIONS, PredictorOptions

    sections: list[tuple[str, Mapping[str, Any], frozenset[str] | None]] = [
        # The framework-specific options are `_framework_options`' (each counts only where set).
        (
            "options",
            {
                name: getattr(PredictorOptions(), name)
                for name in REQUEST_OPTIONS
                if name not in FRAMEWORK_OPTIONS
            },
            None,
        ),
        ("load", _defaults(LoadSettings, _LOAD_WORKLOAD), _LOAD_SCENARIOS),
        ("generation", _defaults(GenerationSettings, _GENERATION_WORKLOAD), _GENERATION_SCENARIOS),
        ("measure", _MEASURE_WORKLOAD, _MEASURE_SCENARIOS),
    ]
    return [(key, defaults) for key, defaults, only in sections if only is None or scenarios & only]


def _canonical(value: Any) -> Any:
    """A value as the workload key hashes it: tuples as lists, and a whole float as the integer it
    equals, so that qps 10 and 10.0 (equal to workload_differences) key alike."""
    if isinstance(value, Mapping):
        return {str(key): _canonical(inner) for key, inner in value.items()}
    if isinstance(value, list | tuple):
        return [_canonical(inner) for inner in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def workload_key(evaluation: Mapping[str, Any], scenario: str) -> str:
    """The workload an evaluation measured in `scenario`, as a short stable key (16 hex digits of the
    SHA-256 of its canonical JSON): two evaluations of one model have the same key exactly when
    workload_differences finds nothing between them for that scenario, the manifest aside.

    Hashed: the model's version and options (model_options), the dataset, and the settings of every
    request section that shapes `scenario` (the predictor options always; load for server,
    multi_stream and generate; generation for generate; offline's concurrency), each setting a
    request left out read as its default, as workload_differences reads it, so that an old result
    keys as a new one that set the default. The model's name is not hashed (a comparison keys on it
    already) nor its manifest: each framework has a manifest of its own, and the rows of one
    workload on several frameworks must share a key.
    """
    request = _request(evaluation)
    workload: dict[str, Any] = {
        "model_version": (evaluation.get("model") or {}).get("version"),
        "model_options": model_options(evaluation),
        "dataset": request.get("dataset"),
    }
    for key, defaults in _sections({scenario}):
        workload[key] = _section(request, key, defaults)
    workload["options"].update(_framework_options(request))
    if "load" in workload:
        workload["load"].update(_where_set(request, "load", _LOAD_WHERE_SET))
    if "generation" in workload:
        workload["generation"].update(_generation_where_set(request))
    text = json.dumps(_canonical(workload), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
