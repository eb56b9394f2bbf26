"""A service whose time is known: the system under test for checking the load generator against
queueing theory (docs/load.md, "Checked against queueing theory").

Owns `FixedService`, a predict function that takes a fixed time and holds neither the GIL nor a
core while it does: it sleeps to an absolute deadline on the monotonic clock through
`clock_nanosleep` (ctypes releases the GIL around a foreign call), with the calling thread's timer
slack set to 1 ns so the kernel does not round the wake-up. Driven by Poisson arrivals with
`max_in_flight = c` it is an M/D/c queue, whose waiting-time distribution theory gives. The
service keeps its own record of how long each call really took (wake-up latency makes it a little
longer than asked), so the theory can be evaluated for the service actually given.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
import threading
import time
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["FixedService"]

_CLOCK_MONOTONIC = 1
_TIMER_ABSTIME = 1
_PR_SET_TIMERSLACK = 29
_NS_PER_S = 1_000_000_000


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def _libc() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


class FixedService:
    """`service(batch)` returns `service_ms` after it was called, having slept without the GIL.

    Each thread that calls it first has its timer slack set to 1 ns (once). Off Linux it falls back
    to `time.sleep` of the remaining time (also GIL-free, but with the platform's timer rounding).

    Attributes:
        service_ms: the time asked for.
        taken_ns: every call's own duration as the service measured it, in call-completion order.
        begun_ns: when each of those calls began (monotonic clock, the one perf_counter_ns reads),
            same order.
    """

    def __init__(self, service_ms: float) -> None:
        if not service_ms > 0:
            raise ValueError(f"service_ms={service_ms!r}: expected a number > 0")
        self.service_ms = float(service_ms)
        self._service_ns = round(service_ms * 1e6)
        self._libc = _libc()
        self._local = threading.local()
        self._calls: list[tuple[int, int]] = []

    def _prepare_thread(self) -> None:
        if getattr(self._local, "ready", False):
            return
        if self._libc is not None:
            self._libc.prctl(_PR_SET_TIMERSLACK, ctypes.c_ulong(1), 0, 0, 0)
        self._local.ready = True

    def __call__(self, batch: Any = None) -> None:
        self._prepare_thread()
        begin = time.monotonic_ns()
        deadline = begin + self._service_ns
        if self._libc is not None:
            spec = _Timespec(deadline // _NS_PER_S, deadline % _NS_PER_S)
            while True:
                error = self._libc.clock_nanosleep(_CLOCK_MONOTONIC, _TIMER_ABSTIME, ctypes.byref(spec), None)
                if error != 4:  # EINTR: a signal woke it early; sleep again to the same deadline
                    break
        else:
            remaining = deadline - time.monotonic_ns()
            if remaining > 0:
                time.sleep(remaining / _NS_PER_S)
        # list.append is atomic under the GIL: concurrent callers need no lock.
        self._calls.append((begin, time.monotonic_ns() - begin))

    @property
    def taken_ns(self) -> npt.NDArray[np.int64]:
        return np.asarray([taken for _, taken in self._calls], dtype=np.int64)

    @property
    def begun_ns(self) -> npt.NDArray[np.int64]:
        return np.asarray([begin for begin, _ in self._calls], dtype=np.int64)

    def served_after(self, since_ns: int) -> npt.NDArray[np.int64]:
        """The durations of the calls begun at or after `since_ns`, in the order they began."""
        calls = sorted(call for call in self._calls if call[0] >= since_ns)
        return np.asarray([taken for _, taken in calls], dtype=np.int64)

    def reset(self) -> None:
        """Forget the calls recorded so far (e.g. the warm-up's)."""
        self._calls.clear()


if __name__ == "__main__":  # a quick look at the service's accuracy on this machine
    service = FixedService(float(sys.argv[1]) if len(sys.argv) > 1 else 2.0)
    for _ in range(200):
        service()
    taken = service.taken_ns / 1e6
    print(
        f"asked {service.service_ms} ms; took median {np.median(taken):.4f}, "
        f"p99 {np.percentile(taken, 99):.4f}, max {taken.max():.4f} ms (pid {os.getpid()})"
    )
