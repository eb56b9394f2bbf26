"""How the CLI shows a generate measurement: per metric (TTFT, TPOT, ITL, end-to-end) the median with
its interval and the p99 (for embeddings and rerank, TTFT, TPOT and ITL said not to apply), tokens
and requests per second, goodput against the SLO with its certificates, the failed requests by
reason, the goodput search's probes, and with --compare-served the in-process and served figures
side by side."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from mlscope.cli.consoles import escape
from mlscope.cli.render_load import agents_lines, ms_text

if TYPE_CHECKING:
    from rich.table import Table

__all__ = ["generation_lines", "served_table", "sweep_lines"]

_METRICS = (("TTFT", "ttft_ms"), ("TPOT", "tpot_ms"), ("ITL", "itl_ms"), ("end-to-end", "e2e_ms"))


def _rate(value: Any) -> str:
    return f"{value:,.1f}" if isinstance(value, (int, float)) else "-"


def _summary(summary: Mapping[str, Any] | None) -> str:
    if not summary or summary.get("median") is None:
        return "-"
    lo, hi = summary.get("median_ci") or (None, None)
    interval = f"95% CI {ms_text(lo)}–{ms_text(hi)}"
    return f"median {ms_text(summary['median'])} ms ({interval}), p99 {ms_text(summary.get('p99'))}"


def _lengths(generation: Mapping[str, Any], name: str) -> str:
    counts = generation.get(name) or {}
    if not counts:
        return "-"
    low, high = counts.get("min"), counts.get("max")
    return str(low) if low == high else f"{low}–{high} (mean {counts.get('mean', 0):.0f})"


def _slo_text(generation: Mapping[str, Any]) -> str | None:
    slo = generation.get("slo")
    if not slo:
        return None
    bounds = ", ".join(f"{metric} ≤ {bound:g}" for metric, bound in slo.items())
    certified = generation.get("certified") or {}
    verdicts = []
    for metric, certificate in certified.items():
        word = "certified" if certificate.get("ok") else "[red]not certified[/red]"
        verdicts.append(f"{metric} p{certificate.get('percentile', 0):g} {word}")
    fraction = generation.get("goodput_fraction")
    share = f"{fraction:.0%} of requests meet {bounds}" if isinstance(fraction, float) else bounds
    return f"goodput {_rate(generation.get('goodput'))} requests/s ({share}; {'; '.join(verdicts)})"


def _point_lines(generation: Mapping[str, Any], indent: str) -> list[str]:
    absent = set(generation.get("not_applicable") or ())
    lines = [
        f"{indent}{label:<10} "
        + (
            f"not applicable ({generation.get('api')}: no tokens)"
            if key in absent
            else _summary(generation.get(key))
        )
        for label, key in _METRICS
    ]
    if "output_tokens_per_s" in absent:
        lines.append(
            f"{indent}{'tokens/s':<10} {_rate(generation.get('input_tokens_per_s'))} input (counted by "
            f"the {generation.get('input_tokens_counted_by')}); "
            f"{_rate(generation.get('inputs_per_s'))} inputs/s, {_rate(generation.get('requests_per_s'))} "
            "requests/s"
        )
    else:
        lines.append(
            f"{indent}{'tokens/s':<10} {_rate(generation.get('output_tokens_per_s'))} output, "
            f"{_rate(generation.get('total_tokens_per_s'))} with the prompts; "
            f"{_rate(generation.get('requests_per_s'))} requests/s"
        )
    slo = _slo_text(generation)
    if slo:
        lines.append(f"{indent}{'slo':<10} {slo}")
    failed = generation.get("failed_requests") or {}
    if failed.get("count"):
        reasons = ", ".join(f"{escape(str(k))}: {n}" for k, n in (failed.get("reasons") or {}).items())
        lines.append(
            f"{indent}{'failed':<10} [red]{failed['count']} of {generation.get('requests')}[/red] "
            f"({reasons}); "
            f"first: {escape(str(failed.get('first')))}"
        )
    return lines


def generation_lines(result: Mapping[str, Any]) -> list[str]:
    """The result's generate measurements as lines for `print_sections` (empty when it has none)."""
    lines: list[str] = []
    for m in result.get("measurements") or []:
        generation = m.get("generation")
        if not isinstance(generation, Mapping):
            continue
        where = escape(str(generation.get("endpoint"))) if generation.get("endpoint") else "in process"
        load = m.get("load") or {}
        shape = (
            f"{generation.get('inputs_per_request')} inputs per request, "
            f"{_lengths(generation, 'prompt_tokens')} tokens per request"
            if "output_tokens" in (generation.get("not_applicable") or ())
            else f"prompt {_lengths(generation, 'prompt_tokens')} tokens, output "
            f"{_lengths(generation, 'output_tokens')} tokens"
        )
        api = f" {generation['api']}" if generation.get("api") else ""
        lines.append(
            f"[bold]generate[/bold]{api}   {generation.get('requests')} requests ({where}), {shape}, "
            f"concurrency {generation.get('concurrency')}"
            + (
                f", Poisson {load['target_qps']:g}/s"
                if load.get("target_qps") and not (generation.get("workload") or {}).get("trace")
                else ""
            )
        )
        lines += _workload_lines(generation, load, "  ")
        lines += agents_lines(load, "  ")
        lines += _point_lines(generation, "  ")
        lines += _server_metrics_lines(generation.get("server_metrics"), "  ")
        lines += _preset_lines(generation)
        lines += _search_lines(m)
        lines += sweep_lines(generation)
    return lines


