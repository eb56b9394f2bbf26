"""mlscope: fair, repeatable benchmarks of deep-learning models across frameworks and machines."""

__version__ = "0.1.0"
__all__ = ["__version__"]
