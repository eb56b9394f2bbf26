"""Everything the verbs print, in one place: the consoles, tables (and the results table `run`,
`submit` and `results` share), JSON lines, warnings and notes on stderr, and the endings: a user's
mistake as one line and exit code 2, an interruption 130, an internal error 1."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, TypeAlias

import click

from mlscope.cli.consoles import console, err_console, escape
from mlscope.cli.render_cost import resource_lines
from mlscope.cli.render_generation import generation_lines, served_table
from mlscope.cli.render_load import has_load_column, load_cell, search_lines, split_lines
from mlscope.contract.result import parity_failure, result_validity

if TYPE_CHECKING:
    from rich.console import JustifyMethod
    from rich.table import Table

__all__ = [
    "Column",
    "console",
    "duration_text",
    "duration_unit",
    "err_console",
    "fail",
    "framework_label",
    "internal_error",
    "interrupted",
    "interval_text",
    "log_to_stderr",
    "measurement_table",
    "moment_text",
    "new_table",
    "note",
    "print_json_line",
    "print_json_lines",
    "print_sections",
    "print_validity_notes",
    "ran_line",
    "ran_on",
    "section_lines",
    "short_id",
    "status_cell",
    "top1_cell",
    "validity_notes",
    "variant_text",
    "warn",
]

# The consoles (stdout, stderr: consoles.py, where Rich is imported on their first use) are this
# module's `console` and `err_console`.

# A table column: its header, left-justified, or (header, justification).
Column: TypeAlias = "str | tuple[str, JustifyMethod]"


# ----- endings ----------------------------------------------------------------------------------


def fail(message: str) -> NoReturn:
    """A user's mistake: one line on stderr, exit code 2."""
    click.echo(f"mlscope: error: {message}", err=True)
    sys.exit(2)


def interrupted() -> NoReturn:
    """Ctrl-C (or SIGTERM during `run`): one line, exit code 130."""
    click.echo("mlscope: interrupted", err=True)
    sys.exit(130)


def unavailable(message: str) -> NoReturn:
    """A service mlscope needs did not answer (the store): one line, exit code 1."""
    click.echo(f"mlscope: {message}", err=True)
    sys.exit(1)


def internal_error(exc: Exception) -> NoReturn:
    """A failure of mlscope's own: one line, exit code 1."""
    click.echo(
        f"mlscope: internal error: {type(exc).__name__}: {exc} (MLSCOPE_DEBUG=1 shows the traceback)",
        err=True,
    )
    sys.exit(1)


# ----- lines ------------------------------------------------------------------------------------


# `run` and `submit --wait`: 0 every evaluation succeeded with a valid result, 1 one failed (or was
# cancelled), 3 all succeeded but one result is not valid (every measurement invalid, or its parity
# different): a script must not take such figures for good ones.
EXIT_NOT_VALID = 3


def exit_code(results: Iterable[Mapping[str, Any]]) -> int:
    """The exit code of a command that ran evaluations (see EXIT_NOT_VALID)."""
    results = list(results)
    if any(r["status"] != "succeeded" for r in results):
        return 1
    return EXIT_NOT_VALID if any(not result_validity(r)["valid"] for r in results) else 0


def short_id(evaluation_id: str) -> str:
    return evaluation_id[:8]


def print_json_line(document: Any) -> None:
    print(json.dumps(document, separators=(",", ":"), default=str), flush=True)


def print_json_lines(documents: Iterable[Any]) -> None:
    """One JSON line each: what a verb's `--json` prints."""
    for document in documents:
        print_json_line(document)


def warn(message: str) -> None:
    err_console.print(f"[yellow]warning:[/yellow] {message}")


def note(message: str) -> None:
    err_console.print(f"[yellow]note:[/yellow] {message}")


def log_to_stderr(level: str) -> None:
    """Log lines on stderr, for the long-running verbs (`api`, `worker`)."""
    import logging

    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")


# ----- tables -----------------------------------------------------------------------------------


def new_table(title: str | None, columns: Iterable[Column]) -> Table:
    """An empty table, its title on the left."""
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for column in columns:
        if isinstance(column, str):
            table.add_column(column)
        else:
            header, justify = column
            table.add_column(header, justify=justify)
    return table


# The mark beside a valid point whose verdict has reasons, and the line under the table that says so.
CAVEAT_MARK = "(!)"
CAVEAT_LEGEND = f"{CAVEAT_MARK} valid, with a caveat: the notes under the table say which"


