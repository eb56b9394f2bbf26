"""MXNet: the predictor (`predictor`) and its profiled passes (`profile`).

Imports no framework: this registration is read wherever frameworks are listed.
"""

from __future__ import annotations

from mlscope.runtime.frameworks import FrameworkSpec

FRAMEWORK = FrameworkSpec(
    name="mxnet",
    display="MXNet",
    import_name="mxnet",
    distributions=("mxnet", "mxnet-mkl", "mxnet-cu112"),
    predictor="mlscope.runtime.predictors.mxnet.predictor:MXNetPredictor",
    sources=frozenset({"gluon"}),
    # MXNet 1.9 needs numpy < 1.24, which the rest of mlscope's stack does not accept.
    install_hint="`mlscope env create mxnet` (an environment of its own, for --runner process), or "
    "`mlscope image build mxnet` for --runner docker",
    order=40,
    image_by_default=True,
)
