"""How well mlscope's change-point detection (E-divisive means with a permutation test,
mlscope.analysis.changepoints) finds a planted 3% step in benchmark series with noise like this
machine's, and how often it raises a false alarm.

1. The noise: `--runs` repeated single_stream measurements of one small CPU workload (a 20-layer
   256-wide tanh MLP in numpy, batch 8) through mlscope's own measurement loop, each its own run of
   `--seconds`; the run-to-run coefficient of variation of their medians (stdev / mean) and the
   medians' relative deviations are this machine's noise, from the runs mlscope's validity check
   passed (when at least 10 did; the load average is printed with them: other processes are part
   of the noise).
2. Synthetic series of `--length` points: a step of +`--step` (3%) at a random position (at least
   `--margin` points from either end), or none; noise log-normal at CVs of 1%, 2%, 3% and at the
   measured robust CV (1.4826 × MAD / median, which a few disturbed runs do not inflate), and
   "measured runs" (the measured relative deviations resampled: their skew and tails kept).
3. Per noise: the detection rate (series where a change point with a positive shift lies within
   `--tolerance` points of the step), the false alarms per 100 points (every other change point), on
   step and on flat series, and the share of flat series with any false alarm.
4. At CV 3%, the detection rate as series grow from 50 to 400 points; and what one detection costs
   at 100 and 1,000 points.

Detection uses the defaults (significance 0.01, segments of at least 5, 199 permutations) unless
told otherwise. Prints the figures; nothing is asserted.

    python benchmarks/changepoints.py [--trials 100] [--length 100] [--runs 30] [--seconds 0.5]
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

import numpy as np

from mlscope.analysis.changepoints import DetectionSettings, detect_change_points
from mlscope.runtime.measure import MeasureSettings
from mlscope.runtime.scenarios import get_scenario

Noise = Callable[[np.random.Generator, int], np.ndarray]


def measured_medians(runs: int, seconds: float) -> tuple[np.ndarray, np.ndarray]:
    """The median latency (ms) of `runs` single_stream measurements of the numpy MLP, one after
    another, each measured as mlscope measures a model; and whether mlscope found each run valid
    (a run during heavy contention from other processes is not)."""
    weights = np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32) / 16
    inputs = [np.random.default_rng(1).standard_normal((8, 256)).astype(np.float32)]

    def predict(batch: np.ndarray) -> np.ndarray:
        hidden = batch
        for _ in range(20):
            hidden = np.tanh(hidden @ weights)
        return hidden

    settings = MeasureSettings(
        min_seconds=seconds, min_count=100, warmup_seconds=0.2, max_seconds=10 * seconds
    )
    scenario = get_scenario("single_stream")
    medians, valid = [], []
    for _ in range(runs):
        measurement = scenario.run(predict, inputs, 1, settings)
        medians.append(measurement.latency_ms.median)
        valid.append(measurement.validity.valid)
    return np.asarray(medians), np.asarray(valid, dtype=bool)


def describe_noise(medians: np.ndarray) -> tuple[float, float, str]:
    """(CV, robust CV, a line describing them): the CV a few disturbed runs do not inflate is
    1.4826 × the median absolute deviation, relative to the median."""
    cv = float(np.std(medians, ddof=1) / np.mean(medians))
    robust = float(1.4826 * np.median(np.abs(medians - np.median(medians))) / np.median(medians))
    line = (
        f"median {np.median(medians):.3f} ms, CV {cv * 100:.2f}% "
        f"(robust, from the MAD: {robust * 100:.2f}%), min {medians.min():.3f}, max {medians.max():.3f} ms"
    )
    return cv, robust, line


def lognormal_noise(cv: float) -> Noise:
    return lambda rng, n: rng.lognormal(0.0, cv, n)


def resampled_noise(deviations: np.ndarray) -> Noise:
    """Multiplicative noise drawn from the measured medians' relative deviations (1 + d)."""
    return lambda rng, n: 1.0 + rng.choice(deviations, size=n, replace=True)


