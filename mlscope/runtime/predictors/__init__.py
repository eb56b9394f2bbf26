"""Predictors: one sub-package per framework (its registration in `__init__`, its predictor, its
profiler converters), found by name through the framework registry; the interface and what every
framework shares (inputs, model files) beside them.

Importing this package imports no framework; `load_predictor_class` imports exactly one.
"""

from __future__ import annotations

# First: the registry finds every framework's sub-package, so none is imported before it is found.
from mlscope.runtime.frameworks import get_framework, load_object
from mlscope.runtime.predictors.base import Predictor, PredictorError, PredictorOptions

__all__ = ["Predictor", "PredictorError", "PredictorOptions", "load_predictor_class"]


def load_predictor_class(framework: str) -> type[Predictor]:
    """Import the predictor of a registered framework (and so the framework itself)."""
    path = get_framework(framework).predictor
    cls = load_object(path)
    if not (isinstance(cls, type) and issubclass(cls, Predictor)):
        raise TypeError(f"{path} is not a Predictor")
    return cls
