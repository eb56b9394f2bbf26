"""The frameworks whose models can be cut into bricks: the `mlscope.bricks` entry-point group.

Each name is a framework's, each entry its `FrameworkBricks` class ("module:class"): ONNX Runtime's
(the ONNX graph it optimises) and PyTorch's (the module as torch.fx traces it). mlscope's own are
this table, which is also pyproject.toml's `mlscope.bricks` entry points (tests/unit/test_plugins.py
keeps them equal); another distribution adds a framework by declaring an entry of its own. Every
question of which frameworks do bricks is answered here, from the registration alone.
"""

from __future__ import annotations

from typing import Any

from mlscope.contract.errors import UserError
from mlscope.contract.plugins import Registry

__all__ = ["BRICKS", "BUILTIN_BRICKS", "check_brick_framework"]

BUILTIN_BRICKS: dict[str, str] = {
    "onnxruntime": "mlscope.services.bricks.pipeline:OrtBricks",
    "pytorch": "mlscope.services.bricks.pytorch:TorchBricks",
}
BRICKS: Registry[Any] = Registry("mlscope.bricks", BUILTIN_BRICKS)


def check_brick_framework(framework: str) -> None:
    """Raises UserError (field `framework`), naming `framework` and the registered ones, when its
    models cannot be cut into bricks."""
    if framework not in BRICKS:
        raise UserError(
            f"framework {framework!r} cannot be decomposed into bricks; only "
            f"{' and '.join(BRICKS)} are supported for now",
            field="framework",
        )
