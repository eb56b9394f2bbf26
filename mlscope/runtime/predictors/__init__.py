"""Predictors: one module per framework, found by name through the framework registry.

Importing this package imports no framework; `load_predictor_class` imports exactly one.
"""

from __future__ import annotations

import importlib

from mlscope.runtime.frameworks import get_framework
from mlscope.runtime.predictors.base import Predictor, PredictorError, PredictorOptions

__all__ = ["Predictor", "PredictorError", "PredictorOptions", "load_predictor_class"]


def load_predictor_class(framework: str) -> type[Predictor]:
    """Import the predictor of a registered framework (and so the framework itself)."""
    module_name, _, class_name = get_framework(framework).predictor.partition(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    if not (isinstance(cls, type) and issubclass(cls, Predictor)):
        raise TypeError(f"{module_name}:{class_name} is not a Predictor")
    return cls
