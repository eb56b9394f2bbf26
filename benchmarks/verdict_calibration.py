"""Whether `mlscope diff`'s verdict is calibrated: how often it calls a difference where there is
none, and how often it finds one that is there.

Synthetic part: latency samples (`--samples` per side) drawn from a skewed (lognormal), a
heavy-tailed (1 + Pareto tail) and a bimodal (two normal modes, 70/30) distribution; B is A's
distribution scaled by 1 + d. For d = 0 it prints the share of `--pairs` pairs called "faster" or
"slower" (the false-positive rate; target ≤ the nominal 5%) beside a Welch t-test's (p < 0.05) and a
fixed 10% rule's (|median ratio − 1| ≥ 10%) on the same pairs; for d = 2%, 5%, 10% the share called
"slower" (the power) by each, and the power the diff's own statement predicted (mean over pairs).
"diff" is the rule with no other runs known (the strict one: the whole interval past the threshold);
"series" the same pairs with a between-run spread known to be 0 (true of one distribution), the
rule for a series with at least 3 other runs stored.

Real part: `--runs` separate evaluations of one small model (`--model`, onnxruntime, each in its own
predictor process, at least `--seconds` per run, at most three times that) into a temporary SQLite
store, then `diff` of every pair of valid runs (A vs A: no true difference; `mlscope diff` refuses
the pairs with an invalid side). Prints the share judged "no detectable difference" (target ≥ 95%)
by `mlscope diff`'s rule (each pair's between-run spread read from the other runs in the store)
beside simpler rules on the same pairs: the plain resampling interval, the interval widened by batch
medians, and that with the threshold but without the between-run spread.

    python benchmarks/verdict_calibration.py [--pairs 200] [--samples 2000] [--runs 8] [--seconds 3]
        [--threads 1] [--model mobilenet_v2] [--skip-real] [--skip-synthetic]
"""

from __future__ import annotations

import argparse
import itertools
import math
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats as scipy_stats

from mlscope.analysis.diff import (
    MIN_OTHER_RUNS,
    NO_DIFFERENCE,
    SLOWER,
    compare_samples,
    detection_probability,
)
from mlscope.analysis.diff_report import diff_evaluations

Sampler = Callable[[np.random.Generator, int], np.ndarray]

DISTRIBUTIONS: dict[str, Sampler] = {
    "skewed (lognormal σ=0.25)": lambda rng, n: rng.lognormal(0.0, 0.25, n),
    "heavy-tailed (1 + 0.1·Pareto α=1.5)": lambda rng, n: 1.0 + 0.1 * rng.pareto(1.5, n),
    "bimodal (70% N(1, .03), 30% N(1.3, .03))": lambda rng, n: np.where(
        rng.random(n) < 0.7, rng.normal(1.0, 0.03, n), rng.normal(1.3, 0.03, n)
    ),
}
EFFECTS = (0.0, 0.02, 0.05, 0.10)
FIXED_RULE = 0.10
RESAMPLES = 1000


def _judgements(a: np.ndarray, b: np.ndarray, seed: int) -> dict[str, Any]:
    compared = compare_samples(a, b, resamples=RESAMPLES, seed=seed)
    # The same pair with its series known to add nothing between runs (true of one distribution):
    # the verdict's normal rule, as for a series with at least 3 other runs stored.
    known = compare_samples(a, b, resamples=RESAMPLES, seed=seed, between_runs=(0.0, 0.0))
    welch = scipy_stats.ttest_ind(b, a, equal_var=False)
    change = float(np.median(b) / np.median(a)) - 1.0
    return {
        "diff": compared.verdict,
        "known": known.verdict,
        "welch": "no" if welch.pvalue >= 0.05 else (SLOWER if welch.statistic > 0 else "faster"),
        "fixed": "no" if abs(change) < FIXED_RULE else (SLOWER if change > 0 else "faster"),
        "se": compared.se_log_ratio,
    }


def synthetic(pairs: int, samples: int) -> None:
    print(f"synthetic: {pairs} pairs of {samples} samples per side per cell; B = A's distribution × (1 + d)")
    print(
        f"{'distribution':44} {'d':>4}  {'diff':>6} {'stated':>6} {'series':>7} {'Welch t':>8} "
        f"{'fixed 10%':>9}"
    )
    for name, draw in DISTRIBUTIONS.items():
        for effect in EFFECTS:
            rng = np.random.default_rng(17)
            hits = {"diff": 0, "known": 0, "welch": 0, "fixed": 0}
            stated = 0.0
            for pair in range(pairs):
                a, b = draw(rng, samples), draw(rng, samples) * (1.0 + effect)
                judged = _judgements(a, b, seed=pair)
                for rule in hits:
                    called = judged[rule] not in ("no", NO_DIFFERENCE)
                    hits[rule] += called if effect == 0 else judged[rule] == SLOWER
                stated += detection_probability(effect, judged["se"], 0.02, 0.95, strict=True)
            shares = {rule: count / pairs for rule, count in hits.items()}
            label = "FPR" if effect == 0 else "power"
            print(
                f"{name:44} {effect:4.0%}  {shares['diff']:6.1%} {stated / pairs:6.1%} "
                f"{shares['known']:7.1%} {shares['welch']:8.1%} {shares['fixed']:9.1%}   ({label})"
            )


