"""Coordinated omission: what a stall costs the queries that arrive during it, and who sees it.

The model sleeps `--service-ms` (2 ms) per query and, once every ~`--stall-every` (400) queries
(seeded, the gap drawn uniformly from [N/2, 3N/2]), stalls for `--stall-ms` (200 ms). Three views of
the same model, printed side by side:

* mlscope's server scenario at `--qps` (100, well under the ~480/s the model sustains): latency from
  each query's scheduled arrival, so the queries that arrived during a stall and waited for it
  count with their wait;
* the same run's service times (`load["service_ms"]`, from when the model began each query): what a
  tool timing from when the query was sent to the model would show;
* a closed loop that sends the next query only when the previous one returned, timing each from
  its send: the classic coordinated-omission measurement, run for as many queries.

Target: the stall shows in mlscope's p99 (≥ half the stall) and not in the closed loop's p99
(within 2× the service time). p99.9 of the service times comes from the model's own clock (the
`load` section stops at p99).

    python benchmarks/coordinated_omission.py [--qps 100] [--seconds 20] [--stall-ms 200]
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import numpy as np

from mlscope.contract.load import LoadSettings
from mlscope.runtime.measure import MeasureSettings
from mlscope.runtime.scenarios import get_scenario

__all__ = ["StallingModel", "closed_loop_ms"]


class StallingModel:
    """Sleeps `service_ms` per call; on the calls a seeded schedule picks, `stall_ms` instead.

    Records each call's own duration (its service time) in `durations_ns`.
    """

    def __init__(self, service_ms: float, stall_ms: float, stall_every: int, seed: int) -> None:
        self.service_s, self.stall_s = service_ms / 1000, stall_ms / 1000
        rng = np.random.default_rng(seed)
        gaps = rng.integers(max(1, stall_every // 2), stall_every * 3 // 2 + 1, size=100_000)
        self.stall_at = set(np.cumsum(gaps).tolist())
        self.calls = 0
        self.stalls = 0
        self.durations_ns: list[int] = []

    def reset(self) -> None:
        self.calls = self.stalls = 0
        self.durations_ns = []

    def __call__(self, batch: Any) -> None:
        begin = time.perf_counter_ns()
        self.calls += 1
        if self.calls in self.stall_at:
            self.stalls += 1
            time.sleep(self.stall_s)
        else:
            time.sleep(self.service_s)
        self.durations_ns.append(time.perf_counter_ns() - begin)


def closed_loop_ms(model: StallingModel, count: int) -> np.ndarray:
    """`count` queries back to back, each timed from its send to its return, in ms."""
    clock = time.perf_counter_ns
    latencies = np.empty(count, dtype=np.int64)
    for index in range(count):
        sent = clock()
        model(None)
        latencies[index] = clock() - sent
    return latencies / 1e6


def _pcts(values_ms: np.ndarray) -> tuple[float, float, float]:
    p50, p99, p999 = np.percentile(values_ms, [50, 99, 99.9])
    return float(p50), float(p99), float(p999)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--qps", type=float, default=100.0, help="server scenario target rate")
    parser.add_argument("--seconds", type=float, default=20.0, help="minimum length of the server run")
    parser.add_argument("--service-ms", type=float, default=2.0, help="the model's time per query")
    parser.add_argument("--stall-ms", type=float, default=200.0, help="length of a stall")
    parser.add_argument("--stall-every", type=int, default=400, help="about one stall every this many")
    parser.add_argument("--seed", type=int, default=0, help="seeds the stalls and the arrivals")
    args = parser.parse_args()

    model = StallingModel(args.service_ms, args.stall_ms, args.stall_every, args.seed)
    settings = MeasureSettings(
        warmup_count=5, warmup_seconds=0.0, min_seconds=args.seconds, max_seconds=args.seconds * 3
    )
    load = LoadSettings(qps=args.qps, percentile=99, max_in_flight=1, seed=args.seed)
    m = get_scenario("server").run(model, [None], 1, settings, load=load)
    server_stalls = model.stalls
    service_ms = np.asarray(model.durations_ns[m.warmup_count :], dtype=np.float64) / 1e6
    count = int(m.latency_ms.count)

    model.reset()
    closed = closed_loop_ms(model, count)
    closed_stalls = model.stalls

    service = m.load["service_ms"] if m.load else {}
    print(
        f"coordinated omission: {args.service_ms:g} ms model, {args.stall_ms:g} ms stall about every "
        f"{args.stall_every} queries (seed {args.seed}); load average {os.getloadavg()[0]:.2f}"
    )
    print(
        f"  server at {args.qps:g} qps: {count:,} queries, {server_stalls} stalls, achieved "
        f"{m.load['achieved_qps']:.1f} qps, valid={m.validity.valid}"
    )
    print(f"  closed loop: {closed.size:,} queries, {closed_stalls} stalls")
    print(f"  {'latency (ms)':<44} {'p50':>8} {'p99':>8} {'p99.9':>8}")
    rows = [
        (
            "mlscope server, from scheduled arrival",
            (m.latency_ms.median, m.latency_ms.p99, m.latency_ms.p999),
        ),
        ("same run, service time (load.service_ms)", (service["median"], service["p99"], None)),
        ("same run, service time (model's own clock)", _pcts(service_ms)),
        ("closed loop, from send (coordinated omission)", _pcts(closed)),
    ]
    for name, (p50, p99, p999) in rows:
        last = f"{p999:>8.2f}" if p999 is not None else f"{'—':>8}"
        print(f"  {name:<44} {p50:>8.2f} {p99:>8.2f} {last}")
    closed_p99 = _pcts(closed)[1]
    shows = m.latency_ms.p99 >= args.stall_ms / 2
    hidden = closed_p99 <= 2 * args.service_ms + 1
    print(
        f"  stall in mlscope p99 (≥ {args.stall_ms / 2:g} ms): {'yes' if shows else 'NO'}; "
        f"hidden from the closed loop's p99 (≤ {2 * args.service_ms + 1:g} ms): {'yes' if hidden else 'NO'}; "
        f"{'PASS' if shows and hidden else 'FAIL'}"
    )
    print(f"  p99 ratio mlscope / closed loop: {m.latency_ms.p99 / closed_p99:.1f}×")
    for reason in m.validity.reasons:
        print(f"  validity: {reason}")


if __name__ == "__main__":
    main()
