"""How a measurement's `load` section reads: the results table's load cell (target → achieved QPS
and the certified percentile), a latency search's curve and answer, and a search probe's progress
line. The section's keys are fixed by docs/design.md ("Result sections"); docs/load.md describes them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mlscope.cli.consoles import escape

__all__ = [
    "agents_lines",
    "certified_text",
    "has_load_column",
    "load_cell",
    "ms_text",
    "probe_line",
    "search_lines",
    "split_lines",
]

# The scenarios whose queries a load generator issues: their rows get a load cell.
_LOADED_SCENARIOS = ("server", "multi_stream")


def _number(value: Any, digits: int = 1) -> str:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return "-"
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.{digits}f}".rstrip("0").rstrip(".")


def _bound_text(value: Any) -> str:
    """A latency bound as given (50, 0.25, 0.001): rounding it to one digit would misstate it."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return "-"
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:g}"


def ms_text(value: Any) -> str:
    """A duration in ms, its digits by size ("-" for no number)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return "-"
    return f"{value:.3f}" if value < 10 else f"{value:.2f}" if value < 1000 else f"{value:,.0f}"


def _percentile(value: Any) -> str:
    return f"p{value:g}" if isinstance(value, int | float) else "p?"


def certified_text(certified: Mapping[str, Any]) -> str:
    """e.g. "p99 ✓"; not certified: "p99 ✗ 150 more" (queries still needed), "p99 ✗ > 50 ms" (its
    estimate over the bound) or "p99 ✗"."""
    name = _percentile(certified.get("percentile"))
    if certified.get("ok"):
        return f"[green]{name} ✓[/green]"
    needed, estimate, bound = (certified.get(k) for k in ("queries_needed", "estimate_ms", "bound_ms"))
    if isinstance(needed, int) and needed > 0:
        return f"[yellow]{name} ✗ {needed:,} more[/yellow]"
    if isinstance(bound, int | float) and isinstance(estimate, int | float) and estimate > bound:
        return f"[red]{name} ✗ > {_bound_text(bound)} ms[/red]"
    return f"[red]{name} ✗[/red]"


def has_load_column(results: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a results table needs the load column: some server or multi_stream point has a
    load section."""
    return any(
        m.get("scenario") in _LOADED_SCENARIOS and m.get("load")
        for result in results
        for m in result.get("measurements") or []
    )


def load_cell(measurement: Mapping[str, Any]) -> str:
    """A measurement's load, in a table cell: server "20 → 19.7 qps, p99 ✓"; multi_stream
    "8 per 50 ms → 19.7 qps, p99 ✓, 2 overruns", or back to back "8 back to back → 19.7 qps, p99 ✓";
    a search "max 183 qps, p99 ✓"; the other scenarios only their certificate; "" without a load
    section."""
    load = measurement.get("load") or {}
    if not load:
        return ""
    parts = []
    achieved = load.get("achieved_qps")
    search = load.get("search")
    if isinstance(search, Mapping):
        found = search.get("max_qps")
        parts.append(f"max {_number(found)} qps" if found is not None else "[red]no qps met the bound[/red]")
    elif measurement.get("scenario") == "multi_stream" and "samples_per_query" in load:
        if load.get("back_to_back"):
            every = f"{load['samples_per_query']} back to back"
        else:
            every = f"{load['samples_per_query']} per {_number(load.get('interval_ms'))} ms"
        parts.append(f"{every} → {_number(achieved)} qps")
    elif load.get("target_qps") is not None:
        parts.append(f"{_number(load['target_qps'])} → {_number(achieved)} qps")
    if isinstance(load.get("certified"), Mapping):
        parts.append(certified_text(load["certified"]))
    overruns = load.get("overruns")
    if isinstance(overruns, int) and overruns > 0:
        parts.append(f"[yellow]{overruns} overrun{'s' if overruns != 1 else ''}[/yellow]")
    return ", ".join(parts)


def _probe_text(probe: Mapping[str, Any]) -> str:
    target, achieved = _number(probe.get("target_qps")), _number(probe.get("achieved_qps"))
    latencies = " ".join(f"{name} {ms_text(probe.get(f'{name}_ms'))}" for name in ("p50", "p90", "p99"))
    head = f"{target:>8} qps → {achieved:>8} achieved, {latencies} ms"
    if probe.get("passed"):
        verdict = "[green]passed[/green]" + ("" if probe.get("certified") else " (not certified)")
    else:
        verdict = "[red]failed[/red]"
    reason = f": {escape(str(probe['reason']))}" if probe.get("reason") else ""
    queries = f" ({probe['queries']:,} queries)" if isinstance(probe.get("queries"), int) else ""
    return f"{head}{queries}: {verdict}{reason}"


