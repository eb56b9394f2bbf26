"""The load generator's issuing process: sends each query when it is due, apart from the model.

Run as a script by `generator.issue` (`python -I issuer_process.py SHARED_FD DATA_FD`), never imported
by the rest of mlscope; it imports the standard library only, so it starts in a few tens of
milliseconds and holds no lock the model's process holds. Issuing from a process of its own means a
query is sent on time whatever the model does with the GIL; the process also asks the operating
system for a real-time priority (or, failing that, a better nice value), so a model whose threads
fill every core does not make it wait for one. Both attempts are recorded.

The parent shares a file mapped by both (`SHARED_FD`): a header of int64 slots, then each sample's
due time (ns after the start), then each sample's send time, written here as the sample goes. A
sample is sent as its 8-byte index written to the data pipe (`DATA_FD`), which the model's threads
read. Standard input is the control channel: any byte on it means stop. Standard output carries one
byte, when the process is ready and has set the start time.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import select
import struct
import sys
import time

# Header slots (int64), shared with generator.py. START_AT, when not 0, is the start the parent asks
# for (perf_counter_ns; the monotonic clock every process on the machine reads): parts of one
# schedule issued by several processes or machines start at one instant.
ISSUED, STOP, END, START, CPU_NS, PRIORITY, COUNT, PER_QUERY, MAX_NS, START_AT = range(10)
HEADER_SLOTS = 16
# Stop codes.
RUNNING, STOP_MAX_SECONDS, STOP_CAPACITY, STOP_ASKED = 0, 1, 2, 3
# Priority codes.
PRIORITY_NORMAL, PRIORITY_NICE, PRIORITY_REALTIME = 0, 1, 2
# The first query is due this long after the process is ready.
LEAD_NS = 5_000_000
# Each sample is handed over this long before it is due; the model thread that takes it starts it
# at its due time (generator.py). Waking a thread on an idle virtual CPU takes tens to hundreds of
# microseconds, twice over (this process's timer, then the model thread's read): sent at its due
# time, a query would reach an idle model that much late. Without a real-time priority this process
# may also wait several milliseconds for a core the model's threads fill (docs/load.md, "The
# generator beside a busy model"): handed over this early, the query is still on time.
EARLY_NS = 5_000_000
# Waits longer than this are spent in select() on the control channel (so a stop is seen at once);
# the last stretch is one clock_nanosleep to the due time, with the timer slack at 1 ns.
_COARSE_NS = 1_000_000
_PR_SET_TIMERSLACK = 29
_NS_PER_S = 1_000_000_000


def _raise_priority() -> int:
    """Ask for SCHED_FIFO, else a lower nice value; returns the priority code obtained."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
        return PRIORITY_REALTIME
    except (AttributeError, OSError):
        pass
    try:
        os.setpriority(os.PRIO_PROCESS, 0, -10)
        return PRIORITY_NICE
    except (AttributeError, OSError):
        return PRIORITY_NORMAL


def precise_timers() -> None:
    """Set the calling thread's timer slack to 1 ns, so the kernel does not round its wake-ups."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            libc.prctl(_PR_SET_TIMERSLACK, ctypes.c_ulong(1), 0, 0, 0)
        except OSError:
            pass


def main(shared_fd: int, data_fd: int, normal_priority: bool) -> None:
    size = os.fstat(shared_fd).st_size
    shared = mmap.mmap(shared_fd, size)
    view = memoryview(shared).cast("q")
    count, per_query, max_ns = view[COUNT], view[PER_QUERY], view[MAX_NS]
    due_at = HEADER_SLOTS
    sent_at = HEADER_SLOTS + count
    view[PRIORITY] = PRIORITY_NORMAL if normal_priority else _raise_priority()
    precise_timers()
    control = sys.stdin.fileno()
    clock, sleep, write, pack = time.perf_counter_ns, time.sleep, os.write, struct.pack
    cpu_start = time.process_time_ns()
    start = view[START_AT] or clock()
    view[START] = start
    os.write(sys.stdout.fileno(), b"r")
    stop = STOP_CAPACITY
    index = 0
    while index < count:
        due = view[due_at + index]
        if due > max_ns:
            stop = STOP_MAX_SECONDS
            break
        target = start + due - EARLY_NS
        wait = target - clock()
        if wait > _COARSE_NS:
            ready, _, _ = select.select([control], [], [], (wait - _COARSE_NS) / _NS_PER_S)
            if ready:
                stop = STOP_ASKED
                break
            wait = target - clock()
        if wait > 0:
            sleep(wait / _NS_PER_S)
        now = clock()
        for sample in range(index, index + per_query):
            view[sent_at + sample] = now - start
        write(data_fd, pack(f"<{per_query}q", *range(index, index + per_query)))
        index += per_query
        view[ISSUED] = index
        if select.select([control], [], [], 0)[0]:
            stop = STOP_ASKED
            break
    view[END] = clock() - start
    view[CPU_NS] = time.process_time_ns() - cpu_start
    view[STOP] = stop
    shared.flush()
    view.release()
    shared.close()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), len(sys.argv) > 3 and sys.argv[3] == "normal")
