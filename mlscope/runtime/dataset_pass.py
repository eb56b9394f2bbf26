"""The accuracy pass and the outputs a parity check compares, run where the predictor lives.

    dataset (materialised) ─ batches ─▶ the manifest's input steps, sample by sample (preprocess)
        ─▶ predict ─▶ the output's steps (postprocess) ─▶ top-k hits against the labels

The steps are the manifest's, run by the one implementation in `mlscope.contract.steps` for every
framework, so a difference between frameworks is the framework's. Each stage is an APPLICATION
span ("preprocess", "predict", "postprocess" under "accuracy"), so the pipeline's cost shows in the
timeline beside inference. Nothing here is timed for the latency figures: the measured pass is over
when this runs.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from mlscope.contract.errors import UserError
from mlscope.contract.manifest import Manifest
from mlscope.contract.steps import apply_steps
from mlscope.runtime.data import DatasetRef, iter_batches
from mlscope.runtime.measure.accuracy import AccuracyCounter
from mlscope.runtime.predictors import Predictor
from mlscope.runtime.predictors.inputs import synthetic_batches
from mlscope.runtime.trace.spans import Tracer

__all__ = [
    "MAX_OUTPUT_BYTES",
    "check_takes_dataset",
    "collect_outputs",
    "postprocess",
    "preprocess_batch",
    "run_dataset_pass",
]

# The outputs returned for a parity check cross a pipe as JSON: a language model's logits over a
# long sequence would be hundreds of MB per sample, so fewer samples are kept instead.
MAX_OUTPUT_BYTES = 32 * 1024 * 1024


# The step a sample of each kind must meet first: an image arrives encoded, a text as a string.
_FIRST_STEP = {"image": "decode", "text": "tokenize"}


def check_takes_dataset(manifest: Manifest, ref: DatasetRef) -> None:
    """Refuse, before anything runs, a model that cannot take the dataset's samples.

    Raises:
        UserError: an input lists no steps that start from the dataset's kind of sample.
    """
    _input_specs(manifest, ref)


def _input_specs(manifest: Manifest, ref: DatasetRef) -> tuple[Any, ...]:
    """Every input's spec; each must turn the dataset's raw sample into its tensor (a text model's
    input_ids and attention_mask both start from the sample, each with its own tokenize field)."""
    first = _FIRST_STEP.get(ref.kind)
    for spec in manifest.inputs:
        if first is not None and (not spec.steps or spec.steps[0].name != first):
            raise UserError(
                f"{manifest.name}: input {spec.name!r} lists no preprocessing that starts with {first}, so "
                f"the {ref.kind} samples of dataset {ref.name!r} cannot become its {list(spec.shape)} "
                f"{spec.dtype} tensor; give the manifest's input steps ("
                + (
                    "decode, resize, normalize, to_layout, ..."
                    if first == "decode"
                    else "tokenize{tokenizer, max_length, field}"
                )
                + ")",
                field="dataset",
            )
    return manifest.inputs


def preprocess_batch(manifest: Manifest, ref: DatasetRef, samples: list[Any]) -> dict[str, np.ndarray]:
    """One batch of raw samples through each input's steps, stacked and cast.

    Raises:
        UserError: the model cannot take the dataset (an input without the right first step) or
            the steps give a tensor of another shape than the input declares.
    """
    arrays = {}
    for spec in _input_specs(manifest, ref):
        prepared = []
        for offset, sample in enumerate(samples):
            try:
                value = np.asarray(apply_steps(spec.steps, sample))
            except (OSError, ValueError) as exc:
                raise UserError(
                    f"dataset {ref.name!r}: sample {offset} could not be preprocessed for "
                    f"{manifest.name}'s input {spec.name!r}: {exc}",
                    field="dataset",
                ) from None
            if tuple(value.shape) != tuple(spec.shape):
                raise UserError(
                    f"{manifest.name}: the input steps make dataset {ref.name!r}'s samples "
                    f"{list(value.shape)}, but input {spec.name!r} takes {list(spec.shape)}; fix the "
                    "steps (resize/crop size, to_layout, decode's color_mode, max_length) or the shape",
                    field="dataset",
                )
            prepared.append(value)
        dtype = np.float32 if spec.dtype == "bfloat16" else np.dtype(spec.dtype)
        arrays[spec.name] = np.stack(prepared).astype(dtype, copy=False)
    return arrays


def _pad(arrays: dict[str, np.ndarray], batch_size: int) -> dict[str, np.ndarray]:
    """A short last batch filled up with copies of its last sample: a graph may take one batch size."""
    short = batch_size - len(next(iter(arrays.values())))
    if short <= 0:
        return arrays
    return {name: np.concatenate([a, np.repeat(a[-1:], short, axis=0)]) for name, a in arrays.items()}


def _outputs(
    predictor: Predictor, arrays: dict[str, np.ndarray], batch_size: int, real: int
) -> dict[str, np.ndarray]:
    """One padded batch's host outputs, cut back to its `real` samples."""
    raw = predictor.predict(predictor.prepare(_pad(arrays, batch_size)))
    return {name: np.asarray(a)[:real] for name, a in predictor.outputs_to_numpy(raw).items()}


