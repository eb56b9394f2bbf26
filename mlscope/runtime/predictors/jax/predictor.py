"""The JAX predictor (docs/jax.md): the manifest's model built as the PyTorch predictor builds it (the
same seeded random weights, `pytorch.models.build_module`), its weights copied into the Flax NNX
definition of its architecture (`from_torch`), and that module's forward jitted by XLA on the
CPU. The jit compile of each batch size's shapes is the compile phase (`compile`), timed by the
runtime as cold_start.compile_ms and before each later batch size, so no compile is timed as an
inference.

Because the weights are PyTorch's own, a parity check against PyTorch compares two frameworks running
one model with the same weights on the same inputs.
"""

from __future__ import annotations

import importlib.metadata
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from mlscope.runtime.predictors.base import Predictor, PredictorError
from mlscope.runtime.predictors.jax.from_torch import from_torch, parameters
from mlscope.runtime.predictors.jax.profile import PROFILE_LEVELS, profiled_layers
from mlscope.runtime.predictors.jax.support import model_refusal
from mlscope.runtime.trace.profiled import ProfiledPass

__all__ = ["JaxPredictor"]


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


# The event JAX records when a compile takes its executable from the persistent compilation cache.
_CACHE_HIT = "/jax/compilation_cache/cache_hits"
_cache_hits = 0


def _count_cache_hits(event: str, **_: Any) -> None:
    global _cache_hits
    if event == _CACHE_HIT:
        _cache_hits += 1


jax.monitoring.register_event_listener(_count_cache_hits)


def _shapes(batch: tuple[jax.Array, ...]) -> tuple[tuple[tuple[int, ...], str], ...]:
    """What an executable is compiled for: each input's shape and dtype."""
    return tuple((tuple(array.shape), str(array.dtype)) for array in batch)


class JaxPredictor(Predictor):
    NAME: ClassVar[str] = "jax"

    _module: nnx.Module | None = None
    _state: Any = None
    _forward: Any = None
    _executables: dict[Any, Any] | None = None
    _hits_before = 0

    @classmethod
    def framework_version(cls) -> str:
        return _version("jax") or str(jax.__version__)

    @classmethod
    def libraries(cls) -> dict[str, Any]:
        return {
            "jaxlib": _version("jaxlib"),
            "flax": _version("flax"),
            "backend": jax.default_backend(),
            "devices": [str(device) for device in jax.devices()],
        }

    def load(self) -> None:
        if self.device != "cpu":
            raise PredictorError(f"device {self.device}: mlscope runs JAX on the CPU only; use --device cpu")
        refusal = model_refusal(self.manifest)
        if refusal is not None:
            raise PredictorError(refusal)
        from mlscope.runtime.predictors.pytorch.models import build_module

        self._module = from_torch(build_module(self.manifest, seed=self.options.seed))
        graphdef, self._state = nnx.split(self._module)

        def forward(state: Any, *inputs: jax.Array) -> jax.Array:
            return nnx.merge(graphdef, state)(*inputs)

        self._forward = jax.jit(forward)
        self._executables = {}
        self._hits_before = _cache_hits

    def compile(self, batch: tuple[jax.Array, ...]) -> bool:
        """XLA's compile of the jitted forward for `batch`'s shapes (`jit(...).lower(...).compile()`):
        one executable per batch size, kept for `predict`."""
        assert self._executables is not None, "load() first"
        key = _shapes(batch)
        if key not in self._executables:
            self._executables[key] = self._forward.lower(self._state, *batch).compile()
        return True

    def compilations(self) -> int | None:
        """The executables compiled so far (one per batch size; a shape first seen by `predict` adds
        one)."""
        return 0 if self._executables is None else len(self._executables)

    def compile_cached(self) -> bool | None:
        """Whether a compile since `load` took its executable from JAX's persistent compilation cache
        (JAX's monitoring event for a cache hit). The cache is off unless the user configures it
        (JAX_COMPILATION_CACHE_DIR): mlscope configures none."""
        return _cache_hits > self._hits_before

    def prepare(self, arrays: dict[str, np.ndarray]) -> tuple[jax.Array, ...]:
        """The inputs in the manifest's order, on the CPU device; integers as int32 (JAX's own width
        without 64-bit mode)."""
        batch = []
        for spec in self.manifest.inputs:
            array = arrays[spec.name]
            if np.issubdtype(array.dtype, np.integer) and not jax.config.values["jax_enable_x64"]:
                array = array.astype(np.int32)
            batch.append(jax.device_put(jnp.asarray(array)))
        return tuple(batch)

    def predict(self, batch: tuple[jax.Array, ...]) -> Any:
        assert self._executables is not None, "load() first"
        key = _shapes(batch)
        if key not in self._executables:
            self.compile(batch)
        outputs = self._executables[key](self._state, *batch)
        return jax.block_until_ready(outputs)

    def trace_pass(self, profiled: ProfiledPass, batch: Any) -> bool:
        """FRAMEWORK: the traced inferences under jax.profiler, XLA's events converted to layer spans
        (`profile.profiled_layers`).

        Returns:
            True for FRAMEWORK, False (nothing run) for any other level.
        """
        if profiled.level not in PROFILE_LEVELS:
            return False
        profiled.warm_up(lambda: self.predict(batch))
        profiled.tracer.extend(profiled_layers(lambda: self.predict(batch), profiled))
        return True

    def outputs_to_numpy(self, outputs: Any) -> dict[str, np.ndarray]:
        return {self.manifest.outputs[0].name: np.asarray(outputs)}

    def describe(self) -> dict[str, Any]:
        facts = super().describe()
        if self._module is not None:
            facts["definition"] = f"flax.nnx {type(self._module).__name__}"
            facts["parameters"] = parameters(self._module)
        if self._executables is not None:
            facts["compiled_shapes"] = len(self._executables)
        return facts

    def close(self) -> None:
        self._executables = None
        self._forward = None
        self._state = None
        self._module = None
