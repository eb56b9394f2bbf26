"""OpenVINO: the predictor (`predictor`), which runs the ONNX graph ONNX Runtime runs (the manifest's
own file, or the graph `onnxruntime.export` makes of a PyTorch source), and the converter of its
per-layer performance counters into spans (`profile`). docs/openvino.md.

Imports no framework: this registration is read wherever frameworks are listed.

It keeps OpenVINO's usage telemetry from loading, in every process that imports this package (the
predictor module is in it, so each predictor process): `import openvino` loads the model converter
(`openvino.tools.ovc`), which, where `openvino_telemetry` is importable, writes a client id under the
user's home and sends a Google Analytics event from a process forked from a thread. mlscope reaches
no network at run time, and such a fork can hang on a lock the thread's parent held and outlive the
predictor process. With `openvino_telemetry` unimportable the converter takes its own no-op stub.
"""

from __future__ import annotations

import sys

from mlscope.runtime.frameworks import FrameworkSpec

# None in sys.modules is the import system's own "not importable" (an ImportError at import).
sys.modules.setdefault("openvino_telemetry", None)  # type: ignore[arg-type]

FRAMEWORK = FrameworkSpec(
    name="openvino",
    display="OpenVINO",
    import_name="openvino",
    distributions=("openvino",),
    predictor="mlscope.runtime.predictors.openvino.predictor:OpenVinoPredictor",
    # ONNX graphs, and PyTorch sources exported to ONNX on first use (that needs torch too).
    sources=frozenset({"onnx", "torchvision", "timm", "transformers", "python"}),
    install_hint="pip install 'mlscope[openvino]'",
    order=25,
    # Its image builds from PyPI in about the time ONNX Runtime's does.
    image_by_default=True,
    # ONNX Runtime's: a container has no torch to export with, and sees only the files mounted into it.
    host_prefetch="mlscope.runtime.predictors.onnxruntime.export:prefetch_on_host",
    system_distributions=("openvino", "onnx"),
    # `--option performance_hint=LATENCY|THROUGHPUT`, `--option precision=fp32|bf16|fp16`.
    options=frozenset({"performance_hint", "precision"}),
    # Run when named (-f openvino): a model's run without -f measures what it measured before.
    by_default=False,
)
