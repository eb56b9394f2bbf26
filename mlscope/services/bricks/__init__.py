"""The bricks service (DLBricks): a model cut into layer bricks, each brick measured once per system
and stored, and the model's latency composed from them (docs/bricks.md).

    run_bricks(refs, framework=..., runs=...)        # estimate and measure whole: (reports, summary)
    estimate_stored(ref, system_id=..., store=...)   # compose from stored bricks only: measures nothing

The command line (`mlscope bricks`), the Python API (`mlscope.bricks`) and the HTTP API
(POST /api/v1/bricks/estimates) call these. Which frameworks do bricks is the `mlscope.bricks`
registry's (`registry.BRICKS`); the pipeline is `pipeline.BrickBench`, PyTorch's part `pytorch`, the
prediction interval's pairs `calibration`.

Importing the package is cheap: the registry is read without numpy or a framework (a verb's help
lists its names), and the pipeline's modules are loaded when one of their names is first used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mlscope.services.bricks.registry import BRICKS, check_brick_framework

if TYPE_CHECKING:
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

# Each lazily loaded name and the module it comes from.
_LAZY = {
    "BrickRunReports": "mlscope.services.bricks.run",
    "run_bricks": "mlscope.services.bricks.run",
    "StoredBrickRuns": "mlscope.services.bricks.stored",
    "estimate_stored": "mlscope.services.bricks.stored",
}


# Defined for the interpreter only: mypy sees the lazy names through the imports above.
if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        if name in _LAZY:
            import importlib

            return getattr(importlib.import_module(_LAZY[name]), name)
        raise AttributeError(f"module 'mlscope.services.bricks' has no attribute {name!r}")
