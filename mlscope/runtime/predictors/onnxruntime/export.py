"""The ONNX graph ONNX Runtime runs: the manifest's own file, or one exported from its PyTorch source
and cached by the manifest's content hash.

The export runs in a child process (`python -m mlscope.runtime.predictors.onnxruntime.export`), so
the process that measures ONNX Runtime never imports PyTorch: its memory, threads and import time
stay its own. Nothing here imports onnxruntime: the docker runner makes the graph on the host
(`prefetch_on_host`, the framework's `host_prefetch`) for a container that has no torch.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from mlscope.contract.manifest import Manifest, parse_manifest
from mlscope.contract.options import PredictorOptions
from mlscope.runtime.predictors.files import UPLOAD_URL, made_by_child, model_file

__all__ = ["OPSET", "export_onnx", "exported_graph", "onnx_graph", "prefetch_on_host"]

OPSET = 17


def exported_graph(manifest: Manifest, cache_dir: Path, seed: int = 0, timeout_s: float = 1800) -> Path:
    """The cached ONNX graph of the manifest, exported on first use.

    Concurrent callers wait on a lock instead of exporting twice; a partial file never becomes
    visible under the final name. A graph already cached is only read: no lock, no write, so a
    cache mounted read-only (the docker runner's, where the host exported it first) serves it.

    Raises:
        PredictorError: the export failed; the message carries the exporter's last lines. Or the
            graph is not cached and the cache cannot be written.
    """
    target = cache_dir / "onnx" / f"{manifest.sha256}-seed{seed}.onnx"
    document = json.dumps({"manifest": manifest.to_dict(), "origin": manifest.origin, "seed": seed})
    made_by_child(
        target,
        [sys.executable, "-m", "mlscope.runtime.predictors.onnxruntime.export"],
        stdin=document,
        timeout_s=timeout_s,
        unwritable=f"{manifest.name} has no exported ONNX graph at {target}, and the cache cannot be "
        "written to export it",
        failed=f"exporting {manifest.name} to ONNX failed",
    )
    return target


def onnx_graph(manifest: Manifest, cache_dir: Path, seed: int = 0, timeout_s: float = 1800) -> Path:
    """The graph of the manifest: its own file for an `onnx` source (checked against its SHA-256; an
    uploaded model's `sha256:<hex>` is its copy in the cache), else the cached export of its PyTorch
    source (`exported_graph`).

    Raises:
        PredictorError: the file is missing or differs, or the export failed.
    """
    source = manifest.source
    if source.kind == "onnx":
        return model_file(source.target, source.options.get("sha256"), cache_dir)
    return exported_graph(manifest, cache_dir, seed=seed, timeout_s=timeout_s)


def prefetch_on_host(
    manifest: Manifest, options: PredictorOptions, cache_dir: Path, *, timeout_s: float
) -> tuple[Path, ...]:
    """The framework's host prefetch (`FrameworkSpec.host_prefetch`): export the graph (and make its
    int8 quantisation when asked for) into the cache a container mounts, or name the manifest's own
    graph file, which it must see read-only (an uploaded model's is in the cache already: it is
    checked here, and needs no mount of its own).

    Raises:
        PredictorError: the file is missing or the export failed.
        subprocess.TimeoutExpired: the export ran past `timeout_s`.
    """
    graph = onnx_graph(manifest, cache_dir, seed=options.seed, timeout_s=timeout_s)
    if options.quantize == "int8":  # ONNX Runtime's int8 graph, made beside it (`quantize`)
        from mlscope.runtime.predictors.onnxruntime.quantize import quantised_graph

        quantised_graph(graph, cache_dir, timeout_s=timeout_s)
    source = manifest.source
    return (graph.resolve(),) if source.kind == "onnx" and not UPLOAD_URL.match(source.target) else ()


def export_onnx(manifest: Manifest, path: Path, seed: int = 0) -> None:
    """Export the manifest's PyTorch model to ONNX at `path`, batch dimension dynamic."""
    import numpy as np
    import torch

    from mlscope.runtime.predictors.inputs import synthetic_batch
    from mlscope.runtime.predictors.pytorch.models import build_module

    model = build_module(manifest, seed=seed)
    arrays = synthetic_batch(manifest, 1, np.random.default_rng(seed))
    example = tuple(torch.from_numpy(arrays[spec.name]) for spec in manifest.inputs)
    input_names = [spec.name for spec in manifest.inputs]
    output_names = [spec.name for spec in manifest.outputs]
    dynamic = {name: {0: "batch"} for name in input_names + output_names}
    with torch.inference_mode():
        torch.onnx.export(
            model,
            example,
            str(path),
            input_names=input_names,
            output_names=output_names,
            dynamic_axes=dynamic,
            opset_version=OPSET,
            dynamo=False,
        )


def _main() -> None:
    job = json.loads(sys.stdin.read())
    manifest = parse_manifest(job["manifest"], origin=job["origin"])
    export_onnx(manifest, Path(sys.argv[1]), seed=int(job["seed"]))


if __name__ == "__main__":
    _main()
