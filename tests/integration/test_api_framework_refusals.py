"""The HTTP API refuses what ONNX Runtime and TensorRT cannot run, as the CLI does: 422 naming the
field, nothing stored. ONNX Runtime's bf16 or fp16 (it runs fp32 graphs in fp32 only) and TensorRT
on the CPU (a farm's API cannot know a worker's GPU, so the device is what it refuses; the worker
that takes the job asks for the GPU)."""

from __future__ import annotations

import pytest
from flask.testing import FlaskClient

from tests.integration.test_api import (  # noqa: F401 - app, redis_db, settings: fixtures
    app,
    assert_problem,
    redis_db,
    settings,
    submit,
)


@pytest.mark.parametrize(
    ("fields", "field", "said"),
    [
        ({"framework": "onnxruntime", "options": {"precision": "fp16"}}, "options.precision", "fp32 only"),
        (
            {"framework": "onnxruntime", "options": {"precision": "bf16"}},
            "options.precision",
            "no bf16 kernels",
        ),
        ({"framework": "tensorrt", "model": "resnet18"}, "device", "NVIDIA GPU only; use --device cuda"),
    ],
)
def test_an_evaluation_its_framework_cannot_run_is_refused_with_422_storing_nothing(
    http: FlaskClient, fields: dict[str, object], field: str, said: str
) -> None:
    # Given a farm's API, When an evaluation asks a framework for what it cannot run
    problem = assert_problem(submit(http, **fields), 422, field)
    # Then the problem names the field and why, and nothing was stored
    assert said in problem["detail"], problem
    assert http.application.extensions["mlscope"].store.count_evaluations() == 0
