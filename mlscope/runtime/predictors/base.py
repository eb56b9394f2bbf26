"""The predictor interface: what every framework adapter does, and nothing framework-specific.

A predictor lives in the process that runs the evaluation (the caller's, a child process, later a
container) and is the only code there that imports its framework. What a predictor may do beyond
this (generate tokens, start warm, trace passes) is a protocol of `capabilities`, which it has by
defining that protocol's methods.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from mlscope.contract.errors import MlscopeError
from mlscope.contract.options import PredictorOptions

if TYPE_CHECKING:  # annotations only: listing frameworks imports this module, and stays light
    from collections.abc import Mapping

    import numpy as np

    from mlscope.contract.manifest import Manifest

__all__ = ["GenerateOnlyPredictor", "Predictor", "PredictorError", "PredictorOptions"]


class PredictorError(MlscopeError):
    """A predictor could not do what was asked (no such device, a provider missing, a bad graph)."""


@dataclass
class Predictor(ABC):
    """One model on one framework and device.

    Lifecycle: `fetch()` (obtain the graph: download, export; cached), `load()`, then any number of
    `prepare()` + `predict()`, then `close()`.
    """

    NAME: ClassVar[str]
    # Trace levels ("FRAMEWORK", "LIBRARY") this framework has no profiler for, each with why, in one
    # clause: a profiled pass it cannot trace says so in its note (`runtime.trace.passes`), so a
    # trace without layers tells the reader whether the framework has none to give or mlscope has
    # not wired one. A level not named here is noted without a why.
    NO_PROFILER: ClassVar[Mapping[str, str]] = {}

    manifest: Manifest
    device: str = "cpu"
    options: PredictorOptions = field(default_factory=PredictorOptions)
    cache_dir: Path = field(default_factory=lambda: Path.cwd() / ".mlscope-cache")

    @classmethod
    @abstractmethod
    def framework_version(cls) -> str:
        """Returns: the version of the framework this process imported."""

    @classmethod
    @abstractmethod
    def libraries(cls) -> dict[str, Any]:
        """Returns: versions and build facts of the libraries under the framework (CUDA, cuDNN, oneDNN...)."""

    def fetch(self) -> None:  # noqa: B027 - most frameworks have nothing to fetch
        """Obtain what `load` needs (download, convert), once, into the cache. Default: nothing."""

    @abstractmethod
    def load(self) -> None:
        """Build the model on the device, ready to predict.

        Raises:
            PredictorError: the device or an option is not available here.
        """

    def compile(self, batch: Any) -> bool:
        """Compile the loaded model for `batch`'s shapes (a prepared batch), ahead of timing it: the
        runtime calls it after `load` and before each further batch size is measured, and times it.
        Default: nothing to compile (False); a framework with an ahead-of-use compiler (torch.compile)
        compiles here and returns True.

        Raises:
            PredictorError: the compiler cannot run here (say what is missing).
        """
        return False

    def compilations(self) -> int | None:
        """How many graphs the model has had compiled so far (a count that grows with each compile
        and recompile), or None where nothing is compiled."""
        return None

    def compile_cached(self) -> bool | None:
        """Whether the compiles so far took graphs from the compiler's cache (compiled by an earlier
        process), or None where nothing is compiled: a cached compile is not a cold one."""
        return None

    @abstractmethod
    def prepare(self, arrays: dict[str, np.ndarray]) -> Any:
        """Turn one batch of input arrays (by input name) into what `predict` takes, on the device.

        Copying inputs to the device is done here, outside the timed region.
        """

    @abstractmethod
    def predict(self, batch: Any) -> Any:
        """Run one inference on a prepared batch and return when its results are ready."""

    @abstractmethod
    def outputs_to_numpy(self, outputs: Any) -> dict[str, np.ndarray]:
        """Outputs of `predict` as host arrays by output name (for checks, not on the timed path)."""

    def timer(self) -> Any | None:
        """A device timer for the measurement loop (CUDA events on a GPU), or None for the host clock."""
        return None

    def device_memory_peak_bytes(self) -> int | None:
        """The device allocator's peak since `load` (the result's memory.peak_device_mb), None on a
        host device or where the framework does not report one."""
        return None

    def describe(self) -> dict[str, Any]:
        """Returns: what ran, for the result: framework name and version, device, effective options."""
        return {
            "name": self.NAME,
            "version": self.framework_version(),
            "device": self.device,
            "libraries": self.libraries(),
        }

    def close(self) -> None:  # noqa: B027 - nothing to release by default
        """Release the model and its memory."""


class GenerateOnlyPredictor(Predictor):
    """A predictor that runs only the generate scenario (`Predictor.generation_engine`): an endpoint,
    llama.cpp. The other scenarios' methods refuse, saying why in `ONLY_GENERATE`."""

    ONLY_GENERATE: ClassVar[str] = "this framework runs only the generate scenario (--scenario generate)"

    def load(self) -> None:
        raise PredictorError(self.ONLY_GENERATE)

    def prepare(self, arrays: dict[str, np.ndarray]) -> Any:
        raise PredictorError(self.ONLY_GENERATE)

    def predict(self, batch: Any) -> Any:
        raise PredictorError(self.ONLY_GENERATE)

    def outputs_to_numpy(self, outputs: Any) -> dict[str, np.ndarray]:
        raise PredictorError(self.ONLY_GENERATE)
