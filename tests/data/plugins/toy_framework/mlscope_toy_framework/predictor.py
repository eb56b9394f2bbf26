"""The toy framework's predictor: every output is its input doubled."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from mlscope.runtime.predictors.base import Predictor


@dataclass
class ToyPredictor(Predictor):
    """Doubles each input array; its outputs are named as the manifest's outputs, in order."""

    NAME: ClassVar[str] = "toyfw"

    @classmethod
    def framework_version(cls) -> str:
        return "0.1.0"

    @classmethod
    def libraries(cls) -> dict[str, Any]:
        return {}

    def load(self) -> None:
        self._outputs = [output.name for output in self.manifest.outputs]

    def prepare(self, arrays: dict[str, np.ndarray]) -> Any:
        return list(arrays.values())

    def predict(self, batch: Any) -> Any:
        return [array * 2 for array in batch]

    def outputs_to_numpy(self, outputs: Any) -> dict[str, np.ndarray]:
        return dict(zip(self._outputs, outputs, strict=True))
