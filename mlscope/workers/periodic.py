"""A step repeated in a daemon thread while a block runs: lease renewals, the api's sweeps."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["every"]


@contextmanager
def every(interval_s: float, step: Callable[[], bool | None], *, name: str) -> Iterator[None]:
    """Call `step` every `interval_s` seconds in a daemon thread named `name` while the block runs.

    The first call comes one interval after the block starts. A step that returns False ends the
    calls; what it raises is its own to handle (an exception ends the thread). Leaving the block
    stops the calls and waits up to 5 s for a step under way.
    """
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(interval_s):
            if step() is False:
                return

    thread = threading.Thread(target=loop, name=name, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)
