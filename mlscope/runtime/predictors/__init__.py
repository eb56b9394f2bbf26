"""Predictors: one sub-package per framework (its registration in `__init__`, its predictor, its
profiler converters), found by the framework registry (`mlscope.runtime.frameworks`, whose
`load_predictor_class` imports exactly one); the interface and what every framework shares (inputs,
model files) beside them.

Importing this package imports no framework.
"""

from __future__ import annotations

from mlscope.runtime.predictors.base import Predictor, PredictorError, PredictorOptions

__all__ = ["Predictor", "PredictorError", "PredictorOptions"]
