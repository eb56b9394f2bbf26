"""The runtime's resource readings: RAPL energy arithmetic (several packages, a counter that wraps)
against a fake powercap tree, the unavailable path against this machine's real /sys, a scenario's
energy section (the samples it divides by; none for a max-QPS search), and the predictor process's
peak RSS.

The fake tree stands in for hardware this machine does not expose: /sys/class/powercap is absent
here (a VM), so RAPL cannot be read for real; its files have the kernel's names and formats.
"""

from __future__ import annotations

import mmap
from pathlib import Path

import numpy as np
import pytest

from mlscope.runtime.energy import (
    POWERCAP_ROOT,
    EnergyMeter,
    EnergyUnavailable,
    RaplMeter,
    open_energy_meter,
    rapl_package_domains,
)
from mlscope.runtime.measure import MeasureSettings
from mlscope.runtime.measure.loop import LoopResult
from mlscope.runtime.measure.scenario_base import Outcome, _energy
from mlscope.runtime.memory import PeakMemory
from mlscope.runtime.scenarios import get_scenario

QUICK = MeasureSettings(
    warmup_count=3, warmup_seconds=0.0, min_count=20, min_seconds=0.0, max_seconds=2.0, stability=0.99
)


def zone(root: Path, name: str, label: str, energy_uj: int, max_range_uj: int) -> Path:
    """One powercap zone as the kernel lays it out: name, energy_uj, max_energy_range_uj."""
    path = root / name
    path.mkdir(parents=True)
    (path / "name").write_text(f"{label}\n")
    (path / "energy_uj").write_text(f"{energy_uj}\n")
    (path / "max_energy_range_uj").write_text(f"{max_range_uj}\n")
    return path


def set_energy(zone_path: Path, energy_uj: int) -> None:
    (zone_path / "energy_uj").write_text(f"{energy_uj}\n")


@pytest.fixture
def two_packages(tmp_path: Path) -> tuple[Path, Path, Path]:
    """Two CPU packages, a core sub-domain of the first, and a platform (psys) zone."""
    root = tmp_path / "powercap"
    first = zone(root, "intel-rapl:0", "package-0", 1_000_000, 262_143_328_850)
    second = zone(root, "intel-rapl:1", "package-1", 262_143_000_000, 262_143_328_850)
    zone(root, "intel-rapl:0:0", "core", 5_000, 262_143_328_850)
    zone(root, "intel-rapl:2", "psys", 7_000, 262_143_328_850)
    return root, first, second


def test_rapl_sums_the_package_domains_across_a_wrap(two_packages: tuple[Path, Path, Path]) -> None:
    # Given two packages, the second's counter 328,850 µJ short of its range
    root, first, second = two_packages
    meter = RaplMeter(rapl_package_domains(root))
    assert [d.name for d in meter.domains] == ["package-0", "package-1"]
    before = meter.read()

    # When the first spends 2.5 J and the second 1.0 J, wrapping past its range to 671,150 µJ
    set_energy(first, 3_500_000)
    set_energy(second, 671_150)
    after = meter.read()

    # Then the energy is the packages' sum, the wrap accounted for (core and psys not counted twice)
    assert meter.joules_between(before, after) == pytest.approx(2.5 + 1.0)
    assert meter.SOURCE == "rapl"


def test_a_tree_without_package_domains_is_unavailable_with_the_reason(tmp_path: Path) -> None:
    # Given powercap trees with nothing to read
    empty = tmp_path / "empty"
    empty.mkdir()
    only_psys = tmp_path / "psys"
    zone(only_psys, "intel-rapl:0", "psys", 1, 10)

    # Then each says why, naming the place looked at
    with pytest.raises(EnergyUnavailable, match=r"does not exist"):
        rapl_package_domains(tmp_path / "missing")
    for root in (empty, only_psys):
        with pytest.raises(EnergyUnavailable, match=r"has no intel-rapl package domain"):
            rapl_package_domains(root)


def test_an_unreadable_counter_is_unavailable_not_zero(tmp_path: Path) -> None:
    # Given a package whose counter is not a number (a driver that fails reads)
    root = tmp_path / "powercap"
    zone(root, "intel-rapl:0", "package-0", 1, 10)
    (root / "intel-rapl:0" / "energy_uj").write_text("busy\n")

    # Then the meter is unavailable, naming the file
    with pytest.raises(EnergyUnavailable, match=r"energy_uj cannot be read"):
        open_energy_meter("cpu", root)