def score(
    noise: Noise, args: argparse.Namespace, settings: DetectionSettings, *, step: bool
) -> tuple[int, int, int]:
    """(series where the step was found, false alarms, flat series with any false alarm) over
    `args.trials` series."""
    rng = np.random.default_rng(args.seed)
    found = false_alarms = alarmed = 0
    for trial in range(args.trials):
        at = int(rng.integers(args.margin, args.length - args.margin + 1))
        level = np.where(np.arange(args.length) >= at, 1.0 + args.step, 1.0) if step else np.ones(args.length)
        series = 10.0 * level * noise(rng, args.length)
        changes = detect_change_points(series, DetectionSettings(**{**vars(settings), "seed": trial}))
        hits = [c for c in changes if step and abs(c.index - at) <= args.tolerance and c.shift_pct > 0]
        found += bool(hits)
        extra = len(changes) - min(len(hits), 1)
        false_alarms += extra
        alarmed += extra > 0
    return found, false_alarms, alarmed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=100, help="series per noise and kind")
    parser.add_argument("--length", type=int, default=100, help="points per series")
    parser.add_argument("--step", type=float, default=0.03, help="the planted step, a fraction")
    parser.add_argument("--margin", type=int, default=15, help="the step is this far from either end")
    parser.add_argument("--tolerance", type=int, default=5, help="a hit is this close to the step")
    parser.add_argument("--runs", type=int, default=30, help="repeated measurements for the noise")
    parser.add_argument("--seconds", type=float, default=0.5, help="each measurement's minimum duration")
    parser.add_argument("--significance", type=float, default=DetectionSettings.significance)
    parser.add_argument("--min-segment", type=int, default=DetectionSettings.min_segment)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    settings = DetectionSettings(significance=args.significance, min_segment=args.min_segment)

    load_before = os.getloadavg()[0]
    medians, valid = measured_medians(args.runs, args.seconds)
    load_after = os.getloadavg()[0]
    print(
        f"noise on this machine: {args.runs} single_stream runs of a numpy MLP (batch 8); "
        f"load average {load_before:.2f} → {load_after:.2f} on {os.cpu_count()} CPUs"
    )
    print(f"  all runs: {describe_noise(medians)[2]}")
    # The runs mlscope found valid are the noise a stored series of valid results carries; with too
    # few of them, every run's.
    kept = medians[valid] if valid.sum() >= 10 else medians
    measured_cv, robust_cv, line = describe_noise(kept)
    print(f"  valid runs ({int(valid.sum())} of {args.runs}): {line if valid.sum() >= 10 else 'too few'}")
    deviations = kept / np.mean(kept) - 1.0
    print(
        f"series: {args.length} points, step +{args.step * 100:g}% at a random point ≥ {args.margin} from "
        f"either end, {args.trials} series per row; a hit is a rise within ±{args.tolerance} points; "
        f"significance {settings.significance}, segments ≥ {settings.min_segment}, "
        f"{settings.permutations} permutations"
    )
    header = (
        f"{'noise':<28}{'detected':>10}{'false alarms / 100 pts':>24}{'(flat series)':>15}"
        f"{'flat series with any':>22}{'s / series':>12}"
    )
    print(header)
    print("-" * len(header))
    # *: this machine's robust CV; "measured runs": its runs' own deviations, tails and all.
    noises: list[tuple[str, Noise]] = [
        (f"log-normal CV {cv * 100:g}%", lognormal_noise(cv)) for cv in (0.01, 0.02, 0.03)
    ]
    noises.append((f"log-normal CV {robust_cv * 100:.2f}% *", lognormal_noise(robust_cv)))
    noises.append((f"measured runs (CV {measured_cv * 100:.1f}%)", resampled_noise(deviations)))
    points = args.trials * args.length
    for name, noise in noises:
        started = time.perf_counter()
        found, step_alarms, _ = score(noise, args, settings, step=True)
        _, flat_alarms, alarmed = score(noise, args, settings, step=False)
        seconds = (time.perf_counter() - started) / (2 * args.trials)
        print(
            f"{name:<28}{found / args.trials * 100:>9.0f}%{step_alarms / points * 100:>24.2f}"
            f"{flat_alarms / points * 100:>15.2f}{alarmed / args.trials * 100:>21.0f}%{seconds:>12.2f}"
        )
    print_lengths(args, settings)
    print_cost(settings)


def print_lengths(args: argparse.Namespace, settings: DetectionSettings) -> None:
    """The detection rate of the step at CV 3% as the series get longer (the step still at a random
    point `--margin` or more from either end): how many points a 3% step in 3% noise needs."""
    print(f"at log-normal CV 3%, by series length ({args.trials} series each):")
    for length in (50, 100, 200, 400):
        at_length = argparse.Namespace(**{**vars(args), "length": length})
        found, alarms, _ = score(lognormal_noise(0.03), at_length, settings, step=True)
        print(
            f"  {length:>4} points: detected {found / args.trials * 100:3.0f}%, "
            f"false alarms {alarms / (args.trials * length) * 100:.2f} / 100 pts"
        )


def print_cost(settings: DetectionSettings) -> None:
    """Seconds one detection takes on a flat series and on one with a step, at 100 and 1,000 points
    (what /api/v1/history spends on its default `limit` of 1,000)."""
    rng = np.random.default_rng(1)
    for length in (100, 1000):
        flat = 10.0 * rng.lognormal(0.0, 0.02, length)
        stepped = flat * np.where(np.arange(length) >= length // 2, 1.05, 1.0)
        timings = []
        for series in (flat, stepped):
            started = time.perf_counter()
            detect_change_points(series, settings)
            timings.append(time.perf_counter() - started)
        print(f"cost at {length} points: {timings[0]:.3f} s flat, {timings[1]:.3f} s with a 5% step")


if __name__ == "__main__":
    main()