def _preset_lines(generation: Mapping[str, Any]) -> list[str]:
    """The preset run under: its caps, their percentile and where they came from."""
    preset = generation.get("preset")
    if not isinstance(preset, Mapping):
        return []
    caps = ", ".join(f"{metric} ≤ {bound:g}" for metric, bound in (preset.get("caps") or {}).items())
    origin = str(preset.get("caps_from") or "")
    source = (
        f"MLPerf Inference's caps for {origin.removeprefix('mlperf:')}"
        if origin.startswith("mlperf:")
        else "--slo"
    )
    return [
        f"  {'preset':<10} {escape(str(preset.get('name')))}: p{preset.get('percentile', 0):g} {caps} "
        f"({escape(source)})"
    ]


_AXES = {
    "output_tokens_per_s_per_user": "tokens/s/user",
    "output_tokens_per_s": "tokens/s",
    "requests_per_s_per_user": "req/s/user",
    "requests_per_s": "req/s",
}


def sweep_lines(generation: Mapping[str, Any]) -> list[str]:
    """A sweep's points as a small table: the value, the per-user and overall throughput, the
    latencies' p99, validity and the SLO's certificates, and `*` on the points of the Pareto front."""
    sweep = generation.get("sweep")
    if not isinstance(sweep, Mapping):
        return []
    setting, x, y = str(sweep.get("setting")), str(sweep.get("x")), str(sweep.get("y"))
    points = sweep.get("points") or []
    lines = [
        f"  [bold]sweep[/bold] {setting}: {len(points)} points; * on the Pareto front "
        f"({_AXES.get(x, x)} against {_AXES.get(y, y)}, both better higher)",
        f"    {'':1} {setting:>11} {_AXES.get(x, x):>13} {_AXES.get(y, y):>11} {'TTFT p99':>10} "
        f"{'TPOT p99':>10}  valid",
    ]
    for point in points:
        mark = "*" if point.get("pareto") else " "
        value = point.get(setting)
        lines.append(
            f"    {mark} {value:>11g} {_rate(point.get(x)):>13} {_rate(point.get(y)):>11} "
            f"{ms_text((point.get('ttft_ms') or {}).get('p99')):>10} "
            f"{ms_text((point.get('tpot_ms') or {}).get('p99')):>10}  "
            + ("yes" if point.get("valid") else "[red]no[/red]")
            + _certified_text(point.get("certified"))
        )
    return lines


def _certified_text(certified: Any) -> str:
    """A point's SLO certificates in a few words: ", slo certified" or the metrics not certified."""
    if not isinstance(certified, Mapping) or not certified:
        return ""
    failing = [metric for metric, c in certified.items() if not (c or {}).get("ok")]
    return f", slo [red]{', '.join(failing)} not certified[/red]" if failing else ", slo certified"


def _workload_lines(generation: Mapping[str, Any], load: Mapping[str, Any], indent: str) -> list[str]:
    """A replayed trace with its intended vs achieved timing, conversations with TTFT of first and
    later turns, shared prefixes (docs/generate.md); none for drawn requests."""
    workload = generation.get("workload") or {}
    lines: list[str] = []
    trace = workload.get("trace")
    if isinstance(trace, Mapping):
        late = load.get("issue_lateness_ms") or {}
        wait = load.get("queue_wait_ms") or {}
        lines.append(
            f"{indent}{'trace':<10} {escape(str(trace.get('name')))} ({trace.get('lines')} lines, sha256 "
            f"{str(trace.get('sha256'))[:12]}) at {trace.get('speed'):g}x: intended "
            f"{load.get('intended_span_s', 0.0):.3f} s at {_rate(load.get('scheduled_qps'))}/s, "
            f"achieved {load.get('achieved_span_s', 0.0):.3f} s at {_rate(load.get('sent_qps'))}/s; "
            f"issue lateness p99 {ms_text(late.get('p99'))} ms, wait for a slot median "
            f"{ms_text(wait.get('median'))} ms, max {ms_text(wait.get('max'))} ms"
        )
    sessions = workload.get("sessions")
    turns = generation.get("turns") or {}
    if isinstance(sessions, Mapping):
        first, later = turns.get("first_ttft_ms") or {}, turns.get("later_ttft_ms") or {}
        lines.append(
            f"{indent}{'turns':<10} {sessions.get('turns')} per conversation, think time "
            f"{sessions.get('think_time_ms'):g} ms; TTFT median turn 1 {ms_text(first.get('median'))} ms, "
            f"later turns {ms_text(later.get('median'))} ms"
        )
    prefix = workload.get("shared_prefix")
    if isinstance(prefix, Mapping):
        lines.append(
            f"{indent}{'prefix':<10} {prefix.get('tokens')} shared tokens, {prefix.get('groups')} groups"
        )
    return lines


