"""The `.tflite` flatbuffer LiteRT runs: a manifest's Keras model converted by TensorFlow's
TFLiteConverter, float or int8 post-training quantised, cached by the manifest's content hash, its
seed and its quantisation (docs/litert.md).

The conversion runs in a child process (`python -m mlscope.runtime.predictors.litert.convert`), so
the process that measures LiteRT never imports TensorFlow: its memory, threads and import time stay
LiteRT's own. It runs when a request is admitted on the machine that will run it (`admit`, the
framework's `admit` hook), so a model the converter refuses is refused in one line naming the
field, and nothing is stored; the predictor then finds the file in the cache.

`quantize=int8` is full-integer quantisation: weights and activations int8, every operator an int8
builtin, the float input quantised and the output dequantised inside the graph (the model's inputs
and outputs stay float32, so the manifest's pre- and postprocessing are unchanged). Its activation
ranges are calibrated on a representative set: for a manifest whose dataset is `digits`, the train
split's images through the manifest's own input steps (never the held-out split that `--dataset
digits` scores); for any other dataset, which mlscope does not ship, seeded synthetic inputs, and
the flatbuffer's facts say so.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from mlscope.contract.errors import UserError
from mlscope.contract.manifest import Manifest, parse_manifest
from mlscope.contract.options import PredictorOptions
from mlscope.contract.plugins import load_object
from mlscope.runtime.predictors.files import made_by_child

__all__ = ["CALIBRATION_SAMPLES", "Refusal", "admit", "convert", "converted_model", "facts_of"]

# How many samples calibrate an int8 model's activation ranges.
CALIBRATION_SAMPLES = 200
# A line of TensorFlow's C++ log (absl): severity, date, time, thread, file.
_LOG_LINE = re.compile(r"^[IWE]\d{4} |^WARNING: All log messages")
# The child's exit status for a refusal it explains in one JSON line on stdout.
_REFUSED = 2


class Refusal(UserError):
    """A model the converter cannot make, explained in one line naming the field (the child sends
    its field and message to the parent, which raises them as a UserError)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message, field=field)
        self.field: str = field


def _quantize(options: PredictorOptions) -> str:
    return options.quantize or "none"


def converted_model(
    manifest: Manifest, options: PredictorOptions, cache_dir: Path, timeout_s: float = 1800
) -> Path:
    """The cached `.tflite` of the manifest with the options' quantisation, converted on first use.

    Concurrent callers wait on a lock instead of converting twice; a partial file never becomes
    visible under the final name. Beside it, `<name>.json` holds how it was made (`facts_of`).

    Raises:
        UserError: the converter refused the model or failed (one line naming the field), or the
            file is not cached and the cache cannot be written.
    """
    quantize = _quantize(options)
    target = cache_dir / "litert" / f"{manifest.sha256}-seed{options.seed}-{quantize}.tflite"
    document = json.dumps(
        {
            "manifest": manifest.to_dict(),
            "origin": manifest.origin,
            "seed": options.seed,
            "quantize": quantize,
        }
    )
    made_by_child(
        target,
        [sys.executable, "-m", "mlscope.runtime.predictors.litert.convert"],
        stdin=document,
        beside=(".json",),
        timeout_s=timeout_s,
        unwritable=lambda exc: UserError(
            f"{manifest.name} has no LiteRT model at {target}, and the cache cannot be written to "
            f"convert it ({exc.strerror or exc})",
            field="framework",
        ),
        failed=lambda completed: _failure(manifest, completed),
    )
    return target


def _failure(manifest: Manifest, completed: subprocess.CompletedProcess[str]) -> UserError:
    """The one-line refusal of a conversion that failed: the child's own when it explained it, else
    the converter's last line, under the manifest's source."""
    if completed.returncode == _REFUSED:
        for line in reversed(completed.stdout.splitlines()):
            if line.startswith("{"):
                refusal = json.loads(line)
                return UserError(f"{refusal['field']}: {refusal['message']}", field=refusal["field"])
    # Its last line that is not one of TensorFlow's log lines ("I0000 ...", "W0000 ...").
    lines = [
        line.strip() for line in completed.stderr.splitlines() if line.strip() and not _LOG_LINE.match(line)
    ]
    if completed.returncode < 0:
        last = f"the converter's process died of signal {-completed.returncode}"
    else:
        last = lines[-1] if lines else f"exit status {completed.returncode}"
    field = f"source.{manifest.source.kind}"
    return UserError(
        f"{field}: converting {manifest.name} to LiteRT failed ({last[:300]}); LiteRT runs Keras models "
        "that TensorFlow's TFLiteConverter converts, with TFLite builtin operators",
        field=field,
    )


