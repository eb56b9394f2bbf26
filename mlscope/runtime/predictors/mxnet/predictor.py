"""The MXNet predictor: Gluon model-zoo architectures with seeded random weights, hybridized with a
static graph for the measured pass, on `cpu()` or `gpu(N)`, and waiting for MXNet's asynchronous
engine so a timed inference covers its work.

Threads: MXNet fixes its OpenMP thread count when the library loads (src/engine/openmp.cc: from
MXNET_OMP_MAX_THREADS, else OMP_NUM_THREADS, else half the processors on x86, assuming
hyper-threading: one thread on a 2-vCPU machine). This module is imported before a job's options
are read, so `options.threads` cannot change it here; the process runner starts the predictor with
OMP_NUM_THREADS set to the requested count, and a request for a count the import did not get is
refused rather than run with another. `inter_op_threads` (MXNET_CPU_WORKER_NTHREADS, engine workers
per CPU device) is refused the same way unless the environment set it.
"""

from __future__ import annotations

import os

# What the library will read when it loads, kept before the import so `describe` says what it got.
_THREAD_ENV = {
    name: os.environ.get(name)
    for name in ("MXNET_OMP_MAX_THREADS", "OMP_NUM_THREADS", "MXNET_CPU_WORKER_NTHREADS")
}

import platform  # noqa: E402 - the environment above is read before mxnet loads
from typing import Any, ClassVar  # noqa: E402

import mxnet as mx  # noqa: E402
import numpy as np  # noqa: E402

from mlscope.runtime.predictors.base import Predictor, PredictorError  # noqa: E402
from mlscope.runtime.predictors.mxnet.profile import layer_pass, operator_pass  # noqa: E402
from mlscope.runtime.trace.profiled import ProfiledPass  # noqa: E402

__all__ = ["MXNetPredictor", "openmp_threads"]

_FEATURES = ("MKLDNN", "CUDA", "CUDNN", "NCCL", "TENSORRT", "OPENMP", "LAPACK", "INT64_TENSOR_SIZE")
_BLAS = ("BLAS_MKL", "BLAS_OPEN", "BLAS_ATLAS", "BLAS_APPLE")


def _int_or_none(value: str | None) -> int | None:
    try:
        return int(value) if value else None
    except ValueError:
        return None


