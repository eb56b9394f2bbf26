"""What the resource sections cost a measurement, and how closely the peak RSS follows an allocation.

1. Energy: the time of one RAPL read (every package's energy_uj) on a fake two-package powercap tree
   (this machine exposes none; the files are read through the same code), and the error of the
   wrap-around arithmetic over 10,000 random intervals that cross a wrap. A measurement reads twice.
2. Memory: the time of `PeakMemory.start()` (the VmHWM reset) and `.section()`; then 768 MiB are
   written and freed before a reset (an earlier job's peak: the reset must forget it), and after it
   blocks of 64, 256 and 512 MiB are written and freed in turn, the reported peak's growth printed
   beside each block's size.
3. Energy on this machine: the source, or the reason there is none.

    python benchmarks/resource_readings.py
"""

from __future__ import annotations

import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from mlscope.runtime.energy import EnergyUnavailable, RaplMeter, open_energy_meter, rapl_package_domains
from mlscope.runtime.memory import PeakMemory

_RANGE_UJ = 262_143_328_850
_MIB = 1024 * 1024


def _median_us(action: Callable[[], object], repeats: int = 2000) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter_ns()
        action()
        times.append(time.perf_counter_ns() - start)
    return statistics.median(times) / 1000


def _fake_tree(root: Path) -> None:
    for index in range(2):
        zone = root / f"intel-rapl:{index}"
        zone.mkdir(parents=True)
        (zone / "name").write_text(f"package-{index}\n")
        (zone / "energy_uj").write_text("1000\n")
        (zone / "max_energy_range_uj").write_text(f"{_RANGE_UJ}\n")


def energy_figures() -> None:
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        _fake_tree(root)
        meter = RaplMeter(rapl_package_domains(root))
        read_us = _median_us(meter.read)
        rng = random.Random(0)
        worst = 0.0
        for _ in range(10_000):
            spent = [rng.randrange(1, 10**9) for _ in meter.domains]
            before = tuple(rng.randrange(_RANGE_UJ - 10**9, _RANGE_UJ) for _ in meter.domains)
            after = tuple((b + s) % _RANGE_UJ for b, s in zip(before, spent))  # noqa: B905 - same lengths
            worst = max(worst, abs(meter.joules_between(before, after) - sum(spent) * 1e-6))
    print(
        f"energy: one RAPL read of 2 packages: {read_us:.1f} µs (median of 2000); a measurement reads twice"
    )
    print(f"energy: wrap-around arithmetic, 10,000 intervals crossing a wrap: worst error {worst:.3g} J")


def memory_figures() -> None:
    memory = PeakMemory()
    print(f"memory: PeakMemory.start() (VmHWM reset): {_median_us(memory.start, 200):.1f} µs (median of 200)")
    section_us = _median_us(lambda: memory.section(None), 2000)
    print(f"memory: PeakMemory.section(): {section_us:.1f} µs (median of 2000)")
    earlier = b"x" * (768 * _MIB)
    del earlier
    memory.start()
    base = memory.section(None)
    assert base is not None
    print(
        f"memory: 768 MiB written and freed, then a reset: the peak reads {base['peak_rss_mb']:.1f} MiB "
        f"({base['rss_scope']} scope)"
    )
    for size in (64, 256, 512):
        block = b"x" * (size * _MIB)
        del block
        now = memory.section(None)
        assert now is not None
        grown = now["peak_rss_mb"] - base["peak_rss_mb"]
        print(f"memory: wrote and freed {size:>3} MiB: peak grew by {grown:.1f} MiB")


def this_machine() -> None:
    try:
        meter = open_energy_meter("cpu")
    except EnergyUnavailable as exc:
        print(f"energy here: unavailable: {exc}")
        return
    print(f"energy here: {meter.SOURCE}, {len(meter.read())} counter(s)")


if __name__ == "__main__":
    energy_figures()
    memory_figures()
    this_machine()
