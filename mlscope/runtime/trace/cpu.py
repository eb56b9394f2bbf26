"""CPU readings for the HARDWARE sampler, through psutil: busy shares of the logical CPUs, their
clock, and the CPU time and memory of this process and its descendants.
"""

from __future__ import annotations

from typing import Any

import psutil

__all__ = ["CpuReader"]

MEBIBYTE = 2**20


class CpuReader:
    """CPU figures over the interval since its previous reading.

    The process tree is this process and the descendants alive when the reader was made: listing
    descendants means reading every /proc/<pid>/stat, and while another thread holds the GIL each
    of those reads waits out a GIL switch interval, so a listing beside a pure-Python busy thread
    takes hundreds of times longer than alone. A child started later counts once it exits and is reaped
    (its time moves into its parent's children_user/children_system).
    """

    def __init__(self) -> None:
        self._process = psutil.Process()
        self._tree = _process_tree(self._process)
        self._cpu_times = psutil.cpu_times(percpu=True)
        self._process_cpu_s = _process_tree_cpu_s(self._tree)

    def read(self, seconds: float) -> dict[str, Any]:
        cpu_times = psutil.cpu_times(percpu=True)
        per_cpu = [
            _busy_percent(_busy_times(before), _busy_times(after))
            # CPUs may go offline: stop at the shorter list (zip without strict=, which Python 3.9,
            # the Caffe2 environment's, lacks).
            for before, after in zip(self._cpu_times, cpu_times)  # noqa: B905
        ]
        overall = _busy_percent(_sum_times(self._cpu_times), _sum_times(cpu_times))
        self._cpu_times = cpu_times
        process_cpu_s = _process_tree_cpu_s(self._tree)
        # A child that exits unreaped takes its CPU time with it: never report a negative share.
        process_percent = max(0.0, process_cpu_s - self._process_cpu_s) / max(seconds, 1e-9) * 100
        self._process_cpu_s = process_cpu_s
        return {
            "cpu_percent": overall,
            "per_cpu_percent": per_cpu,
            "cpu_mhz": _cpu_mhz(),
            "process_cpu_percent": round(process_percent, 1),
            "process_rss_mb": _process_tree_rss_mb(self._tree),
            "load_1m": _load_1m(),
        }


def _busy_times(times: Any) -> tuple[float, float]:
    """(busy, total) seconds of a psutil cpu_times reading, counted as psutil.cpu_percent does."""
    # Linux counts guest time inside user and nice already; iowait is idle waiting on a disk.
    total = sum(times) - getattr(times, "guest", 0.0) - getattr(times, "guest_nice", 0.0)
    idle = times.idle + getattr(times, "iowait", 0.0)
    return total - idle, total


def _busy_percent(before: tuple[float, float], after: tuple[float, float]) -> float:
    """The busy share, 0-100, between two (busy, total) readings."""
    elapsed = after[1] - before[1]
    if elapsed <= 0:
        return 0.0
    return round(min(100.0, max(0.0, (after[0] - before[0]) / elapsed * 100)), 1)


def _sum_times(per_cpu: list[Any]) -> tuple[float, float]:
    pairs = [_busy_times(times) for times in per_cpu]
    return sum(busy for busy, _ in pairs), sum(total for _, total in pairs)


def _process_tree(process: psutil.Process) -> list[psutil.Process]:
    try:
        return [process, *process.children(recursive=True)]
    except psutil.Error:
        return [process]


def _process_tree_cpu_s(tree: list[psutil.Process]) -> float:
    seconds = 0.0
    for member in tree:
        try:
            times = member.cpu_times()
        except psutil.Error:
            continue
        # children_* hold reaped children, so a child's time stays counted after it exits.
        seconds += times.user + times.system + times.children_user + times.children_system
    return seconds


def _process_tree_rss_mb(tree: list[psutil.Process]) -> float | None:
    total = 0
    for position, member in enumerate(tree):
        try:
            total += member.memory_info().rss
        except psutil.Error:
            if position == 0:
                return None
    return round(total / MEBIBYTE, 1)


def _cpu_mhz() -> float | None:
    try:
        frequency = psutil.cpu_freq()
    except (psutil.Error, OSError, NotImplementedError):
        return None
    return round(float(frequency.current), 1) if frequency is not None and frequency.current else None


def _load_1m() -> float | None:
    try:
        return round(float(psutil.getloadavg()[0]), 2)
    except (psutil.Error, OSError, AttributeError):
        return None
