"""When the queries of an open-loop run are due (`Schedule`): Poisson arrivals for the server scenario,
a fixed interval for multi_stream, or recorded arrivals replayed (two tools or two runs on the same
arrival instants, docs/load.md)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from mlscope.runtime.measure.loop import NS_PER_S

__all__ = ["Schedule"]

# The seed's second word for the split of a schedule across parts: a stream apart from the gaps'.
_SPLIT_STREAM = 0x5EED_5A4D


@dataclass(frozen=True)
class Schedule:
    """When queries are due: `offsets_ns(count)` gives the first `count` due times, in ns from the
    start, nondecreasing; each query is `samples_per_query` samples due at the same time.

    Attributes:
        kind: "poisson" (exponential gaps, mean 1/rate, seeded), "fixed" (one every 1/rate) or
            "trace" (the recorded arrivals `trace_ns`, replayed; see `replay`).
        rate: queries per second.
        samples_per_query: samples issued together as one query.
        seed: the Poisson schedule's seed.
        trace_ns: a "trace" schedule's due times, ns after its first, nondecreasing.
        part: with `parts` > 1, this schedule is the queries of part `part` of the "poisson"
            schedule split across `parts` agents (`positions`): each query of the whole goes to one
            part, drawn uniformly and independently (seeded), so each part is a Poisson process at
            rate / parts, the parts are independent, and together they are the whole schedule,
            query for query. `rate` stays the whole schedule's.
        parts: how many parts the schedule is split into (1: not split).
    """

    kind: str
    rate: float
    samples_per_query: int = 1
    seed: int = 0
    trace_ns: tuple[int, ...] = ()
    part: int = 0
    parts: int = 1

    def positions(self, total: int) -> npt.NDArray[np.int64]:
        """Which of the whole schedule's first `total` queries are this part's (all of them when
        the schedule is not split), ascending. Drawn from the seed apart from the arrival gaps, and a
        prefix of a longer draw: every part computes the same assignment."""
        if self.parts <= 1:
            return np.arange(total, dtype=np.int64)
        owners = np.floor(np.random.default_rng([self.seed, _SPLIT_STREAM]).random(total) * self.parts)
        return np.flatnonzero(owners.astype(np.int64) == self.part).astype(np.int64)

    def whole(self) -> Schedule:
        """The schedule before the split (this one when it is not split)."""
        return Schedule(self.kind, self.rate, self.samples_per_query, self.seed, self.trace_ns)

    @classmethod
    def replay(cls, arrivals_ns: Sequence[int], samples_per_query: int = 1) -> Schedule:
        """The schedule that issues queries at recorded arrival instants (any clock's ns, sorted here),
        shifted so the first is due at once: the same arrivals for two tools or two runs, so their
        queueing differs only by what each adds. Its rate is the trace's (queries over its span); a
        run that outlasts the trace replays it again from the start, a mean gap after its last.

        Raises:
            ValueError: fewer than 2 arrivals, or all at one instant.
        """
        times = np.sort(np.asarray(arrivals_ns, dtype=np.int64))
        if times.size < 2 or times[-1] == times[0]:
            raise ValueError("a replayed schedule needs at least 2 arrivals at different instants")
        offsets = times - times[0]
        rate = (offsets.size - 1) * NS_PER_S / float(offsets[-1])
        return cls("trace", rate, samples_per_query, trace_ns=tuple(int(t) for t in offsets))

    def offsets_ns(self, count: int) -> npt.NDArray[np.int64]:
        """The due times of the first `count` queries, in ns after the start (of a part: its first
        `count` queries, at their due times in the whole schedule)."""
        if self.parts > 1:
            whole = self.whole()
            total = int(count * self.parts * 1.25) + 64
            while True:
                mine = self.positions(total)
                if mine.size >= count:
                    return whole.offsets_ns(total)[mine[:count]]
                total *= 2
        mean_gap_ns = NS_PER_S / self.rate
        if self.kind == "trace":
            trace = np.asarray(self.trace_ns, dtype=np.int64)
            laps = np.arange(count) // trace.size
            lap_ns = int(trace[-1] + round(mean_gap_ns))
            return trace[np.arange(count) % trace.size] + laps * lap_ns
        if self.kind == "poisson":
            gaps = np.random.default_rng(self.seed).exponential(mean_gap_ns, size=count)
            # The first query is due at once, so a run's arrival rate is count / last due time.
            gaps[0] = 0.0
            return np.cumsum(gaps).astype(np.int64)
        return (np.arange(count, dtype=np.float64) * mean_gap_ns).astype(np.int64)
