"""The predictor interface: what every framework adapter does, and nothing framework-specific.

A predictor lives in the process that runs the evaluation (the caller's, a child process, later a
container) and is the only code there that imports its framework.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from mlscope.contract.errors import MlscopeError
from mlscope.contract.options import PredictorOptions
from mlscope.runtime.trace.profiled import ProfiledPass

if TYPE_CHECKING:  # annotations only: listing frameworks imports this module, and stays light
    import numpy as np

    from mlscope.contract.generation import GenerationSettings
    from mlscope.contract.manifest import Manifest
    from mlscope.runtime.generate.records import GenerateEngine
    from mlscope.runtime.model_store import MappedModel, WeightsToStore

__all__ = ["Predictor", "PredictorError", "PredictorOptions"]


class PredictorError(MlscopeError):
    """A predictor could not do what was asked (no such device, a provider missing, a bad graph)."""


@dataclass
class Predictor(ABC):
    """One model on one framework and device.

    Lifecycle: `fetch()` (obtain the graph: download, export; cached), `load()`, then any number of
    `prepare()` + `predict()`, then `close()`.
    """

    NAME: ClassVar[str]

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

    def trace_pass(self, profiled: ProfiledPass, batch: Any) -> bool:
        """Run one profiled pass on a prepared batch and record its spans into `profiled.tracer`.

        Runs after the measured pass, so no latency figure ever comes from a profiled inference.
        Each of the `profiled.iterations` traced inferences (after `profiled.warmup` untraced ones)
        is a MODEL span "inference" under `profiled.parent_id`, with the level's spans inside it.

        Args:
            profiled: the level ("FRAMEWORK": layers, "LIBRARY": operators, and kernels on a GPU),
                the tracer, the pass's span and the inference counts.
            batch: a batch from `prepare`, of `profiled.batch_size` samples.

        Returns:
            False when this framework cannot trace that level (nothing was recorded).
        """
        return False

    def generation_engine(self, settings: GenerationSettings) -> GenerateEngine:
        """The model as a token generator for the generate scenario, loaded (this replaces `load`
        for a generate job: the generative model is another module than the one `predict` runs).

        Raises:
            PredictorError: this framework, or this model, cannot generate tokens; says why.
        """
        raise PredictorError(
            f"{self.NAME} cannot run the generate scenario: it needs a framework that generates tokens "
            "in process (pytorch, for Hugging Face decoder and encoder-decoder models) or an endpoint "
            "(--endpoint URL)"
        )

    def warm_variant(self) -> str | None:
        """What determines this predictor's stored weights beyond the manifest and the seed (an
        optimisation level, providers), as one string: part of its model store key.

        Returns:
            None when this framework has no warm start (the default): the result then says so.
        """
        return None

    def weights_to_store(self) -> WeightsToStore:
        """The loaded model's weights, laid out for the model store (called after `load`).

        Raises:
            PredictorError: this framework, or this model, cannot be shared through the store.
        """
        raise PredictorError(f"{self.NAME} has no warm start")

    def load_mapped(self, mapped: MappedModel) -> None:
        """Load the model from the store's mapped weights instead of from its source (a warm
        start): no weights read from a file, none copied on the host. Replaces `load`; the
        predictor keeps `mapped` referenced until `close`.

        Raises:
            PredictorError: the entry does not fit the model, or this framework has no warm start.
        """
        raise PredictorError(f"{self.NAME} has no warm start")

    def close(self) -> None:  # noqa: B027 - nothing to release by default
        """Release the model and its memory."""
