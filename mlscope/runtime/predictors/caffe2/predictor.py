"""The Caffe2 predictor, through PyTorch 1.10: a torchvision model with seeded random weights,
exported to ONNX and converted to a Caffe2 init net (the weights) and predict net (the graph),
cached as protobuf files; run with Caffe2's workspace API on the CPU, with `workspace.BenchmarkNet`'s
per-operator averages for the LIBRARY trace level.

torch 1.10.2 is the last PyPI wheel that carries the Caffe2 extension, and it has wheels for Python
3.9 at the newest, so this module runs in a Python 3.9 environment or image of its own (see
docs/caffe2.md). The conversion works around three faults of that Caffe2 build; `describe()` names
them (_WORKAROUNDS).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import onnx
import torch
from caffe2.proto import caffe2_pb2
from caffe2.python import workspace
from caffe2.python.onnx.backend import Caffe2Backend

from mlscope.contract.manifest import Manifest
from mlscope.runtime.predictors.base import Predictor, PredictorError
from mlscope.runtime.predictors.files import local_file
from mlscope.runtime.predictors.inputs import synthetic_batch
from mlscope.runtime.trace.profiled import ProfiledPass

__all__ = ["OPSET", "Caffe2Predictor", "build_torchvision_model", "convert_to_caffe2", "nets_dir"]

# The newest ONNX opset Caffe2's ONNX backend in torch 1.10 converts (Caffe2Backend's default).
OPSET = 9

_INIT_NET, _PREDICT_NET, _FACTS = "init_net.pb", "predict_net.pb", "conversion.json"

_WORKAROUNDS = {
    "initializers_as_inputs": "torch.onnx.export(keep_initializers_as_inputs=True): without it the "
    "converted predict net reads weights no net produces ('Source for input ... is unknown')",
    "init_net_fills_only": "the converter's init net repeats every graph operator after the weight "
    "fills and lists the outputs; only its *Fill operators are kept and its external outputs cleared",
    "global_pool_renamed": "ConvPoolOpBase checks for an explicit kernel in any operator whose name "
    "contains 'Pool' (conv_pool_op_base.h), which fails for GlobalAveragePool (global_pooling=1, no "
    "kernel); such operators are renamed ('Pool' -> 'pool'), which leaves the computation as it is",
}


def build_torchvision_model(manifest: Manifest, seed: int = 0) -> torch.nn.Module:
    """The manifest's torchvision model in eval mode, with random weights drawn from `seed` (or the
    manifest's weights file). torchvision 0.11 has no `get_model`, so the builder is looked up by name.

    Raises:
        PredictorError: not a torchvision source, or torchvision has no such model.
    """
    import torchvision

    source = manifest.source
    if source.kind != "torchvision":
        raise PredictorError(f"Caffe2 converts torchvision models, not a {source.kind!r} source")
    builder = getattr(torchvision.models, source.target, None)
    if not callable(builder) or source.target.startswith("_") or isinstance(builder, type):
        raise PredictorError(f"torchvision {torchvision.__version__} has no model {source.target!r}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = builder(pretrained=False)
    if manifest.weights.kind == "url" and manifest.weights.url:
        path = local_file(manifest.weights.url, manifest.weights.sha256)
        model.load_state_dict(torch.load(str(path), map_location="cpu"))
    return model.eval()


def convert_to_caffe2(manifest: Manifest, seed: int = 0) -> tuple[Any, Any, dict[str, Any]]:
    """Export the manifest's model to ONNX and convert it to Caffe2 nets, with the workarounds.

    Returns:
        The init net (weight fills only), the predict net, and facts about the conversion.
    """
    model = build_torchvision_model(manifest, seed)
    arrays = synthetic_batch(manifest, 1, np.random.default_rng(seed))
    example = tuple(torch.from_numpy(arrays[spec.name]) for spec in manifest.inputs)
    input_names = [spec.name for spec in manifest.inputs]
    output_names = [spec.name for spec in manifest.outputs]
    with tempfile.TemporaryDirectory(prefix="mlscope-caffe2-") as folder, torch.no_grad():
        graph = Path(folder) / "model.onnx"
        torch.onnx.export(
            model,
            example,
            str(graph),
            input_names=input_names,
            output_names=output_names,
            dynamic_axes={name: {0: "batch"} for name in input_names + output_names},
            opset_version=OPSET,
            keep_initializers_as_inputs=True,
        )
        onnx_model = onnx.load(str(graph))
    converted_init, predict_net = Caffe2Backend.onnx_graph_to_caffe2_net(onnx_model, opset_version=OPSET)
    init_net = caffe2_pb2.NetDef()
    init_net.CopyFrom(converted_init)
    del init_net.op[:]
    init_net.op.extend(op for op in converted_init.op if op.type.endswith("Fill"))
    del init_net.external_output[:]
    renamed = 0
    for op in predict_net.op:
        global_pooling = any(arg.name == "global_pooling" and arg.i for arg in op.arg)
        if global_pooling and "Pool" in op.name:
            op.name = op.name.replace("Pool", "pool")
            renamed += 1
    facts = {
        "opset": OPSET,
        "onnx_nodes": len(onnx_model.graph.node),
        "init_ops": {"converted": len(converted_init.op), "kept": len(init_net.op)},
        "predict_ops": len(predict_net.op),
        "global_pool_renamed": renamed,
        "torch": torch.__version__,
        "onnx": onnx.__version__,
    }
    return init_net, predict_net, facts


def nets_dir(manifest: Manifest, cache_dir: Path, seed: int = 0) -> Path:
    """Where the manifest's converted nets are cached (it may not exist yet)."""
    return Path(cache_dir) / "caffe2" / f"{manifest.sha256}-seed{seed}"


