"""The words and defaults of a verdict on two runs (docs/verdicts.md), apart from the statistics that
reach them (diff.py), so that what only names or defaults them (the CLI's options and tables) needs
no numpy."""

from __future__ import annotations

__all__ = [
    "DEFAULT_CONFIDENCE",
    "DEFAULT_THRESHOLD",
    "FASTER",
    "INCONCLUSIVE",
    "MIN_OTHER_RUNS",
    "NO_DIFFERENCE",
    "SLOWER",
    "VERDICTS",
]

FASTER = "faster"
SLOWER = "slower"
NO_DIFFERENCE = "no detectable difference"
# Within-run evidence of a difference no larger than separate runs may differ by (no series known).
INCONCLUSIVE = "inconclusive"
VERDICTS = (FASTER, SLOWER, NO_DIFFERENCE, INCONCLUSIVE)
DEFAULT_THRESHOLD = 0.02
DEFAULT_CONFIDENCE = 0.95
# A between-run spread is estimated from at least this many other runs of a side's series.
MIN_OTHER_RUNS = 3
