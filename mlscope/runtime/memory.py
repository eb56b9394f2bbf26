"""Peak memory of the predictor process over one evaluation: the result's `memory` section.

Read inside the runtime, by the process that runs the predictor (in-process, a child process or a
container alike), so the figure is that process's own and not its parent's or the container
engine's. On Linux the kernel's resident-set high-water mark (VmHWM) is reset when the evaluation
starts (writing "5" to /proc/self/clear_refs), so an inline runner's earlier jobs do not count;
where it cannot be reset the figure is the process's lifetime peak (getrusage's ru_maxrss), and
the section says so in `rss_scope`.
"""

from __future__ import annotations

import sys
from pathlib import Path

from mlscope.contract.result import Memory

__all__ = ["PeakMemory"]

_PROC_SELF = Path("/proc/self")
_BYTES_PER_MB = 1024 * 1024


def _reset_high_water_mark(proc: Path) -> bool:
    """Ask Linux to restart the resident-set high-water mark at the current RSS; False where it
    cannot (no procfs, a kernel before 4.0, a read-only /proc)."""
    try:
        (proc / "clear_refs").write_text("5")
    except OSError:
        return False
    return True


def _high_water_mark_kb(proc: Path) -> int | None:
    """VmHWM from /proc/self/status, in kB; None where it is not there."""
    try:
        status = (proc / "status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return None


def _lifetime_peak_bytes() -> int | None:
    """getrusage's peak RSS of this process since it started; None where `resource` is missing."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # macOS reports bytes, Linux and the BSDs kilobytes.
    return int(peak) if sys.platform == "darwin" else int(peak) * 1024


class PeakMemory:
    """Tracks this process's peak resident memory from `start()` to `section()`."""

    def __init__(self, proc: Path = _PROC_SELF) -> None:
        self._proc = proc
        self._reset = False

    def start(self) -> None:
        """Mark the start of the evaluation (restart the high-water mark where the kernel allows)."""
        self._reset = _reset_high_water_mark(self._proc)

    def section(self, device_peak_bytes: int | None) -> Memory | None:
        """The `memory` section: {"peak_rss_mb", "peak_device_mb", "rss_scope"}.

        Args:
            device_peak_bytes: the device allocator's peak (the predictor's
                `device_memory_peak_bytes`), None when the evaluation ran on no device that reports
                one; `peak_device_mb` is then null.

        Returns:
            The section, or None when no peak RSS can be read here (the section is then absent).
        """
        kilobytes = _high_water_mark_kb(self._proc) if self._reset else None
        if kilobytes is not None:
            peak, scope = kilobytes * 1024, "evaluation"
        else:
            lifetime = _lifetime_peak_bytes()
            if lifetime is None:
                return None
            peak, scope = lifetime, "process"
        return {
            "peak_rss_mb": round(peak / _BYTES_PER_MB, 1),
            "peak_device_mb": None
            if device_peak_bytes is None
            else round(device_peak_bytes / _BYTES_PER_MB, 1),
            "rss_scope": scope,
        }