def _write_nets(target: Path, init_net: Any, predict_net: Any, facts: dict[str, Any]) -> bool:
    """Cache the nets under `target` in one step: a folder written aside, then renamed into place,
    so no reader ever sees half of it. Returns False when the cache cannot be written (a read-only
    mount): the nets are then used from memory."""
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    try:
        partial.mkdir(parents=True)
        (partial / _INIT_NET).write_bytes(init_net.SerializeToString())
        (partial / _PREDICT_NET).write_bytes(predict_net.SerializeToString())
        (partial / _FACTS).write_text(json.dumps(facts, indent=2))
        os.rename(partial, target)
    except OSError:
        shutil.rmtree(partial, ignore_errors=True)
        return target.is_dir()  # another process may have put it there first
    return True


def _read_nets(source: Path) -> tuple[Any, Any, dict[str, Any]]:
    init_net, predict_net = caffe2_pb2.NetDef(), caffe2_pb2.NetDef()
    init_net.ParseFromString((source / _INIT_NET).read_bytes())
    predict_net.ParseFromString((source / _PREDICT_NET).read_bytes())
    return init_net, predict_net, json.loads((source / _FACTS).read_text())


class Caffe2Predictor(Predictor):
    NAME: ClassVar[str] = "caffe2"

    _nets: tuple[Any, Any, dict[str, Any]] | None = None
    _cached: bool = False
    _workspace: str | None = None
    _previous_workspace: str = "default"
    _net_name: str | None = None
    _output_blobs: tuple[str, ...] = ()

    _workspaces: ClassVar[itertools.count] = itertools.count()

    @classmethod
    def framework_version(cls) -> str:
        return str(torch.__version__)

    @classmethod
    def libraries(cls) -> dict[str, Any]:
        import google.protobuf

        return {
            "caffe2": "the Caffe2 extension of torch " + str(torch.__version__),
            "cuda_build": torch.version.cuda,
            "caffe2_gpu_support": bool(workspace.has_gpu_support),
            "mkldnn": torch.backends.mkldnn.is_available(),
            "openmp": torch.backends.openmp.is_available(),
            "onnx": onnx.__version__,
            "protobuf": google.protobuf.__version__,
        }

    def fetch(self) -> None:
        """Read the converted nets from the cache, or convert them and cache them (in memory only
        when the cache is read-only)."""
        target = nets_dir(self.manifest, self.cache_dir, self.options.seed)
        if (target / _FACTS).is_file():
            self._nets, self._cached = _read_nets(target), True
            return
        init_net, predict_net, facts = convert_to_caffe2(self.manifest, self.options.seed)
        self._cached = _write_nets(target, init_net, predict_net, facts)
        self._nets = (init_net, predict_net, facts)

    def load(self) -> None:
        if self.device != "cpu":
            raise PredictorError(
                f"device {self.device}: mlscope runs Caffe2 nets on the CPU only. This torch "
                f"{torch.__version__} wheel is a CUDA {torch.version.cuda} build whose Caffe2 extension "
                f"{'sees a GPU' if workspace.has_gpu_support else 'sees no GPU here'}, but the predictor "
                "places no net on a GPU"
            )
        if self._nets is None:
            self.fetch()
        assert self._nets is not None
        if self.options.threads:
            torch.set_num_threads(self.options.threads)
        init_net, predict_net, _ = self._nets
        # A workspace of its own, so blobs named alike by two predictors in one process never meet.
        self._previous_workspace = workspace.CurrentWorkspace()
        self._workspace = f"mlscope-caffe2-{os.getpid()}-{next(self._workspaces)}"
        workspace.SwitchWorkspace(self._workspace, True)
        workspace.RunNetOnce(init_net)
        inputs = {spec.name for spec in self.manifest.inputs}
        missing = [b for b in predict_net.external_input if b not in inputs and not workspace.HasBlob(b)]
        if missing:
            raise PredictorError(f"the converted init net leaves {len(missing)} weights unset: {missing[:5]}")
        for name, array in synthetic_batch(self.manifest, 1, np.random.default_rng(0)).items():
            workspace.FeedBlob(name, array)
        workspace.CreateNet(predict_net, True)
        self._net_name = predict_net.name
        self._output_blobs = tuple(spec.name for spec in self.manifest.outputs)

    def prepare(self, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {spec.name: np.ascontiguousarray(arrays[spec.name]) for spec in self.manifest.inputs}

    def predict(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        name = self._net_name
        assert name is not None, "load() first"
        for blob, array in batch.items():
            workspace.FeedBlob(blob, array)
        workspace.RunNet(name)  # a simple net: runs its operators in order and returns when done
        return {blob: workspace.FetchBlob(blob) for blob in self._output_blobs}

    def trace_pass(self, profiled: ProfiledPass, batch: Any) -> bool:
        """LIBRARY: Caffe2's own per-operator timing, `workspace.BenchmarkNet(run_individual=True)`.

        It times the pass's `iterations` runs of the whole net after its `warmup` ones, then runs
        each operator on its own `iterations` times, and reports averages, never timestamps. So the
        pass records ONE inference span standing for an average inference, holding one span per
        operator with the operator's average duration, laid end to end from the pass's start: attributes
        `timing: "average"` and `synthetic_timestamps: true` say so on every span. FRAMEWORK
        (layers) has no counterpart in a Caffe2 net: False.

        Args: as `Predictor.trace_pass`.

        Returns:
            True for LIBRARY, False (nothing run) for any other level.
        """
        if profiled.level != "LIBRARY":
            return False
        name, predict_net = self._net_name, self._nets[1] if self._nets else None
        assert name is not None and predict_net is not None, "load() first"
        tracer, iterations = profiled.tracer, max(profiled.iterations, 1)
        for blob, array in batch.items():
            workspace.FeedBlob(blob, array)
        start = tracer.clock.now()
        averages_ms = [float(ms) for ms in workspace.BenchmarkNet(name, profiled.warmup, iterations, True)]
        wall_ns = tracer.clock.now() - start
        net_ms, operator_ms = averages_ms[0], averages_ms[1:]
        common = {
            **profiled.attributes,
            "timing": "average",
            "averaged_over": iterations,
            "synthetic_timestamps": True,
            "source": "caffe2 workspace.BenchmarkNet(run_individual=True)",
        }
        inference_id = tracer.add(
            "inference",
            "MODEL",
            start,
            start + int(sum(operator_ms) * 1e6),
            parent_id=profiled.parent_id,
            attributes={**common, "net_ms_average": net_ms, "benchmark_wall_ms": wall_ns / 1e6},
        )
        cursor = start
        # One average per operator, in net order (Python 3.9 here: no zip(strict=)).
        for index, (op, ms) in enumerate(zip(predict_net.op, operator_ms)):  # noqa: B905
            end = cursor + int(ms * 1e6)
            tracer.add(
                op.type,
                "LIBRARY",
                cursor,
                end,
                parent_id=inference_id,
                attributes={**common, "operator": op.name, "operator_index": index, "ms_average": ms},
            )
            cursor = end
        return True

    def outputs_to_numpy(self, outputs: Any) -> dict[str, np.ndarray]:
        return dict(outputs)

    def describe(self) -> dict[str, Any]:
        facts = super().describe()
        facts["threads"] = torch.get_num_threads()
        facts["net_type"] = "simple (operators run one after another)"
        if self._nets is not None:
            conversion = dict(self._nets[2])
            facts["conversion"] = {
                **conversion,
                "cached": self._cached,
                "workarounds": {key: text for key, text in _WORKAROUNDS.items()},
            }
        return facts

    def close(self) -> None:
        if self._workspace is not None:
            with contextlib.suppress(RuntimeError):
                workspace.ResetWorkspace()
                workspace.SwitchWorkspace(self._previous_workspace, True)
        self._workspace = self._net_name = None
