"""Whether `mlscope diff`'s verdict is calibrated: how often it calls a difference where there is
none, and how often it finds one that is there.

Synthetic part: latency samples (`--samples` per side) drawn from a skewed (lognormal), a
heavy-tailed (1 + Pareto tail) and a bimodal (two normal modes, 70/30) distribution; B is A's
distribution scaled by 1 + d. For d = 0 it prints the share of `--pairs` pairs called "faster" or
"slower" (the false-positive rate; target ≤ the nominal 5%) beside a Welch t-test's (p < 0.05) and a
fixed 10% rule's (|median ratio − 1| ≥ 10%) on the same pairs; for d = 2%, 5%, 10% the share called
"slower" (the power) by each, and the power the diff's own statement predicted (mean over pairs).
"series" is the rule for a series with at least 3 other runs stored, its between-run spread known to
be 0 (true of one distribution); "alone" the same pairs with no series known (the rule with the
assumed spread, DEFAULT_BETWEEN_RUNS), and "inconc." the share of those it calls inconclusive.

Real part: `--runs` separate evaluations each of two models, interleaved (each in its own predictor
process, onnxruntime, at least `--seconds` per run, at most three times that) into a temporary SQLite
store: a chain of fully connected layers (base), and the same chain with one layer more (planted: an
added op of known cost, its slowdown measured as the ratio of the runs' geometric mean medians). It
prints each model's between-run spread of log(median) (sd and 1.4826·MAD: what DEFAULT_BETWEEN_RUNS
rests on), then `mlscope diff` over the store (each series' spread read from its runs) of every
pair of valid base runs (A vs A: target ≥ 95% "no detectable difference") and of every valid
base-planted pair (target ≥ 90% "slower"), and the same pairs with no series known (inconclusive
counts as claiming no difference: both shares printed). `mlscope diff` refuses a pair with an invalid
side, so only valid runs are paired.

    python benchmarks/verdict_calibration.py [--pairs 200] [--samples 2000] [--runs 12] [--seconds 2]
        [--threads 1] [--skip-real] [--skip-synthetic]
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
    DEFAULT_BETWEEN_RUNS,
    FASTER,
    INCONCLUSIVE,
    NO_DIFFERENCE,
    SLOWER,
    VERDICTS,
    compare_samples,
    detection_probability,
)
from mlscope.analysis.diff_prior import series_spread
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
    # The pair with its series known to add nothing between runs (true of one distribution): the
    # verdict's rule as for a series with at least 3 other runs stored.
    known = compare_samples(a, b, resamples=RESAMPLES, seed=seed, between_runs=(0.0, 0.0))
    # The same pair with no series known: the rule with the assumed spread (DEFAULT_BETWEEN_RUNS).
    alone = compare_samples(a, b, resamples=RESAMPLES, seed=seed)
    welch = scipy_stats.ttest_ind(b, a, equal_var=False)
    change = float(np.median(b) / np.median(a)) - 1.0
    return {
        "known": known.verdict,
        "alone": alone.verdict,
        "inconclusive": alone.verdict == INCONCLUSIVE,
        "welch": "no" if welch.pvalue >= 0.05 else (SLOWER if welch.statistic > 0 else FASTER),
        "fixed": "no" if abs(change) < FIXED_RULE else (SLOWER if change > 0 else FASTER),
        "se": known.se_log_ratio,
    }


def synthetic(pairs: int, samples: int) -> None:
    print(f"synthetic: {pairs} pairs of {samples} samples per side per cell; B = A's distribution × (1 + d)")
    print(
        f"{'distribution':44} {'d':>4}  {'series':>6} {'stated':>6} {'alone':>6} {'inconc.':>7} "
        f"{'Welch t':>8} {'fixed 10%':>9}"
    )
    for name, draw in DISTRIBUTIONS.items():
        for effect in EFFECTS:
            rng = np.random.default_rng(17)
            hits = {"known": 0, "alone": 0, "welch": 0, "fixed": 0}
            inconclusive, stated = 0, 0.0
            for pair in range(pairs):
                a, b = draw(rng, samples), draw(rng, samples) * (1.0 + effect)
                judged = _judgements(a, b, seed=pair)
                for rule in hits:
                    called = judged[rule] in (FASTER, SLOWER)
                    hits[rule] += called if effect == 0 else judged[rule] == SLOWER
                inconclusive += judged["inconclusive"]
                stated += detection_probability(effect, judged["se"], 0.02, 0.95)
            shares = {rule: count / pairs for rule, count in hits.items()}
            label = "FPR" if effect == 0 else "power"
            print(
                f"{name:44} {effect:4.0%}  {shares['known']:6.1%} {stated / pairs:6.1%} "
                f"{shares['alone']:6.1%} {inconclusive / pairs:7.1%} {shares['welch']:8.1%} "
                f"{shares['fixed']:9.1%}   ({label})"
            )


# The real part's models: a chain of LAYERS fully connected layers (WIDTH × WIDTH, ReLU, over ROWS
# rows a sample: compute-bound, the weights in cache) and its planted slowdown, the same chain with
# PLANTED_LAYERS more (an added op of known cost: one layer's).
ROWS = 64
WIDTH = 256
LAYERS = 10
PLANTED_LAYERS = 1
REAL_TARGETS = {"quiet": 0.95, "detected": 0.90}


def _chain_model(path: Path, layers: int) -> Path:
    """An ONNX file: x[batch, ROWS, WIDTH] through `layers` MatMul + ReLU layers of fixed random weights."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, weights, last = [], [], "x"
    for layer in range(layers):
        weight = (rng.standard_normal((WIDTH, WIDTH)) / math.sqrt(WIDTH)).astype(np.float32)
        weights.append(numpy_helper.from_array(weight, f"w{layer}"))
        nodes.append(helper.make_node("MatMul", [last, f"w{layer}"], [f"m{layer}"]))
        last = f"y{layer}" if layer < layers - 1 else "y"
        nodes.append(helper.make_node("Relu", [f"m{layer}"], [last]))
    graph = helper.make_graph(
        nodes,
        path.stem,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", ROWS, WIDTH])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", ROWS, WIDTH])],
        weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def _evaluate(model: str, seconds: float, threads: int, store_url: str, label: str) -> str | None:
    from mlscope.library import evaluate

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
        f"  {label}: {result['status']}, median {median:.3f} ms, "
        f"{(point.get('latency_ms') or {}).get('count', 0)} samples, {time.monotonic() - started:.0f} s, "
        f"{why[:100]}"
    )
    return result["id"] if result["status"] == "succeeded" else None


