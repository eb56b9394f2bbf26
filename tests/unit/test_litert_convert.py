"""LiteRT's converter, the parts that need no TensorFlow: a child's refusal or failure read back as
one line naming the field, and the representative set an int8 conversion calibrates on (the digits
train split through the manifest's own steps, never the held-out split). tests/integration/
test_litert.py converts and runs real models."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

from mlscope.contract.steps import apply_steps
from mlscope.registry.models import ModelRegistry
from mlscope.runtime.data.digits import digits_split
from mlscope.runtime.predictors.litert.convert import (
    CALIBRATION_SAMPLES,
    Refusal,
    _failure,
    _png,
    calibration_samples,
)

DIGITS = ModelRegistry.load().get("digits_cnn", "litert")


def ended(returncode: int, stdout: str = "", stderr: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.CompletedProcess(["convert"], returncode, stdout, stderr)


def test_a_refusal_the_child_explains_is_its_own_line_and_field() -> None:
    # Given a child that refused, with its field and message as its last JSON line
    said = {"field": "options.quantize", "message": "LiteRT's int8 quantisation calibrates float32 inputs"}
    # When its ending is read back
    error = _failure(DIGITS, ended(2, "Saved artifact\n" + json.dumps(said) + "\n"))
    # Then it is that refusal, as a one-line UserError naming the field
    assert error.field == "options.quantize"
    assert str(error) == "options.quantize: LiteRT's int8 quantisation calibrates float32 inputs"


def test_any_other_failure_names_the_source_and_the_last_line_that_is_not_tensorflows_log() -> None:
    # Given a child that raised, its traceback followed by TensorFlow's C++ log lines
    stderr = (
        "Traceback (most recent call last):\n"
        "ValueError: an operator TFLite has no builtin for\n"
        "W0000 00:00:1795955720.804895   24231 port.cc:153] a warning\n"
    )
    error = _failure(DIGITS, ended(1, stderr=stderr))
    # Then the line names the source's field and the error, not the log line
    assert error.field == "source.python"
    assert "an operator TFLite has no builtin for" in str(error) and "port.cc" not in str(error)
    assert len(str(error).splitlines()) == 1
    # And a child killed by a signal says so
    assert "died of signal 11" in str(_failure(DIGITS, ended(-11)))


def test_int8_calibrates_on_the_digits_train_split_through_the_manifests_steps() -> None:
    # When the digits CNN's representative set is drawn
    samples, origin = calibration_samples(DIGITS, seed=0)
    # Then it is the train split's first images, one sample each, as an evaluation feeds them
    assert len(samples) == CALIBRATION_SAMPLES and "digits train split" in origin
    (spec,) = DIGITS.inputs
    train, _ = digits_split("train")
    expected = np.asarray(apply_steps(spec.steps, _png(train[0])), dtype=np.float32)[np.newaxis]
    assert samples[0][spec.name].shape == (1, 1, 8, 8) and samples[0][spec.name].dtype == np.float32
    np.testing.assert_array_equal(samples[0][spec.name], expected)
    # And none of them is a held-out image that --dataset digits scores
    held_out, _ = digits_split("test")
    held = {
        np.asarray(apply_steps(spec.steps, _png(image)), dtype=np.float32).tobytes() for image in held_out
    }
    assert not any(sample[spec.name][0].tobytes() in held for sample in samples)


def test_an_input_that_is_not_float_cannot_be_quantised() -> None:
    # Given a model whose input is int64 token ids
    bert = ModelRegistry.load().get("bert_base", "onnxruntime")
    # When its int8 calibration set is asked for
    with pytest.raises(Refusal) as refused:
        calibration_samples(bert, seed=0)
    # Then it is refused, naming the option and what to use instead
    assert refused.value.field == "options.quantize" and "use quantize=none" in str(refused.value)