def postprocess(manifest: Manifest, outputs: dict[str, np.ndarray]) -> None:
    """Run each output's postprocessing steps (the work a serving system does after predict)."""
    for spec in manifest.outputs:
        if spec.name in outputs:
            apply_steps(spec.steps, outputs[spec.name])


class _Kept:
    """The first samples' raw outputs, up to a count and MAX_OUTPUT_BYTES."""

    def __init__(self, wanted: int) -> None:
        self.wanted = wanted
        self.parts: dict[str, list[np.ndarray]] = {}
        self.count = 0

    def add(self, outputs: dict[str, np.ndarray]) -> None:
        if self.count >= self.wanted or not outputs:
            return
        per_sample = sum(a[:1].nbytes for a in outputs.values()) or 1
        room = min(self.wanted - self.count, max(MAX_OUTPUT_BYTES // per_sample - self.count, 0))
        if room <= 0:
            self.wanted = self.count
            return
        for name, array in outputs.items():
            self.parts.setdefault(name, []).append(np.array(array[:room]))
        self.count += min(room, len(next(iter(outputs.values()))))

    def arrays(self) -> dict[str, np.ndarray]:
        return {name: np.concatenate(parts) for name, parts in self.parts.items()}


def run_dataset_pass(
    predictor: Predictor, ref: DatasetRef, batch_size: int, tracer: Tracer, outputs_for: int = 0
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Evaluate the dataset's samples through the model: accuracy, and the first samples' outputs.

    Args:
        batch_size: samples per inference (the last batch is padded to it).
        outputs_for: how many samples' raw outputs to keep for a parity check.

    Returns:
        (the result's `accuracy` section, the kept outputs by name).

    Raises:
        UserError: the model cannot take the dataset, or its labels do not match the model's classes.
    """
    manifest = predictor.manifest
    # The first declared output holds the class scores.
    counter = AccuracyCounter(manifest.outputs[0].name if manifest.outputs else "", classes=len(ref.classes))
    kept = _Kept(outputs_for)
    with tracer.span("accuracy", dataset=ref.name, count=ref.used, batch_size=batch_size):
        for batch in iter_batches(ref, batch_size):
            with tracer.span("preprocess", batch_size=len(batch.samples), first=batch.start):
                arrays = preprocess_batch(manifest, ref, batch.samples)
            with tracer.span("predict", batch_size=len(batch.samples)):
                outputs = _outputs(predictor, arrays, batch_size, len(batch.samples))
            with tracer.span("postprocess", batch_size=len(batch.samples)):
                postprocess(manifest, outputs)
            if counter.output not in outputs:
                raise UserError(
                    f"{manifest.name} declares output {counter.output!r} but the model returned "
                    f"{', '.join(outputs) or 'none'}",
                    field="dataset",
                )
            counter.add(outputs[counter.output], batch.labels)
            kept.add(outputs)
    return counter.to_dict(ref.to_dict()), kept.arrays()


def collect_outputs(predictor: Predictor, count: int, batch_size: int, seed: int) -> dict[str, np.ndarray]:
    """The raw outputs of `count` seeded synthetic samples (the same on every framework): what a
    parity check compares when no dataset is named."""
    kept = _Kept(count)
    batches = synthetic_batches(predictor.manifest, batch_size, math.ceil(count / batch_size), seed=seed)
    for arrays in batches:
        outputs = _outputs(predictor, arrays, batch_size, batch_size)
        kept.add(outputs)
    return kept.arrays()
