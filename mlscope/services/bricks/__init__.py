"""The bricks service (DLBricks): a model cut into layer bricks, each brick measured once per system
and stored, and the model's latency composed from them (docs/bricks.md).

    run_bricks(refs, framework=..., runs=...)        # estimate and measure whole: (reports, summary)
    estimate_stored(ref, system_id=..., store=...)   # compose from stored bricks only: measures nothing

The command line (`mlscope bricks`), the Python API (`mlscope.bricks`) and the HTTP API
(POST /api/v1/bricks/estimates) call these. Which frameworks do bricks is the `mlscope.bricks`
registry's (`registry.BRICKS`); the pipeline is `pipeline.BrickBench`, PyTorch's part `pytorch`, the
prediction interval's pairs `calibration`.
"""

from __future__ import annotations

from mlscope.services.bricks.registry import BRICKS, check_brick_framework
from mlscope.services.bricks.run import BrickRunReports, run_bricks
from mlscope.services.bricks.stored import StoredBrickRuns, estimate_stored

__all__ = [
    "BRICKS",
    "BrickRunReports",
    "StoredBrickRuns",
    "check_brick_framework",
    "estimate_stored",
    "run_bricks",
]