def _spread_line(name: str, medians: list[float]) -> None:
    if len(medians) < 2:
        print(f"  {name}: {len(medians)} run(s): no spread")
        return
    logs = np.log(medians)
    mad = 1.4826 * float(np.median(np.abs(logs - np.median(logs))))
    print(
        f"  {name}: {len(medians)} runs, median {np.median(medians):.3f} ms (range "
        f"{min(medians):.3f}-{max(medians):.3f}); between-run sd of log(median) {np.std(logs, ddof=1):.2%}, "
        f"robust (1.4826·MAD) {mad:.2%}"
    )


def _shares(name: str, verdicts: list[str], wanted: str) -> float:
    counts = {verdict: verdicts.count(verdict) for verdict in VERDICTS}
    listed = ", ".join(f"{verdict} {count}" for verdict, count in counts.items() if count)
    share = counts[wanted] / len(verdicts) if verdicts else math.nan
    print(f"  {name}: {len(verdicts)} pairs: {listed}")
    return share


def _target(what: str, share: float, target: float) -> None:
    met = "met" if share >= target else f"MISSED by {target - share:.1%}"
    print(f"  target {what} >= {target:.0%}: {share:.1%}, {met}")


Run = dict[str, Any]  # "id", "model", "valid", "median", "latencies"


def _mirrored(runs: list[Run], a: Run, b: Run, seed: int, series: bool) -> str:
    """The verdict `mlscope diff` gives the pair (each side's spread from its series' runs, the pair's
    own counted, as diff_report reads them) without its refusal of invalid runs; `series` False: none
    known."""
    spreads: list[float | None] = [None, None]
    if series:
        for k, side in enumerate((a, b)):
            spreads[k] = series_spread([r["median"] for r in runs if r["model"] == side["model"]], 0.95)
    return compare_samples(
        a["latencies"], b["latencies"], seed=seed, between_runs=(spreads[0], spreads[1])
    ).verdict