def _validity(validity: dict[str, Any]) -> str:
    if validity.get("valid"):
        return "yes" + (f" {CAVEAT_MARK}" if validity.get("reasons") else "")
    return "[red]NO[/red]"


# Units a duration reads in, largest first: (name, its size in ms).
_DURATION_UNITS = (("s", 1000.0), ("ms", 1.0), ("µs", 1e-3), ("ns", 1e-6))


def duration_unit(ms: Any) -> tuple[str, float]:
    """The unit a duration of `ms` milliseconds reads best in: the largest it is at least one of
    (ms for what is not a number)."""
    if isinstance(ms, int | float) and not isinstance(ms, bool) and ms > 0:
        for name, size in _DURATION_UNITS:
            if ms >= size:
                return name, size
        return _DURATION_UNITS[-1]
    return "ms", 1.0


def _figures(value: float, extra: int = 0) -> str:
    """About three significant figures (more digits with `extra`), whole numbers grouped."""
    decimals = (0 if value >= 100 else 1 if value >= 10 else 2) + extra
    return f"{value:,.{decimals}f}"


def duration_text(ms: Any, unit: tuple[str, float] | None = None) -> str:
    """A duration given in ms, in `unit` (else its own, `duration_unit`) with the unit named:
    "6.21 µs", "11.2 ms", "1.52 s"; "-" for no number."""
    if not isinstance(ms, int | float) or isinstance(ms, bool):
        return "-"
    name, size = unit or duration_unit(ms)
    return f"{_figures(ms / size)} {name}"


def interval_text(lo: Any, hi: Any, unit: tuple[str, float]) -> str:
    """A confidence interval given in ms, in `unit`: "6.18–6.25 µs", with a digit or two more when
    three figures would print both ends the same."""
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in (lo, hi)):
        return "-"
    name, size = unit
    for extra in range(3):
        low, high = _figures(lo / size, extra), _figures(hi / size, extra)
        if low != high:
            break
    return f"{low}–{high} {name}"


_MEASUREMENT_COLUMNS: tuple[Column, ...] = (
    "model",
    "framework",
    "scenario",
    ("batch", "right"),
    ("median", "right"),
    ("95% CI", "right"),
    ("p90", "right"),
    ("p99", "right"),
    ("cv", "right"),
    ("samples/s", "right"),
    ("n", "right"),
    "valid",
    "id",
)


def variant_text(result: Mapping[str, Any]) -> str:
    """The framework-specific options that make the run a variant of its framework's plain one
    ("compile=default", "precision=bf16"), from its request; "" for the model as loaded."""
    from mlscope.contract.options import variant_options

    options = (result.get("request") or {}).get("options") or {}
    return " ".join(f"{name}={value}" for name, value in variant_options(options).items())


def framework_label(result: Mapping[str, Any]) -> str:
    """The framework's name, with what makes the run a variant ("pytorch compile=default")."""
    variant = variant_text(result)
    name = str(result["framework"]["name"])
    return f"{name} {variant}" if variant else name


def measurement_table(results: Sequence[Mapping[str, Any]], title: str | None = None) -> Table:
    """One row per (evaluation, scenario, batch size): latency percentiles, each row's in the unit
    its median reads best in (µs, ms, s), and throughput; with a server or multi_stream point, a load
    column (target → achieved QPS, the certified percentile). A valid point with caveats is marked,
    and a line under the table says what the mark means."""
    loaded = has_load_column(results)
    columns = _MEASUREMENT_COLUMNS
    if loaded:
        columns = (*columns[:-2], "load", *columns[-2:])
    table = new_table(title, columns)
    caveats = any(
        m["validity"].get("valid") and m["validity"].get("reasons")
        for result in results
        if result["status"] == "succeeded" and parity_failure(result.get("parity")) is None
        for m in result.get("measurements") or []
    )
    if caveats:
        table.caption = CAVEAT_LEGEND
        table.caption_justify = "left"
    for result in results:
        name, framework = result["model"]["name"], framework_label(result)
        # Outputs that differ from the reference's make every point of the result NOT valid, however
        # well each was measured (an int8 model's speed is not the float model's).
        parity_bad = parity_failure(result.get("parity")) is not None
        if result["status"] != "succeeded":
            error = result.get("error") or {}
            status = f"[red]{result['status']}[/red]"
            blanks = [""] * (7 if loaded else 6)
            table.add_row(
                name, framework, "-", "-", status, error.get("type", ""), *blanks, short_id(result["id"])
            )
            continue
        for m in result["measurements"]:
            lat = m["latency_ms"]
            lo, hi = lat.get("median_ci") or (None, None)
            unit = duration_unit(lat["median"])
            table.add_row(
                name,
                framework,
                m["scenario"],
                str(m["batch_size"]),
                duration_text(lat["median"], unit),
                interval_text(lo, hi, unit),
                duration_text(lat["p90"], unit),
                duration_text(lat["p99"], unit),
                "-" if lat.get("cv") is None else f"{lat['cv']:.3f}",
                f"{m['throughput']:,.1f}",
                str(lat.get("count", "-")),
                *([load_cell(m)] if loaded else []),
                "NO (parity)" if parity_bad else _validity(m["validity"]),
                short_id(result["id"]),
            )
    return table