_SOURCES = {"vllm": "vLLM", "sglang": "SGLang", "tgi": "TGI", "llamacpp": "llama.cpp"}
_PEAKS = (
    ("kv_cache_usage", "KV cache", lambda v: f"{v:.0%}"),
    ("requests_running", "running", lambda v: f"{v:g}"),
    ("requests_waiting", "waiting", lambda v: f"{v:g}"),
    ("batch_size", "batch", lambda v: f"{v:g}"),
    ("generation_tokens_per_s", "generation", lambda v: f"{v:,.0f} tokens/s"),
)


def _server_metrics_lines(metrics: Any, indent: str) -> list[str]:
    """One line: the server's metrics' peaks, or why they are missing."""
    if not isinstance(metrics, Mapping):
        return []
    if metrics.get("missing"):
        return [f"{indent}{'server':<10} [red]metrics missing[/red]: {escape(str(metrics['missing']))}"]
    peak = metrics.get("peak") or {}
    peaks = ", ".join(f"{label} {text(peak[key])}" for key, label, text in _PEAKS if key in peak)
    source = _SOURCES.get(str(metrics.get("source")), str(metrics.get("source")))
    failed = f", {metrics['failed_samples']} failed" if metrics.get("failed_samples") else ""
    return [
        f"{indent}{'server':<10} {source} metrics, {metrics.get('samples')} samples every "
        f"{metrics.get('interval_s'):g} s{failed}: peak {peaks or 'none given'}"
    ]


def _search_lines(measurement: Mapping[str, Any]) -> list[str]:
    search = (measurement.get("load") or {}).get("search")
    if not isinstance(search, Mapping):
        return []
    lines = [
        f"  [bold]search[/bold] {len(search.get('probes') or [])} probes for the highest rate meeting the slo"
    ]
    for probe in search.get("probes") or []:
        verdict = (
            "[green]passed[/green]"
            if probe.get("passed")
            else f"[red]failed[/red] ({escape(str(probe.get('reason')))})"
        )
        lines.append(
            f"    {_rate(probe.get('target_qps'))} qps → {_rate(probe.get('achieved_qps'))} achieved, "
            f"goodput {_rate(probe.get('goodput'))}/s, "
            + (
                f"TTFT p50 {ms_text(probe.get('ttft_p50_ms'))} ms, "
                f"TPOT p50 {ms_text(probe.get('tpot_p50_ms'))} ms"
                if probe.get("ttft_p50_ms") is not None or probe.get("e2e_p50_ms") is None
                else f"end-to-end p50 {ms_text(probe.get('e2e_p50_ms'))} ms"
            )
            + f": {verdict}"
        )
    best = search.get("max_qps")
    lines.append(
        f"  max QPS meeting the slo: {_rate(best)}"
        if best is not None
        else "  [red]no rate met the slo[/red]"
    )
    return lines


def served_table(result: Mapping[str, Any]) -> Table | None:
    """In process vs served, per metric (median ms, what serving added, the ratio), for a
    --compare-served result; None for any other."""
    for m in result.get("measurements") or []:
        generation = m.get("generation") or {}
        overhead = generation.get("serving_overhead")
        if not overhead:
            continue
        served = generation.get("served") or {}
        from rich.table import Table

        table = Table(
            title=f"in process vs served ({escape(str(served.get('server') or 'server'))}), medians",
            title_justify="left",
        )
        for header, justify in (
            ("metric", "left"),
            ("in process", "right"),
            ("served", "right"),
            ("added", "right"),
            ("served / in process", "right"),
        ):
            table.add_column(header, justify=justify)  # type: ignore[arg-type]
        for label, key in _METRICS:
            row = overhead.get(key)
            if row:
                table.add_row(
                    f"{label} ms",
                    ms_text(row["in_process_ms"]),
                    ms_text(row["served_ms"]),
                    f"{row['added_ms']:+.3f}",
                    f"{row['ratio']:.2f}×" if row.get("ratio") else "-",
                )
        for label, key in (("output tokens/s", "output_tokens_per_s"), ("requests/s", "requests_per_s")):
            row = overhead.get(key)
            if row:
                table.add_row(
                    label, _rate(row["in_process"]), _rate(row["served"]), "", f"{row['ratio']:.2f}×"
                )
        return table
    return None
