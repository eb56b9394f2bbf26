"""`run_bricks`: the one way in to the bricks pipeline for the command line (`mlscope bricks`) and the
Python API (`mlscope.bricks`): each model estimated from its bricks and measured whole, on each
place asked for, then summarised.

Where the bricks and models are measured is a `BrickRuns` maker per system: this machine
(`BrickRuns`) by default, or what the caller passes (the command line's farm agents, reached through
the HTTP client, which this layer may not import).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from mlscope.contract.settings import Settings, load_settings
from mlscope.services.bricks.pipeline import BrickBench, summary
from mlscope.services.bricks.registry import check_brick_framework
from mlscope.workers.bricks import BrickRuns

__all__ = ["BrickRunReports", "run_bricks"]


class BrickRunReports(NamedTuple):
    """What `run_bricks` returns: one report per model and place, in the order measured (each as one
    object of `mlscope bricks --json`), and the run's summary (with one per system under `agents`
    when more than one place was asked for)."""

    reports: list[dict[str, Any]]
    summary: dict[str, Any]


def run_bricks(
    refs: Sequence[str],
    *,
    framework: str = "onnxruntime",
    settings: Settings | None = None,
    runs: Sequence[Callable[..., BrickRuns]] | None = None,
    threads: int | None = None,
    device: str = "cpu",
    runner: str = "process",
    min_seconds: float | None = None,
    max_seconds: float | None = None,
    min_count: int | None = None,
    note: Callable[[str], None] | None = None,
) -> BrickRunReports:
    """Estimate each of `refs` from its layers (bricks) and measure it whole, on each place of `runs`.

    Every unique brick is measured once per system and framework version, and stored: a later model
    that shares it reuses the stored result. Every reference is resolved before the first is
    measured, so a typo costs no run.

    Args:
        refs: model references, as `mlscope run` takes them.
        framework: whose decomposition and measurements: a name of the `mlscope.bricks` registry.
        settings: the settings (store, cache, manifests); None: `load_settings()`.
        runs: one maker per place, called as `BrickRuns` is (settings, framework=, threads=,
            device=); None: this machine only.
        threads: intra-op threads of every measurement (None: the framework's default).
        device: where the bricks and the whole model run (`cpu`, or `cuda[:N]` for PyTorch's).
        runner: how each model is measured whole: process, inline or docker (bricks run inline).
        min_seconds, max_seconds, min_count: the whole-model measurement's stopping rule (None:
            the defaults).
        note: told of progress, a line at a time.

    Raises:
        UserError: a framework whose models cannot be cut into bricks (naming it and the registered
            ones), one not installed, a device its bricks cannot run on, or a reference no manifest
            resolves; nothing was measured.
    """
    check_brick_framework(framework)
    measure = {
        name: value
        for name, value in (
            ("min_seconds", min_seconds),
            ("max_seconds", max_seconds),
            ("min_count", min_count),
        )
        if value is not None
    }
    whole = {"runner": runner, "measure": measure, "device": device}
    settings = settings if settings is not None else load_settings()
    makers: Sequence[Callable[..., BrickRuns]] = runs if runs is not None else [BrickRuns]
    reports: list[dict[str, Any]] = []
    for make_runs in makers:
        bench = BrickBench(
            settings,
            whole=whole,
            threads=threads,
            framework=framework,
            note=note or (lambda line: None),
            device=device,
            make_runs=make_runs,
        )
        with bench:
            for ref in refs:  # every REF resolved before the first is measured: a typo costs no run
                bench.runs.admit(ref)
            reports += [bench.report(ref) for ref in refs]
    total = summary(reports)
    if len(makers) > 1:  # one summary per system, since bricks are reused per system
        total["agents"] = {
            agent: summary([report for report in reports if report.get("agent") == agent])
            for agent in dict.fromkeys(str(report.get("agent")) for report in reports)
        }
    return BrickRunReports(reports, total)