def validity_notes(results: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per measurement whose verdict has reasons."""
    notes = []
    for result in results:
        for m in result.get("measurements") or []:
            for reason in m["validity"].get("reasons") or []:
                notes.append(
                    f"{result['framework']['name']} {m['scenario']} batch {m['batch_size']}: {reason}"
                )
    return notes


def print_validity_notes(results: Sequence[Mapping[str, Any]]) -> None:
    """The validity notes under a results table on stdout (`run`, `results show`)."""
    for line in validity_notes(results):
        console.print(f"[yellow]note[/yellow] {line}")


# ----- result sections --------------------------------------------------------------------------


def _percent(fraction: float | None) -> str:
    return "-" if fraction is None else f"{fraction * 100:.1f}%"


def _interval(ci: Any) -> str:
    if not isinstance(ci, list | tuple) or len(ci) != 2 or None in ci:
        return ""
    return f" [{ci[0] * 100:.1f}–{ci[1] * 100:.1f}]"


def accuracy_text(accuracy: dict[str, Any]) -> str:
    """e.g. "digits (360 samples): top-1 97.5% [95.4–98.7], top-5 99.7% [98.4–99.9]", the interval
    being the section's (95% Wilson, say) in percent."""
    ci = accuracy.get("ci") or {}
    scores = [
        f"{label} {_percent(accuracy[key])}{_interval(ci.get(key))}"
        for key, label in (("top1", "top-1"), ("top5", "top-5"))
        if accuracy.get(key) is not None
    ]
    limit = f", --limit {accuracy['limit']}" if accuracy.get("limit") is not None else ""
    count = accuracy.get("count")
    head = f"{escape(str(accuracy.get('dataset')))} ({count} sample{'s' if count != 1 else ''}{limit})"
    return f"{head}: {', '.join(scores) or 'no top-k score'}"


def _differences(comparison: dict[str, Any], *, relative: bool) -> str:
    parts = []
    if comparison.get("max_abs") is not None:
        parts.append(f"max |Δ| {comparison['max_abs']:.1e}")
    if relative and comparison.get("max_rel") is not None:
        parts.append(f"max rel {comparison['max_rel']:.1e}")
    if comparison.get("cosine") is not None:
        parts.append(f"cosine {comparison['cosine']:.6f}")
    if comparison.get("top1_agreement") is not None:
        parts.append(f"top-1 agreement {_percent(comparison['top1_agreement'])}")
    return ", ".join(parts) or "no figures"


def parity_text(parity: dict[str, Any]) -> str:
    """e.g. "same as pytorch: max |Δ| 3.1e-06, cosine 1.000000, top-1 agreement 100.0% (64 samples)";
    a different verdict in red, naming its tolerance and the outputs that differ."""
    against = escape(str(parity.get("against")))
    count = parity.get("count")
    samples = f" ({count} sample{'s' if count != 1 else ''})"
    if parity.get("verdict") == "unavailable":
        return f"[yellow]unavailable[/yellow]: {against} could not run ({escape(str(parity.get('error')))})"
    if parity.get("verdict") != "different":
        return f"same as {against}: {_differences(parity, relative=False)}{samples}"
    tolerance = parity.get("tolerance") or {}
    bounds = ", ".join(f"{k} {tolerance[k]:g}" for k in ("rtol", "atol") if tolerance.get(k) is not None)
    outputs = parity.get("outputs") or {}
    differing = [escape(name) for name, o in outputs.items() if (o or {}).get("verdict") == "different"]
    beyond = f" beyond {bounds}" if bounds else ""
    which = f"; outputs differing: {', '.join(differing)}" if differing else ""
    return (
        f"[red]DIFFERENT from {against}[/red]{beyond}: {_differences(parity, relative=True)}{samples}{which}"
    )


def section_lines(result: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(label, text) of each result section the result has: accuracy, then parity."""
    lines = []
    if result.get("accuracy"):
        lines.append(("accuracy", accuracy_text(result["accuracy"])))
    if result.get("parity"):
        parity = dict(result["parity"])
        variant = variant_text(result)
        if variant and parity.get("against") == (result.get("framework") or {}).get("name"):
            # A variant (a compiled or quantised model) checked against its framework as loaded.
            parity["against"] = f"{parity['against']} ({'eager' if 'compile=' in variant else 'as loaded'})"
        lines.append(("parity", parity_text(parity)))
    return lines


def print_sections(result: Mapping[str, Any], indent: str = "") -> None:
    """The result's accuracy and parity lines on stdout (`run`, `results show`), its memory, energy
    and cost lines, each latency search's curve and answer, and, when the result as a whole is not
    valid, a line saying why."""
    for label, text in [*section_lines(result), *resource_lines(result)]:
        console.print(f"{indent}[bold]{label:<10}[/bold] {text}")
    for line in [*search_lines(result), *split_lines(result)]:
        console.print(f"{indent}{line}")
    for line in generation_lines(result):
        console.print(f"{indent}{line}")
    served = served_table(result)
    if served is not None:
        console.print(served)
    validity = result_validity(result)
    if result["status"] == "succeeded" and not validity["valid"]:
        console.print(f"{indent}[bold red]NOT VALID[/bold red]: {escape('; '.join(validity['reasons']))}")


def status_cell(result: Mapping[str, Any]) -> str:
    """A result's status for a table: "succeeded", and when it should not be trusted as such, in red
    with the reasons ("succeeded, NOT VALID: parity different from pytorch"); some invalid
    measurements in yellow."""
    status = str(result["status"])
    if status != "succeeded":
        return status
    validity = result_validity(result)
    reasons = escape("; ".join(validity["reasons"]))
    if not validity["valid"]:
        return f"[red]{status}, NOT VALID: {reasons}[/red]"
    return f"{status} [yellow]({reasons})[/yellow]" if reasons else status


def _agent_and_host(result: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """The farm agent that ran the evaluation (None for a local run) and the host it ran on."""
    system = result.get("system") or {}
    return (system.get("agent") or {}).get("id"), system.get("hostname")


def ran_on(result: Mapping[str, Any]) -> str:
    """Who ran the evaluation: the farm agent (worker) that did, else the host a local run was on;
    "-" before it ran."""
    agent, host = _agent_and_host(result)
    return str(agent or host or "-")


def moment_text(iso: str | None) -> str:
    """An ISO 8601 moment as a table shows it, "2026-11-29 03:20:41" (the store's are UTC); "-" for none."""
    return iso[:19].replace("T", " ") if iso else "-"


def ran_line(result: Mapping[str, Any]) -> str:
    """e.g. "ran on agent gpu-box-1 (host gpu-box-1.lan), 2026-11-29 03:20:41 → 03:21:10 UTC": who ran
    an evaluation and when it ran (not when it was submitted)."""
    agent, host = _agent_and_host(result)
    agents = (result.get("system") or {}).get("agents")
    if isinstance(agents, list) and agents:
        # A load split across agents: its merged result ran on all of them (docs/farm.md).
        who = f"{len(agents)} agents ({', '.join(str(a) for a in agents)})"
    elif agent:
        who = f"agent {agent}" + (f" (host {host})" if host and host != agent else "")
    else:
        who = f"host {host}" if host else "an unknown machine"
    started, finished = moment_text(result.get("started_at")), moment_text(result.get("finished_at"))
    if finished[:10] == started[:10]:
        finished = finished[11:]
    return f"ran on {escape(who)}, {started} → {finished} UTC"


def top1_cell(result: Mapping[str, Any]) -> str:
    """The result's top-1 accuracy in percent, "-" when it has none."""
    return _percent((result.get("accuracy") or {}).get("top1"))
