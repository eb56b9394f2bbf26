"""Accuracy as an estimate: top-k hits counted over labelled samples, with a Wilson interval.

Accuracy on N samples is itself a measurement: 97% of 360 digits is compatible with anything from
about 94.7% to 98.3% at 95% confidence, so the interval travels with the figure. The Wilson score
interval is used because it stays inside [0, 1] and behaves at 0% and 100%, where the normal
approximation collapses to a zero-width interval.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mlscope.contract.errors import UserError

__all__ = ["TOP_K", "AccuracyCounter", "wilson_interval"]

TOP_K = (1, 5)
_Z_95 = 1.959963984540054  # the standard normal's 97.5th percentile


def wilson_interval(hits: int, count: int, z: float = _Z_95) -> tuple[float, float]:
    """The Wilson score interval of a proportion `hits / count` (95% for the default z).

    Returns:
        (low, high) in [0, 1]; (0.0, 1.0) when there are no samples.
    """
    if count <= 0:
        return 0.0, 1.0
    p = hits / count
    denominator = 1 + z * z / count
    centre = (p + z * z / (2 * count)) / denominator
    half = z * math.sqrt(p * (1 - p) / count + z * z / (4 * count * count)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass
class AccuracyCounter:
    """Top-k hits of classification scores against labels, accumulated batch by batch.

    Attributes:
        output: the name of the output the scores come from (for messages).
        classes: how many classes the dataset names (0 when it does not say).
    """

    output: str
    classes: int = 0
    count: int = 0
    hits: dict[int, int] = field(default_factory=lambda: dict.fromkeys(TOP_K, 0))

    def add(self, scores: np.ndarray, labels: np.ndarray) -> None:
        """Count one batch.

        Args:
            scores: (batch, classes) scores (logits or probabilities: only their order matters).
            labels: (batch,) class indices; samples labelled -1 (no label) are not counted.

        Raises:
            UserError: the output is not a score vector per sample, or a label is not one of the
                model's classes (the dataset's labels do not match the model).
        """
        scores = np.asarray(scores)
        if scores.ndim != 2 or scores.shape[0] != len(labels):
            raise UserError(
                f"output {self.output!r} has shape {scores.shape}: accuracy needs one score per class "
                f"for each of the {len(labels)} samples of a batch, i.e. ({len(labels)}, classes)",
                field="dataset",
            )
        if self.classes > scores.shape[1]:
            raise UserError(
                f"the dataset has {self.classes} classes but output {self.output!r} scores only "
                f"{scores.shape[1]}: its labels do not match the model's classes",
                field="dataset",
            )
        labelled = labels >= 0
        if not labelled.any():
            return
        scores, labels = scores[labelled], labels[labelled]
        if labels.max() >= scores.shape[1]:
            raise UserError(
                f"a sample is labelled {int(labels.max())} but output {self.output!r} scores only "
                f"{scores.shape[1]} classes: the dataset's labels do not match the model's classes",
                field="dataset",
            )
        k_max = min(max(TOP_K), scores.shape[1])
        # Stable order: among tied scores the lower class index ranks first, on every framework.
        ranked = np.argsort(-scores.astype(np.float64), axis=1, kind="stable")[:, :k_max]
        found = ranked == labels[:, np.newaxis]
        for k in TOP_K:
            self.hits[k] += int(found[:, :k].any(axis=1).sum())
        self.count += len(labels)

    def to_dict(self, dataset: dict[str, Any]) -> dict[str, Any]:
        """The result's `accuracy` section.

        Args:
            dataset: the DatasetRef as a dict (name, sha256, limit, task).

        Raises:
            UserError: no sample had a label.
        """
        if self.count == 0:
            raise UserError(f"dataset {dataset.get('name')!r} has no labelled samples", field="dataset")
        section: dict[str, Any] = {
            "dataset": dataset.get("name"),
            "dataset_sha256": dataset.get("sha256"),
            "count": self.count,
            "task": dataset.get("task", "image_classification"),
            "limit": dataset.get("limit"),
            "output": self.output,
        }
        ci: dict[str, Any] = {"method": "wilson", "level": 0.95}
        for k in TOP_K:
            section[f"top{k}"] = round(self.hits[k] / self.count, 6)
            ci[f"top{k}"] = [round(v, 6) for v in wilson_interval(self.hits[k], self.count)]
        section["ci"] = ci
        return section