def _answer(search: Mapping[str, Any]) -> str:
    percentile = _percentile(search.get("percentile"))
    bound = f"{percentile} ≤ {_bound_text(search.get('latency_bound_ms'))} ms"
    found = search.get("max_qps")
    if found is None:
        return f"[red]no QPS tried met {bound}[/red]"
    probes = [p for p in search.get("probes") or [] if p.get("passed")]
    best = max(probes, key=lambda p: p.get("target_qps") or 0, default=None)
    certified = "certified" if best is not None and best.get("certified") else "not certified"
    return f"max QPS with {bound}: [bold]{_number(found)}[/bold] ({certified})"


def search_lines(result: Mapping[str, Any]) -> list[str]:
    """A result's latency searches: per searched point, a heading, one line per probe (target and
    achieved QPS, p50/p90/p99, passed or failed and why) and the answer, "max QPS with p99 ≤ 50 ms:
    183 (certified)"."""
    lines = []
    for m in result.get("measurements") or []:
        search = (m.get("load") or {}).get("search")
        if not isinstance(search, Mapping) or m.get("generation"):  # a goodput search: render_generation's
            continue
        percentile = _percentile(search.get("percentile"))
        lines.append(
            f"[bold]search[/bold]     {escape(str(m.get('scenario')))} batch {m.get('batch_size')}: "
            f"{len(search.get('probes') or [])} probes for the highest QPS with {percentile} ≤ "
            f"{_bound_text(search.get('latency_bound_ms'))} ms"
        )
        lines += [f"  {_probe_text(probe)}" for probe in search.get("probes") or []]
        lines.append(f"  {_answer(search)}")
    return lines


def probe_line(label: str, event: Mapping[str, Any]) -> str:
    """A search probe's progress line (the runtime's "probe" event), e.g. "resnet18 on onnxruntime:
    server batch 1 probe 40 qps → 39.8 achieved, p99 12.3 ms: passed"."""
    verdict = "[green]passed[/green]" if event.get("passed") else "[red]failed[/red]"
    reason = f" ({escape(str(event['reason']))})" if event.get("reason") else ""
    if "goodput" in event:  # a goodput search's probe (the generate scenario)
        return (
            f"{escape(label)}: generate probe {_number(event.get('target_qps'))} qps → "
            f"{_number(event.get('achieved_qps'))} achieved, goodput {_number(event.get('goodput'))}/s, "
            + (
                f"end-to-end p50 {ms_text(event.get('e2e_p50_ms'))} ms"
                if event.get("ttft_p50_ms") is None and event.get("e2e_p50_ms") is not None
                else f"TTFT p50 {ms_text(event.get('ttft_p50_ms'))} ms"
            )
            + f": {verdict}{reason}"
        )
    return (
        f"{escape(label)}: {escape(str(event.get('scenario', 'server')))} batch {event.get('batch_size')} "
        f"probe {_number(event.get('target_qps'))} qps → {_number(event.get('achieved_qps'))} achieved, "
        f"percentile {ms_text(event.get('percentile_ms'))} ms: {verdict}{reason}"
    )


def agents_lines(load: Mapping[str, Any], indent: str) -> list[str]:
    """A load split across agents: the schedule kept by all of them together, then who issued what,
    how late, and each clock's offset to the reference (docs/farm.md, "Load from many hosts")."""
    rows = load.get("agents")
    if not isinstance(rows, list) or not rows:
        return []
    late = load.get("issue_lateness_ms") or {}
    lines = [
        f"{indent}{'agents':<10} {len(rows)} issued one schedule: intended "
        f"{_number(load.get('scheduled_qps'))}/s, achieved {_number(load.get('sent_qps'))}/s; "
        f"issue lateness p99 {ms_text(late.get('p99'))} ms"
    ]
    for row in rows:
        own = row.get("issue_lateness_ms") or {}
        offset, rtt = row.get("clock_offset_ms"), row.get("clock_rtt_ms")
        clock = "clock not measured" if offset is None else f"clock {offset:+.3f} ms (± {rtt / 2:.3f})"
        began = f", began {row['ready_late_s']:.3f} s late" if row.get("ready_late_s") else ""
        lines.append(
            f"{indent}  {escape(str(row.get('agent')))}: {row.get('requests')} requests at "
            f"{_number(row.get('scheduled_qps'))}/s, lateness p99 {ms_text(own.get('p99'))} ms, "
            f"{clock}{began}"
        )
    return lines


def split_lines(result: Mapping[str, Any]) -> list[str]:
    """Each server or multi_stream point split across agents: who issued what (a generate point's
    are among its generation lines)."""
    lines: list[str] = []
    for m in result.get("measurements") or []:
        if m.get("scenario") in _LOADED_SCENARIOS and (m.get("load") or {}).get("agents"):
            lines.append(f"[bold]{m['scenario']}[/bold] batch {m.get('batch_size')}")
            lines += agents_lines(m["load"], "  ")
    return lines
