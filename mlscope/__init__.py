"""mlscope: fair, repeatable benchmarks of deep-learning models across frameworks and machines.

    import mlscope
    results = mlscope.evaluate("resnet18", frameworks=["pytorch", "onnxruntime"], batch_sizes=[1, 8])

`import mlscope` stays cheap (no framework, store or console code): `evaluate`, `bricks` (a model's
latency estimated from its layers, docs/bricks.md) and `ResultSet` are loaded from mlscope.library
when first used, and `MlscopeError` (the root of every exception mlscope defines) from
mlscope.contract.errors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mlscope.contract.errors import MlscopeError
    from mlscope.library import ResultSet, bricks, evaluate

__version__ = "0.1.0"
__all__ = ["MlscopeError", "ResultSet", "__version__", "bricks", "evaluate"]

# Each lazily loaded name and the module it comes from.
_LAZY = {
    "MlscopeError": "mlscope.contract.errors",
    "ResultSet": "mlscope.library",
    "bricks": "mlscope.library",
    "evaluate": "mlscope.library",
}


# Defined for the interpreter only: mypy sees the lazy names through the imports above, and still
# calls any other attribute of mlscope an error.
if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        if name in _LAZY:
            import importlib

            return getattr(importlib.import_module(_LAZY[name]), name)
        raise AttributeError(f"module 'mlscope' has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted({*globals(), *_LAZY})