def _evaluate_runs(model: str, runs: int, seconds: float, threads: int, store_url: str) -> list[str]:
    from mlscope.library import evaluate

    ids = []
    for run in range(runs):
        started = time.monotonic()
        result = evaluate(
            model,
            frameworks=["onnxruntime"],
            # Up to three times as long, so that a run can reach the stability rule and be valid.
            measure={"min_seconds": seconds, "max_seconds": 3 * seconds, "min_count": 30},
            options={"threads": threads},
            store_url=store_url,
        )[0]
        point = result["measurements"][0] if result["measurements"] else {}
        median = (point.get("latency_ms") or {}).get("median", math.nan)
        validity = point.get("validity") or {}
        why = "valid" if validity.get("valid") else f"NOT VALID: {'; '.join(validity.get('reasons') or [])}"
        print(
            f"  run {run + 1}/{runs}: {result['status']}, median {median:.3f} ms, "
            f"{(point.get('latency_ms') or {}).get('count', 0)} samples, {time.monotonic() - started:.0f} s, "
            f"{why[:110]}"
        )
        if result["status"] == "succeeded":
            ids.append(result["id"])
    return ids


# The rules the real part compares, from the plainest to mlscope diff's own.
_RULES = {
    "plain": "resampling interval contains 1 (no batch medians, no series, no threshold)",
    "batch": "interval widened by batch medians contains 1 (no series, no threshold)",
    "within": "interval widened by batch medians, and the threshold (no series spread)",
    "diff": "mlscope diff: batch medians, the series' between-run spread, the threshold",
}


def _judge(a: list[int], b: list[int], between: float, seed: int) -> dict[str, bool]:
    """Per rule: did it judge the pair of runs "no detectable difference"? `between` is the series'
    between-run spread (sd of log median over the other runs)."""
    plain = compare_samples(a, b, seed=seed, batch_medians=False)
    within = compare_samples(a, b, seed=seed)
    full = compare_samples(a, b, seed=seed, between_runs=(between, between))
    return {
        "plain": plain.ci[0] <= 1.0 <= plain.ci[1],
        "batch": within.ci[0] <= 1.0 <= within.ci[1],
        "within": within.verdict == NO_DIFFERENCE,
        "diff": full.verdict == NO_DIFFERENCE,
    }


def _pairs(points: list[dict[str, Any]], runs: list[int], total: int) -> list[dict[str, bool]]:
    """Every pair among `runs` judged by each rule, the between-run spread from the others of `runs`."""
    medians = {i: points[i]["latency_ms"]["median"] for i in runs}
    judged = []
    for i, j in itertools.combinations(runs, 2):
        others = [math.log(medians[k]) for k in runs if k not in (i, j)]
        between = float(np.std(others, ddof=1)) if len(others) >= MIN_OTHER_RUNS else 0.0
        judged.append(_judge(points[i]["latencies_ns"], points[j]["latencies_ns"], between, i * total + j))
    return judged


def _print_shares(title: str, points: list[dict[str, Any]], runs: list[int], total: int) -> None:
    judged = _pairs(points, runs, total)
    if not judged:
        print(f"{title}: no pairs")
        return
    medians = [points[i]["latency_ms"]["median"] for i in runs]
    changes = [abs(x / y - 1) for x, y in itertools.combinations(medians, 2)]
    print(
        f"{title}: {len(judged)} pairs; |median change| median {np.median(changes):.2%}, "
        f"max {max(changes):.2%}; sd of log(median) {np.std(np.log(medians), ddof=1):.2%}"
    )
    for rule, meaning in _RULES.items():
        share = sum(pair[rule] for pair in judged) / len(judged)
        print(f"  no detectable difference: {share:6.1%}  {meaning}")


def real(model: str, runs: int, seconds: float, threads: int) -> None:
    from mlscope.store import open_store

    print(f"\nreal: {runs} separate runs of {model} on onnxruntime ({threads} thread(s), {seconds:g} s each)")
    with tempfile.TemporaryDirectory() as folder:
        store_url = f"sqlite:///{Path(folder) / 'calibration.db'}"
        ids = _evaluate_runs(model, runs, seconds, threads, store_url)
        with open_store(store_url) as store:
            points = [store.get_evaluation(i, include_raw=True)["measurements"][0] for i in ids]
            valid = [i for i, point in enumerate(points) if point["validity"]["valid"]]
            # mlscope diff itself over the store, on the pairs it compares.
            verdicts = [
                diff_evaluations(store, ids[i], ids[j], seed=i * len(ids) + j)["points"][0]["verdict"]
                for i, j in itertools.combinations(valid, 2)
            ]
    print(f"{len(valid)} of {len(ids)} runs valid (mlscope diff refuses a pair with an invalid side)")
    if verdicts:
        quiet = verdicts.count(NO_DIFFERENCE)
        print(f"mlscope diff over the store: {quiet} of {len(verdicts)} valid pairs no detectable difference")
    _print_shares("valid pairs (what mlscope diff compares)", points, valid, len(ids))
    _print_shares("every pair, validity ignored", points, list(range(len(ids))), len(ids))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pairs", type=int, default=200, help="synthetic pairs per distribution and d")
    parser.add_argument("--samples", type=int, default=2000, help="synthetic samples per side")
    parser.add_argument("--runs", type=int, default=8, help="real runs (every pair is diffed)")
    parser.add_argument("--seconds", type=float, default=3.0, help="measured seconds per real run")
    parser.add_argument("--threads", type=int, default=1, help="onnxruntime threads in the real runs")
    parser.add_argument("--model", default="mobilenet_v2", help="the model of the real runs")
    parser.add_argument("--skip-synthetic", action="store_true")
    parser.add_argument("--skip-real", action="store_true")
    args = parser.parse_args()
    started = time.monotonic()
    if not args.skip_synthetic:
        synthetic(args.pairs, args.samples)
    if not args.skip_real:
        real(args.model, args.runs, args.seconds, args.threads)
    print(f"\n({time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()