def _judge_pairs(title: str, runs: list[Run], store: Any | None) -> None:
    """Every A-vs-A pair of base runs and every base-planted pair, with their series and without."""
    base = [r for r in runs if r["model"] == "base"]
    planted = [r for r in runs if r["model"] == "planted"]
    print(f"{title}:")
    for name, chosen in (("base", base), ("planted", planted)):
        _spread_line(name, [r["median"] for r in chosen])
    if len(base) < 2 + 3 or len(planted) < 1 + 3:
        print("  too few runs to pair with a series known")
        return
    logs = {
        name: np.log([r["median"] for r in chosen]) for name, chosen in (("base", base), ("planted", planted))
    }
    squares = sum(float(np.sum((x - x.mean()) ** 2)) for x in logs.values())
    pooled = math.sqrt(squares / sum(x.size - 1 for x in logs.values()))
    true_change = math.expm1(float(logs["planted"].mean() - logs["base"].mean()))
    print(
        f"  pooled over both: {pooled:.2%}; planted slowdown (ratio of geometric mean medians) "
        f"{true_change:+.1%}"
    )
    pairs = {"same": list(itertools.combinations(base, 2)), "planted": list(itertools.product(base, planted))}
    for series in (True, False):
        if series and store is not None:
            how = "series known: mlscope diff over the store"
            verdicts = {
                kind: [
                    # The planted model is the difference under test: allowed, as a user would with
                    # --allow-different when comparing two models on purpose.
                    diff_evaluations(store, a["id"], b["id"], seed=n, allow_different=kind == "planted")[
                        "points"
                    ][0]["verdict"]
                    for n, (a, b) in enumerate(chosen)
                ]
                for kind, chosen in pairs.items()
            }
        else:
            how = (
                "series known: its rule"
                if series
                else f"no series known (assumed spread {DEFAULT_BETWEEN_RUNS:.1%})"
            )
            verdicts = {
                kind: [_mirrored(runs, a, b, n, series) for n, (a, b) in enumerate(chosen)]
                for kind, chosen in pairs.items()
            }
        quiet = _shares(f"A vs A, {how}", verdicts["same"], NO_DIFFERENCE)
        claimed = sum(v in (FASTER, SLOWER) for v in verdicts["same"]) / len(verdicts["same"])
        print(
            f'    "no detectable difference" {quiet:.1%}; '
            f"no difference claimed (inconclusive too) {1 - claimed:.1%}"
        )
        _target("no difference claimed", 1 - claimed, REAL_TARGETS["quiet"])
        detected = _shares(f"planted ({true_change:+.1%}), {how}", verdicts["planted"], SLOWER)
        _target('"slower"', detected, REAL_TARGETS["detected"])


def real(runs: int, seconds: float, threads: int) -> None:
    from mlscope.store import open_store

    print(
        f"\nreal: {runs} runs each of a {LAYERS}-layer chain (base) and the same with {PLANTED_LAYERS} more "
        f"layer(s) (planted), interleaved, on onnxruntime ({threads} thread(s), {seconds:g} s each)"
    )
    with tempfile.TemporaryDirectory() as folder:
        store_url = f"sqlite:///{Path(folder) / 'calibration.db'}"
        models = {
            "base": _chain_model(Path(folder) / "calib_base.onnx", LAYERS),
            "planted": _chain_model(Path(folder) / "calib_planted.onnx", LAYERS + PLANTED_LAYERS),
        }
        made: list[tuple[str, str]] = []
        for run in range(runs):
            for name, path in models.items():
                found = _evaluate(str(path), seconds, threads, store_url, f"run {run + 1}/{runs} {name}")
                if found is not None:
                    made.append((name, found))
        with open_store(store_url) as store:
            every: list[Run] = []
            for name, found in made:
                point = store.get_evaluation(found, include_raw=True)["measurements"][0]
                every.append(
                    {
                        "id": found,
                        "model": name,
                        "valid": bool(point["validity"]["valid"]),
                        "median": point["latency_ms"]["median"],
                        "latencies": point["latencies_ns"],
                    }
                )
            valid = [r for r in every if r["valid"]]
            print(
                f"{len(valid)} of {len(every)} runs valid (mlscope diff refuses a pair with an invalid side)"
            )
            _judge_pairs("valid runs (what mlscope diff compares)", valid, store)
        _judge_pairs(
            "every run, validity ignored (the diff's rule, its refusal of invalid runs left out)", every, None
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pairs", type=int, default=200, help="synthetic pairs per distribution and d")
    parser.add_argument("--samples", type=int, default=2000, help="synthetic samples per side")
    parser.add_argument("--runs", type=int, default=12, help="real runs of each model (every pair is diffed)")
    parser.add_argument("--seconds", type=float, default=2.0, help="measured seconds per real run")
    parser.add_argument("--threads", type=int, default=1, help="onnxruntime threads in the real runs")
    parser.add_argument("--skip-synthetic", action="store_true")
    parser.add_argument("--skip-real", action="store_true")
    args = parser.parse_args()
    started = time.monotonic()
    if not args.skip_synthetic:
        synthetic(args.pairs, args.samples)
    if not args.skip_real:
        real(args.runs, args.seconds, args.threads)
    print(f"\n({time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()
