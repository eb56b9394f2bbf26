"""What a predictor may do beyond the `Predictor` interface, each a protocol checked with `isinstance`
where it is used: a predictor has a capability by defining its methods, and one that does not is
answered for (the result says so) rather than asked.

- `Generates`: the generate scenario (`runtime.generate.job`).
- `WarmStarts`: sharing its loaded weights through the model store (`runtime.warm_start`).
- `TracesPasses`: profiled passes at the FRAMEWORK and LIBRARY trace levels (`runtime.trace.passes`).

Which frameworks generate is also their registration's `FrameworkSpec.generates`, read where
frameworks are listed without importing one (a generate run that names none); a farm's brick jobs
are `FrameworkSpec.bricks`, run by the predictor runtime without a predictor.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:  # annotations only: listing frameworks imports the predictors package
    from mlscope.contract.generation import GenerationSettings
    from mlscope.runtime.generate.records import GenerateEngine
    from mlscope.runtime.model_store import MappedModel, WeightsToStore
    from mlscope.runtime.trace.profiled import ProfiledPass

__all__ = ["Generates", "TracesPasses", "WarmStarts"]


@runtime_checkable
class Generates(Protocol):
    """A predictor that runs the generate scenario."""

    def generation_engine(self, settings: GenerationSettings) -> GenerateEngine:
        """The model as a token generator for the generate scenario, loaded (this replaces `load`
        for a generate job: the generative model is another module than the one `predict` runs).

        Raises:
            PredictorError: this model cannot generate tokens; says why.
        """
        ...


@runtime_checkable
class WarmStarts(Protocol):
    """A predictor whose loaded weights can be shared through the model store (a warm start)."""

    def warm_variant(self) -> str | None:
        """What determines this predictor's stored weights beyond the manifest and the seed (an
        optimisation level, providers), as one string: part of its model store key.

        Returns:
            None when this model has no warm start: the result then says so.
        """
        ...

    def weights_to_store(self) -> WeightsToStore:
        """The loaded model's weights, laid out for the model store (called after `load`).

        Raises:
            PredictorError: this model cannot be shared through the store.
        """
        ...

    def load_mapped(self, mapped: MappedModel) -> None:
        """Load the model from the store's mapped weights instead of from its source (a warm
        start): no weights read from a file, none copied on the host. Replaces `load`; the
        predictor keeps `mapped` referenced until `close`.

        Raises:
            PredictorError: the entry does not fit the model.
        """
        ...


@runtime_checkable
class TracesPasses(Protocol):
    """A predictor with a profiler for the FRAMEWORK or LIBRARY trace level."""

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
            False when this framework cannot trace that level (nothing was recorded); the pass's
            note then says why when the predictor's `NO_PROFILER` names the level.
        """
        ...
