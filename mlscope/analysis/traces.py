"""What an evaluation's trace says: where the time of a traced inference went (layers, operators,
kernels). The timeline views (a summary, the Chrome Trace Event Format) are in analysis/timeline.py.

Every function here is pure: it takes span dicts in the store's shape ({"trace_id", "span_id",
"parent_id", "name", "level", "start_ns", "end_ns", "attributes"}, the conventions of
workers/trace/spans.py) in any order, in one pass, so the API, the CLI and tests share the figures.
The spans are read from a Store, page by page, by `mlscope.store.iter_spans`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from mlscope.analysis.spans import attributes_of, duration_of
from mlscope.store.records import check_choice, check_int

__all__ = [
    "BETWEEN_LAYERS",
    "GROUPINGS",
    "HOTSPOT_LEVELS",
    "NO_LAYER",
    "hotspots",
    "kernel_breakdown",
    "layer_breakdown",
    "layers_report",
]

GROUPINGS: tuple[str, ...] = ("layer_type", "name", "layer")
HOTSPOT_LEVELS: tuple[str, ...] = ("LIBRARY", "FRAMEWORK")
# The row of a layer breakdown holding the inference time no layer accounts for: the framework's
# own work between layers (dispatch, Python, allocation).
BETWEEN_LAYERS = "(between layers)"
NO_LAYER = "(no layer)"
# A parent chain longer than this is taken as a cycle in malformed parent links, not a real nesting.
_MAX_DEPTH = 256


# ----- time per layer, operator and kernel --------------------------------------------------------


def _group_key(span: Mapping[str, Any], group_by: str) -> str:
    """What `group_by` files a span under: its name, its layer type (its name when it has none, as
    the store's own breakdown does) or the layer it ran in."""
    if group_by == "name":
        return str(span["name"])
    value = attributes_of(span).get(group_by)
    if value is not None:
        return str(value)
    return str(span["name"]) if group_by == "layer_type" else NO_LAYER


def _batch_order(batch_size: Any) -> tuple[bool, Any]:
    return (batch_size is None, batch_size if batch_size is not None else 0)


@dataclass
class _Total:
    calls: int = 0
    total_ns: int = 0

    def add(self, duration_ns: int) -> None:
        self.calls += 1
        self.total_ns += duration_ns


def _is_pass_inference(span: Mapping[str, Any], pass_name: str) -> bool:
    return (
        span["level"] == "MODEL"
        and span["name"] == "inference"
        and attributes_of(span).get("pass") == pass_name
    )


def _figures(total: _Total, denominator: int) -> dict[str, Any]:
    return {
        "calls": total.calls,
        "total_ms": total.total_ns / 1e6,
        "mean_ms": total.total_ns / total.calls / 1e6 if total.calls else 0.0,
        "share": total.total_ns / denominator if denominator else 0.0,
    }


def _per_inference(total: _Total, inferences: int) -> float | None:
    return total.total_ns / inferences / 1e6 if inferences else None


def layer_breakdown(
    spans: Iterable[Mapping[str, Any]], *, group_by: str = "layer_type"
) -> list[dict[str, Any]]:
    """Where the traced inferences of the FRAMEWORK pass spent their time, layer by layer.

    Args:
        spans: an evaluation's spans (any levels, any order); FRAMEWORK layer spans and the
            pass's MODEL "inference" spans are used.
        group_by: "layer_type" (Conv2d, Conv; the name when a span has none), "name" or "layer".

    Returns:
        Rows {"batch_size", "key", "calls", "total_ms", "mean_ms", "share", "per_inference_ms"},
        by batch size, then largest total first (then key). `share` is of the summed duration of
        that batch size's traced inferences; the row BETWEEN_LAYERS holds what no layer accounts
        for (its calls are the inferences), so shares sum to 1 unless layers overlap, when it is 0.
        Without inference spans, shares are of the layers' own total and there is no such row.
        `per_inference_ms` is the total over the number of traced inferences (None without any).

    Raises:
        UserError: `group_by` is not one of GROUPINGS.
    """
    check_choice(group_by, GROUPINGS, "group_by")
    inferences: dict[Any, _Total] = {}
    groups: dict[Any, dict[str, _Total]] = {}
    for span in spans:
        attributes = attributes_of(span)
        batch_size = attributes.get("batch_size")
        if _is_pass_inference(span, "FRAMEWORK"):
            inferences.setdefault(batch_size, _Total()).add(duration_of(span))
        elif span["level"] == "FRAMEWORK" and attributes.get("kind", "layer") == "layer":
            key = _group_key(span, group_by)
            groups.setdefault(batch_size, {}).setdefault(key, _Total()).add(duration_of(span))
    rows: list[dict[str, Any]] = []
    for batch_size in sorted(groups.keys() | inferences.keys(), key=_batch_order):
        totals = dict(groups.get(batch_size, {}))
        inference = inferences.get(batch_size, _Total())
        layers_ns = sum(t.total_ns for t in totals.values())
        if inference.calls:
            totals[BETWEEN_LAYERS] = _Total(inference.calls, max(inference.total_ns - layers_ns, 0))
        denominator = inference.total_ns if inference.calls else layers_ns
        ordered = sorted(totals.items(), key=lambda item: (-item[1].total_ns, item[0]))
        rows += [
            {
                "batch_size": batch_size,
                "key": key,
                **_figures(total, denominator),
                "per_inference_ms": _per_inference(total, inference.calls),
            }
            for key, total in ordered
        ]
    return rows


@dataclass
class _Member:
    """A span of the level a hotspot table ranks, with what its totals need."""

    key: str
    batch_size: Any
    parent_id: str | None
    duration_ns: int
    self_ns: int


def _counts_in_total(member: _Member, members: Mapping[str, _Member]) -> bool:
    """Whether a span adds to its group's total: not when an enclosing span of the same level is in
    the same group (aten::conv2d inside aten::conv2d, an op inside an op of the same layer), whose
    time already covers it."""
    parent_id = member.parent_id
    for _ in range(_MAX_DEPTH):
        ancestor = members.get(parent_id) if parent_id is not None else None
        if ancestor is None:
            return True
        if ancestor.key == member.key and ancestor.batch_size == member.batch_size:
            return False
        parent_id = ancestor.parent_id
    return True


def hotspots(
    spans: Iterable[Mapping[str, Any]], *, level: str = "LIBRARY", n: int = 10, group_by: str = "name"
) -> list[dict[str, Any]]:
    """The n groups of one profiling pass that took the most time, per batch size.

    LIBRARY ranks the framework's operators and runtime calls (kernels run on a device alongside
    them: see `kernel_breakdown`); FRAMEWORK ranks layers.

    Args:
        spans: an evaluation's spans (any levels, any order).
        level: the pass, one of HOTSPOT_LEVELS.
        n: at most this many rows per batch size (1 or more).
        group_by: "name", "layer" (operators by the layer they ran in) or "layer_type".

    Returns:
        Rows {"batch_size", "level", "key", "calls", "total_ms", "mean_ms", "self_ms", "share",
        "per_inference_ms"}, by batch size, largest total first (then key). A span nested in a span
        of its own group counts once, in the outer one's total and calls; `self_ms` is the time
        not spent in nested spans of the same level. `share` is of the summed duration of that
        pass's traced inferences of the batch size (of the rows' own total without any); nested
        groups overlap, so shares need not sum to 1.

    Raises:
        UserError: naming the invalid argument.
    """
    check_choice(level, HOTSPOT_LEVELS, "level")
    check_choice(group_by, GROUPINGS, "group_by")
    check_int("n", n, 1)
    inferences: dict[Any, _Total] = {}
    members: dict[str, _Member] = {}
    for span in spans:
        attributes = attributes_of(span)
        if _is_pass_inference(span, level):
            inferences.setdefault(attributes.get("batch_size"), _Total()).add(duration_of(span))
        elif span["level"] == level and attributes.get("kind") != "kernel":
            duration = duration_of(span)
            members[span["span_id"]] = _Member(
                _group_key(span, group_by),
                attributes.get("batch_size"),
                span.get("parent_id"),
                duration,
                duration,
            )
    for member in members.values():
        parent = members.get(member.parent_id) if member.parent_id is not None else None
        if parent is not None:
            parent.self_ns -= member.duration_ns
    groups: dict[Any, dict[str, tuple[_Total, list[int]]]] = {}
    for member in members.values():
        total, self_ns = groups.setdefault(member.batch_size, {}).setdefault(member.key, (_Total(), [0]))
        self_ns[0] += max(member.self_ns, 0)
        if _counts_in_total(member, members):
            total.add(member.duration_ns)
    rows: list[dict[str, Any]] = []
    for batch_size in sorted(groups, key=_batch_order):
        inference = inferences.get(batch_size, _Total())
        by_key = groups[batch_size]
        denominator = inference.total_ns or sum(total.total_ns for total, _ in by_key.values())
        ordered = sorted(by_key.items(), key=lambda item: (-item[1][0].total_ns, item[0]))[:n]
        rows += [
            {
                "batch_size": batch_size,
                "level": level,
                "key": key,
                **_figures(total, denominator),
                "self_ms": self_ns[0] / 1e6,
                "per_inference_ms": _per_inference(total, inference.calls),
            }
            for key, (total, self_ns) in ordered
        ]
    return rows


def kernel_breakdown(spans: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Device kernel time of the LIBRARY pass, by kernel name and by the layer that launched it.

    Args:
        spans: an evaluation's spans (any levels, any order); LIBRARY spans of kind "kernel" are used.

    Returns:
        Rows {"batch_size", "by": "kernel" | "layer", "key", "calls", "total_ms", "mean_ms",
        "share"}: per batch size, the kernels then the layers, largest total first (then key);
        `share` is of that batch size's summed kernel time. Kernels outside any layer are filed
        under NO_LAYER. An empty list when the trace has no kernels (a CPU run).
    """
    groups: dict[Any, dict[str, dict[str, _Total]]] = {}
    for span in spans:
        attributes = attributes_of(span)
        if span["level"] != "LIBRARY" or attributes.get("kind") != "kernel":
            continue
        per = groups.setdefault(attributes.get("batch_size"), {"kernel": {}, "layer": {}})
        duration = duration_of(span)
        per["kernel"].setdefault(str(span["name"]), _Total()).add(duration)
        per["layer"].setdefault(_group_key(span, "layer"), _Total()).add(duration)
    rows: list[dict[str, Any]] = []
    for batch_size in sorted(groups, key=_batch_order):
        kernel_ns = sum(total.total_ns for total in groups[batch_size]["kernel"].values())
        for by, totals in groups[batch_size].items():
            ordered = sorted(totals.items(), key=lambda item: (-item[1].total_ns, item[0]))
            rows += [
                {"batch_size": batch_size, "by": by, "key": key, **_figures(total, kernel_ns)}
                for key, total in ordered
            ]
    return rows


def layers_report(
    spans: Iterable[Mapping[str, Any]],
    *,
    group_by: str = "layer_type",
    top: int = 10,
    level: str | None = None,
) -> dict[str, Any]:
    """The layer breakdown, the hotspots and the kernels of one trace, read once.

    Args:
        spans: an evaluation's spans.
        group_by: the layer breakdown's grouping, one of GROUPINGS (hotspots group by name).
        top: hotspots per batch size.
        level: the hotspots' pass; None picks LIBRARY when the trace has operator spans, else
            FRAMEWORK.

    Returns:
        {"group_by", "top", "hotspot_level", "rows", "hotspots", "kernels"}.

    Raises:
        UserError: naming the invalid argument.
    """
    check_choice(group_by, GROUPINGS, "group_by")
    if level is not None:
        check_choice(level, HOTSPOT_LEVELS, "level")
    kept = [span for span in spans if span["level"] in ("MODEL", "FRAMEWORK", "LIBRARY")]
    if level is None:
        level = "LIBRARY" if any(span["level"] == "LIBRARY" for span in kept) else "FRAMEWORK"
    return {
        "group_by": group_by,
        "top": top,
        "hotspot_level": level,
        "rows": layer_breakdown(kept, group_by=group_by),
        "hotspots": hotspots(kept, level=level, n=top),
        "kernels": kernel_breakdown(kept),
    }