def facts_of(path: Path) -> dict[str, Any]:
    """How the cached flatbuffer at `path` was made: converter, quantisation, calibration."""
    try:
        return dict(json.loads(path.with_suffix(".json").read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return {}


def admit(manifest: Manifest, options: PredictorOptions, cache_dir: Path) -> None:
    """The framework's admission hook: convert now (or find the conversion cached).

    Raises:
        UserError: the model cannot be converted, in one line naming the field.
    """
    converted_model(manifest, options, cache_dir)


def _keras_model(manifest: Manifest, seed: int) -> Any:
    """The manifest's Keras model: a keras.applications architecture with random weights seeded as
    the TensorFlow predictor seeds them (so the two frameworks hold the same weights), or what a
    Python factory returns, which must be a Keras model."""
    source = manifest.source
    if source.kind == "python":
        return _from_factory(source.target, dict(source.options.get("kwargs") or {}))
    import tensorflow as tf

    if source.kind == "keras_applications":
        builder = getattr(tf.keras.applications, source.target, None)
        if not callable(builder):
            known = sorted(name for name in dir(tf.keras.applications) if name[:1].isupper())
            raise Refusal(
                "source.keras_applications",
                f"tf.keras.applications has no architecture {source.target!r}; it has {', '.join(known)}",
            )
        tf.keras.utils.set_random_seed(seed)
        (spec,) = manifest.inputs
        classes = int(manifest.attributes.get("classes", 1000))
        return builder(
            weights=None, input_shape=tuple(spec.shape), classes=classes, classifier_activation=None
        )
    raise Refusal(
        "source", f"LiteRT converts keras_applications and python (Keras) sources, not {source.kind!r}"
    )


def _from_factory(target: str, kwargs: dict[str, Any]) -> Any:
    """What the factory `module:function` returns, which must be a Keras model. It is called before
    this process imports TensorFlow: a factory may need torch (mlscope's digits CNN), parts of which
    crash a process that loaded TensorFlow first."""
    try:
        factory = load_object(target)
    except (ImportError, AttributeError, ValueError) as exc:
        raise Refusal("source.python", f"{target} cannot be imported ({exc}); give module:function") from None
    model = factory(**kwargs)
    import tensorflow as tf

    if not isinstance(model, tf.keras.Model):
        kind = f"{type(model).__module__}.{type(model).__name__}"
        raise Refusal(
            "source.python",
            f"{target} returned a {kind}, not a Keras model; LiteRT converts a tf.keras.Model "
            "(a PyTorch model runs on -f pytorch, onnxruntime or openvino)",
        )
    return model


def _png(image: np.ndarray) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG")
    return buffer.getvalue()


def calibration_samples(manifest: Manifest, seed: int) -> tuple[list[dict[str, np.ndarray]], str]:
    """The representative inputs an int8 conversion calibrates on, one sample each, and what they are.

    Raises:
        Refusal: an input is not float (int8 quantisation calibrates float inputs).
    """
    from mlscope.contract.steps import apply_steps
    from mlscope.runtime.predictors.inputs import synthetic_batches

    for spec in manifest.inputs:
        if spec.dtype != "float32":
            raise Refusal(
                "options.quantize",
                f"LiteRT's int8 quantisation calibrates float32 inputs; {manifest.name}'s input "
                f"{spec.name!r} is {spec.dtype}: use quantize=none",
            )
    dataset = (manifest.dataset or {}).get("name")
    if dataset == "digits":
        from mlscope.runtime.data.digits import digits_split

        images, _ = digits_split("train")
        chosen = [_png(image) for image in images[:CALIBRATION_SAMPLES]]
        samples = [
            {
                spec.name: np.asarray(apply_steps(spec.steps, data), dtype=np.float32)[np.newaxis]
                for spec in manifest.inputs
            }
            for data in chosen
        ]
        return (
            samples,
            f"digits train split, its first {len(samples)} images through the manifest's input steps",
        )
    batches = synthetic_batches(manifest, 1, CALIBRATION_SAMPLES // 4, seed=seed)
    return batches, (
        f"{len(batches)} seeded synthetic inputs: mlscope ships no samples of the manifest's dataset "
        f"({dataset or 'none'}), so these activation ranges are not a real input distribution's"
    )


def convert(manifest: Manifest, seed: int, quantize: str) -> tuple[bytes, dict[str, Any]]:
    """Convert the manifest's Keras model to a LiteRT flatbuffer.

    Returns:
        The flatbuffer's bytes and how it was made.

    Raises:
        Refusal: the source is not a Keras model, or cannot be quantised.
    """
    model = _keras_model(manifest, seed)  # first: a factory may need torch before TensorFlow loads
    import tensorflow as tf

    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    facts: dict[str, Any] = {
        "converter": f"tensorflow {tf.__version__} TFLiteConverter",
        "quantize": quantize,
    }
    if quantize == "int8":
        samples, origin = calibration_samples(manifest, seed)
        names = [spec.name for spec in manifest.inputs]

        def representative() -> Any:
            for sample in samples:
                yield [sample[name] for name in names]

        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.representative_dataset = representative
        # Every operator an int8 builtin (a model with one that has none fails, rather than
        # silently running it in float); inputs and outputs stay float32.
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        facts["calibration"] = origin
        facts["calibration_samples"] = len(samples)
    elif quantize != "none":
        raise Refusal("options.quantize", f"LiteRT converts quantize=none or int8, not {quantize!r}")
    return bytes(converter.convert()), facts


def _main() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    job = json.loads(sys.stdin.read())
    manifest = parse_manifest(job["manifest"], origin=job["origin"])
    path = Path(sys.argv[1])
    try:
        flatbuffer, facts = convert(manifest, int(job["seed"]), str(job["quantize"]))
    except Refusal as refusal:
        print(json.dumps({"field": refusal.field, "message": refusal.message}))
        sys.exit(_REFUSED)
    path.with_suffix(".json").write_text(json.dumps(facts, sort_keys=True), encoding="utf-8")
    path.write_bytes(flatbuffer)


if __name__ == "__main__":
    _main()