def test_this_machine_reads_rapl_or_says_why_not() -> None:
    # Given this machine's real /sys: When a CPU evaluation opens its meter
    try:
        meter = open_energy_meter("cpu")
    except EnergyUnavailable as exc:
        # Then it is unavailable with a reason (here: no powercap tree in this VM)
        assert str(exc)
        if not POWERCAP_ROOT.is_dir():
            assert (
                str(exc)
                == f"{POWERCAP_ROOT} does not exist on this machine (no RAPL powercap driver exposed)"
            )
    else:
        assert meter.SOURCE == "rapl" and len(meter.read()) >= 1


class CountingMeter(EnergyMeter):
    """A counter that advances 0.5 J every read after the first: what a scenario's window spent."""

    SOURCE = "fake"

    def __init__(self) -> None:
        self.reads = 0

    def read(self) -> tuple[int, ...]:
        self.reads += 1
        return (500_000 * (self.reads - 1),)

    def joules_between(self, before: tuple[int, ...], after: tuple[int, ...]) -> float:
        return (after[0] - before[0]) * 1e-6


def test_a_scenario_divides_its_window_energy_by_every_sample_it_issued() -> None:
    # Given a meter that reads 0.5 J over the measurement's window
    meter = CountingMeter()

    # When single_stream runs at batch size 4
    measurement = get_scenario("single_stream").run(lambda batch: batch, [0], 4, QUICK, energy=meter)

    # Then the section holds the window's joules over (warm-up + timed queries) × batch size
    samples = (measurement.latency_ms.count + measurement.warmup_count) * 4
    assert meter.reads == 2
    assert measurement.to_dict()["energy"] == {
        "joules_per_inference": pytest.approx(0.5 / samples),
        "joules": 0.5,
        "samples": samples,
        "source": "fake",
    }


def test_without_a_meter_a_measurement_has_no_energy_key() -> None:
    measurement = get_scenario("single_stream").run(lambda batch: batch, [0], 1, QUICK)
    assert "energy" not in measurement.to_dict()


def test_peak_rss_counts_what_the_evaluation_allocated() -> None:
    # Given a memory tracker started now
    memory = PeakMemory()
    memory.start()
    before = memory.section(None)
    assert before is not None and before["peak_rss_mb"] > 0

    # When 64 MiB of fresh pages are written (and freed): an anonymous mapping of its own, so that
    # no allocator can hand back pages already resident (in the whole suite, with the frameworks'
    # allocators loaded, a plain 64 MiB bytes object reused resident memory and the peak grew 28 MiB)
    size = 64 * 1024 * 1024
    with mmap.mmap(-1, size) as block:
        for offset in range(0, size, mmap.PAGESIZE):
            block[offset] = 1

    # Then the peak grew by about that, on this Linux reset for the evaluation; no device, no device peak
    after = memory.section(None)
    assert after is not None
    assert after["peak_rss_mb"] >= before["peak_rss_mb"] + 60
    assert after["rss_scope"] == "evaluation" and after["peak_device_mb"] is None
    assert memory.section(256 * 1024 * 1024)["peak_device_mb"] == 256.0  # type: ignore[index]


def test_without_procfs_the_peak_is_the_process_lifetimes(tmp_path: Path) -> None:
    # Given no /proc to reset the high-water mark in (a fake, empty one)
    memory = PeakMemory(proc=tmp_path)
    memory.start()

    # Then the section still has the process's peak, and says whose it is
    section = memory.section(None)
    assert section is not None and section["peak_rss_mb"] > 0 and section["rss_scope"] == "process"


def test_a_multi_stream_query_counts_its_samples_and_a_search_claims_no_figure() -> None:
    # Given a window of 10 queries after 2 warm-up ones, and a meter that read 0.5 J over it
    loop = LoopResult(
        latencies_ns=np.full(10, 1_000_000, dtype=np.int64), wall_ns=1, stop_reason="x", warmup_count=2
    )
    meter = CountingMeter()
    before, after = meter.read(), meter.read()

    # When the queries were multi_stream's, 4 samples each at batch size 2
    section = _energy(meter, before, after, Outcome(loop, {"samples_per_query": 4}), batch_size=2)

    # Then every sample counts: (10 + 2) × 4 × 2
    assert section["samples"] == 96 and section["joules_per_inference"] == pytest.approx(0.5 / 96)
    # ... and a max-QPS search (probes at many rates in one window) claims no figure, saying why
    searched = _energy(meter, before, after, Outcome(loop, {"search": {"probes": []}}), batch_size=1)
    assert set(searched) == {"unavailable"} and "max-QPS search" in searched["unavailable"]