def openmp_threads(environ: dict[str, str | None], processors: int, machine: str) -> int:
    """The OpenMP threads MXNet 1.9's operators use, by its own rule (src/engine/openmp.cc), from the
    environment it loaded with.

    Args:
        environ: MXNET_OMP_MAX_THREADS and OMP_NUM_THREADS as they were when mxnet loaded.
        processors: the processors OpenMP sees.
        machine: `platform.machine()`; on x86 MXNet halves the processors, assuming hyper-threads.
    """
    explicit = _int_or_none(environ.get("MXNET_OMP_MAX_THREADS")) or _int_or_none(
        environ.get("OMP_NUM_THREADS")
    )
    if explicit:
        return explicit
    halved = machine.lower() in ("x86_64", "amd64", "i386", "i686")
    return max(processors // 2 if halved else processors, 1)


class MXNetPredictor(Predictor):
    NAME: ClassVar[str] = "mxnet"

    _net: Any = None
    _context: Any = None

    @classmethod
    def framework_version(cls) -> str:
        return str(mx.__version__)

    @classmethod
    def libraries(cls) -> dict[str, Any]:
        features = mx.runtime.Features()
        facts: dict[str, Any] = {name.lower(): features.is_enabled(name) for name in _FEATURES}
        facts["blas"] = next((name[5:].lower() for name in _BLAS if features.is_enabled(name)), None)
        return facts

    def _threads(self) -> int:
        return openmp_threads(_THREAD_ENV, os.cpu_count() or 1, platform.machine())

    def _check_threads(self) -> None:
        wanted, got = self.options.threads, self._threads()
        if wanted and wanted != got:
            raise PredictorError(
                f"threads={wanted}: MXNet fixes its thread count when it loads and loaded with {got} "
                f"(OMP_NUM_THREADS={_THREAD_ENV['OMP_NUM_THREADS']}); use --runner process, which starts "
                "the predictor with OMP_NUM_THREADS set to the request"
            )
        workers = _int_or_none(_THREAD_ENV["MXNET_CPU_WORKER_NTHREADS"])
        if self.options.inter_op_threads and self.options.inter_op_threads != (workers or 1):
            raise PredictorError(
                f"inter_op_threads={self.options.inter_op_threads}: MXNet reads its engine workers "
                "(MXNET_CPU_WORKER_NTHREADS) only when it loads, and loaded with "
                f"{workers or 1}; set MXNET_CPU_WORKER_NTHREADS in the predictor's environment"
            )

    def _device_context(self) -> Any:
        kind, _, index_text = self.device.partition(":")
        if kind == "cpu":
            return mx.cpu()
        if kind != "cuda":
            raise PredictorError(f"device {self.device}: MXNet runs on cpu or cuda[:N]")
        index = int(index_text or 0)
        if not mx.runtime.Features().is_enabled("CUDA"):
            raise PredictorError(f"device {self.device}: this MXNet build has no CUDA (a CPU-only wheel)")
        available = mx.context.num_gpus()
        if index >= available:
            raise PredictorError(f"device {self.device}: MXNet sees {available} GPUs")
        return mx.gpu(index)

    def load(self) -> None:
        source = self.manifest.source
        if source.kind != "gluon":
            raise PredictorError(f"MXNet builds models from the Gluon model zoo, not from {source.kind!r}")
        self._check_threads()
        context = self._device_context()
        from mxnet.gluon.model_zoo import vision

        mx.random.seed(self.options.seed)
        np.random.seed(self.options.seed)
        try:
            net = vision.get_model(source.target, pretrained=False)
        except ValueError as exc:  # the zoo's "Model X is not supported. Available options are ..."
            raise PredictorError(f"gluon: {exc}") from exc
        # He initialisation (what the zoo's ResNets were trained from): random weights keep
        # activations in range through deep stacks, so outputs stay finite.
        net.initialize(mx.init.Xavier(rnd_type="gaussian", factor_type="in", magnitude=2), ctx=context)
        self._net, self._context = net, context
        self._hybridize()

    def _hybridize(self) -> None:
        # One cached graph with memory planned once for fixed shapes: what a Gluon model is deployed as.
        self._net.hybridize(static_alloc=True, static_shape=True)

    def prepare(self, arrays: dict[str, np.ndarray]) -> tuple[Any, ...]:
        batch = tuple(
            mx.nd.array(arrays[spec.name], ctx=self._context, dtype=spec.dtype)
            for spec in self.manifest.inputs
        )
        for array in batch:
            array.wait_to_read()
        return batch

    def predict(self, batch: tuple[Any, ...]) -> Any:
        net = self._net
        assert net is not None, "load() first"
        outputs = net(*batch)
        # MXNet queues the work and returns at once: wait, so the caller's clock covers it.
        for output in outputs if isinstance(outputs, list | tuple) else (outputs,):
            output.wait_to_read()
        return outputs

    def trace_pass(self, profiled: ProfiledPass, batch: Any) -> bool:
        """FRAMEWORK: leaf Gluon blocks by hooks; LIBRARY: `mx.profiler` operators. Both run the network
        imperatively (a hybridized graph hides its blocks; see `mxnet.profile`) and
        hybridize it again afterwards, so later inferences run the measured graph."""
        net = self._net
        assert net is not None, "load() first"

        def run() -> Any:
            return self.predict(batch)

        if profiled.level == "FRAMEWORK":
            layer_pass(net, run, profiled, wait_all=mx.nd.waitall, restore=self._hybridize)
            return True
        if profiled.level == "LIBRARY":
            operator_pass(net, run, profiled, mx=mx, restore=self._hybridize)
            return True
        return False

    def outputs_to_numpy(self, outputs: Any) -> dict[str, np.ndarray]:
        values = outputs if isinstance(outputs, list | tuple) else (outputs,)
        names = [spec.name for spec in self.manifest.outputs]
        return {name: value.asnumpy() for name, value in zip(names, values, strict=False)}

    def describe(self) -> dict[str, Any]:
        facts = super().describe()
        facts["threads"] = self._threads()
        facts["inter_op_threads"] = _int_or_none(_THREAD_ENV["MXNET_CPU_WORKER_NTHREADS"]) or 1
        facts["hybridized"] = {"static_alloc": True, "static_shape": True}
        facts["engine"] = os.environ.get("MXNET_ENGINE_TYPE") or "ThreadedEnginePerDevice"
        return facts

    def close(self) -> None:
        self._net = None
        mx.nd.waitall()
