"""mlscope: fair, repeatable benchmarks of deep-learning models across frameworks and machines.

    import mlscope
    results = mlscope.evaluate("resnet18", frameworks=["pytorch", "onnxruntime"], batch_sizes=[1, 8])

`import mlscope` stays cheap (no framework, store or console code): `evaluate` and `ResultSet` are
loaded from mlscope.library when first used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mlscope.library import ResultSet, evaluate

__version__ = "0.1.0"
__all__ = ["ResultSet", "__version__", "evaluate"]

_LAZY = frozenset({"ResultSet", "evaluate"})


# Defined for the interpreter only: mypy sees the two names through the import above, and still
# calls any other attribute of mlscope an error.
if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        if name in _LAZY:
            from mlscope import library

            return getattr(library, name)
        raise AttributeError(f"module 'mlscope' has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted({*globals(), *_LAZY})
