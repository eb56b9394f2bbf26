"""`mlscope:digits_cnn`: a small CNN that mlscope trains itself on scikit-learn's 8×8 digits, its
training recipe, and the cache of its trained weights.

`make_model()` (the manifest's `python` source) returns the trained model in eval mode. It is
trained once per machine and recipe, in a few seconds on a CPU, on the train split of
`mlscope.runtime.data.digits` (never on the held-out split the `digits` dataset evaluates), with
the preprocessing the catalogue entry's manifest declares: pixels scaled to [0, 1], then
normalised by `MEAN` and `STD`. Training is deterministic: fixed seeds, deterministic algorithms, one
thread, a fixed number of epochs over minibatches in a seeded order.

The trained state dict is cached under `<cache dir>/models/` (MLSCOPE_CACHE_DIR), its file named by
`recipe_key()`: a hash of the recipe's constants, of the code of the network and of its training,
and of the torch major.minor version, so a change to any of them trains again. The file is written
atomically (two processes training at once write the same bytes; the last rename wins) and holds
how the model was made (`TrainedDigits.record`). A cache that cannot be written (a container
mounts it read-only) or read is not an error: the model is trained in memory.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mlscope.contract.settings import load_settings
from mlscope.contract.steps import normalize
from mlscope.runtime.data.digits import digits_split

__all__ = [
    "MEAN",
    "RECIPE",
    "STD",
    "DigitsCNN",
    "TrainedDigits",
    "cache_path",
    "make_model",
    "preprocess",
    "recipe_key",
    "trained_digits_cnn",
]

# The train split's pixel mean and standard deviation after scaling to [0, 1] (0.30499 and 0.37587),
# rounded: what the manifest's normalize step says.
MEAN = 0.305
STD = 0.376
_SCALE = 1.0 / 255.0

RECIPE: dict[str, Any] = {
    "dataset": "digits",
    "split": "train",
    "mean": MEAN,
    "std": STD,
    "scale": _SCALE,
    "seed": 0,
    "epochs": 20,
    "batch_size": 128,
    "optimizer": "adam",
    "learning_rate": 0.01,
    # One intra-op thread: the sums inside a convolution are split by thread, so the trained bits
    # would depend on the machine's core count; and on a busy 2-core machine one thread is ~8x faster.
    "threads": 1,
}


class DigitsCNN(torch.nn.Module):
    """Two 3×3 convolutions (16 and 32 channels, ReLU), 2×2 max pooling, a linear layer to 10 logits:
    9,930 parameters, for inputs of shape (N, 1, 8, 8)."""

    def __init__(self) -> None:
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(1, 16, kernel_size=3, padding=1),
            torch.nn.ReLU(),
            torch.nn.Conv2d(16, 32, kernel_size=3, padding=1),
            torch.nn.ReLU(),
            torch.nn.MaxPool2d(2),
        )
        self.classifier = torch.nn.Linear(32 * 4 * 4, 10)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.features(images), 1))


@dataclass(frozen=True)
class TrainedDigits:
    """The trained model and how it was made.

    Attributes:
        model: the network in eval mode.
        record: recipe key, the recipe's settings, torch version, sample counts,
            parameter count, training seconds, and accuracy in percent: top-1 on the train split
            (`train_top1`), top-1 and top-5 on the held-out split (`held_out_top1`, `held_out_top5`).
        origin: "trained" (here, now) or "cache" (read from `path`).
        path: the cache file, or None when the model lives in memory only (the cache could not be
            written).
    """

    model: DigitsCNN
    record: dict[str, Any]
    origin: str
    path: Path | None


def _torch_release() -> str:
    return ".".join(torch.__version__.split("+")[0].split(".")[:2])


@functools.cache  # the code as imported: what this process trains with
def recipe_key() -> str:
    """16 hex digits naming the recipe: its constants, the code of the network, its preprocessing
    (and the normalize step it calls), its training and its record, and the torch major.minor."""
    text = json.dumps(
        {
            "recipe": RECIPE,
            "code": [
                inspect.getsource(code) for code in (DigitsCNN, preprocess, normalize, _train, _trained_here)
            ],
            "torch": _torch_release(),
        },
        sort_keys=True,
    )
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def cache_path(cache_dir: Path | None = None) -> Path:
    """Where the trained weights of this recipe are cached.

    Args:
        cache_dir: the mlscope cache directory; the settings' (MLSCOPE_CACHE_DIR) when omitted.
    """
    directory = load_settings().cache_dir if cache_dir is None else cache_dir
    return directory / "models" / f"digits_cnn-{recipe_key()}.pt"


def preprocess(images: np.ndarray) -> np.ndarray:
    """uint8 images (n, 8, 8) as the network takes them, float32 (n, 1, 8, 8): the manifest's own
    `normalize` step (the same function, so training sees the very bits an evaluation feeds)."""
    normalised = normalize(images[..., np.newaxis], mean=[MEAN], std=[STD], scale=_SCALE)
    return np.ascontiguousarray(normalised[:, np.newaxis, :, :, 0])


def _top_k(model: DigitsCNN, inputs: torch.Tensor, labels: torch.Tensor, k: int = 1) -> float:
    """The percentage of samples whose label is among the k highest logits, to four decimals."""
    with torch.inference_mode():
        best = model(inputs).topk(k, dim=1).indices
    return round(100.0 * float((best == labels[:, None]).any(dim=1).float().mean()), 4)


def _train(inputs: torch.Tensor, labels: torch.Tensor) -> DigitsCNN:
    """Adam on cross-entropy, `epochs` passes over minibatches in an order drawn from the seed."""
    seed = int(RECIPE["seed"])
    torch.manual_seed(seed)  # the initial weights (the caller forks the global generator)
    model = DigitsCNN()
    order = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=float(RECIPE["learning_rate"]))
    loss_fn = torch.nn.CrossEntropyLoss()
    batch_size = int(RECIPE["batch_size"])
    model.train()
    for _ in range(int(RECIPE["epochs"])):
        permutation = torch.randperm(len(labels), generator=order)
        for start in range(0, len(labels), batch_size):
            chosen = permutation[start : start + batch_size]
            optimizer.zero_grad()
            loss_fn(model(inputs[chosen]), labels[chosen]).backward()
            optimizer.step()
    return model.eval()


def _trained_here() -> tuple[DigitsCNN, dict[str, Any]]:
    """Train by the recipe, leaving torch's global settings as they were, and record how it went."""
    train_images, train_labels = digits_split("train")
    test_images, test_labels = digits_split("test")
    inputs, labels = torch.from_numpy(preprocess(train_images)), torch.from_numpy(train_labels)
    was_deterministic = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    threads = torch.get_num_threads()
    started = time.perf_counter()
    with torch.random.fork_rng(devices=[]):
        torch.use_deterministic_algorithms(True)
        torch.set_num_threads(int(RECIPE["threads"]))
        try:
            model = _train(inputs, labels)
        finally:
            torch.set_num_threads(threads)
            torch.use_deterministic_algorithms(was_deterministic, warn_only=warn_only)
    seconds = time.perf_counter() - started
    held_out, held_out_labels = torch.from_numpy(preprocess(test_images)), torch.from_numpy(test_labels)
    record = {
        "recipe": recipe_key(),
        **{key: RECIPE[key] for key in ("dataset", "split", "seed", "epochs", "batch_size", "threads")},
        **{key: RECIPE[key] for key in ("optimizer", "learning_rate")},
        "torch": str(torch.__version__),
        "train_samples": len(train_labels),
        "held_out_samples": len(test_labels),
        "parameters": sum(p.numel() for p in model.parameters()),
        "training_seconds": round(seconds, 3),
        "train_top1": _top_k(model, inputs, labels),
        "held_out_top1": _top_k(model, held_out, held_out_labels),
        "held_out_top5": _top_k(model, held_out, held_out_labels, k=5),
    }
    return model, record


def _load(path: Path) -> TrainedDigits | None:
    """The cached model, or None when there is none (or it is unreadable, or of another recipe)."""
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True)
        if saved["record"]["recipe"] != recipe_key():
            return None
        model = DigitsCNN()
        model.load_state_dict(saved["state_dict"])
    except Exception:  # a missing, partial or foreign file: trained again, never trusted
        return None
    return TrainedDigits(model.eval(), dict(saved["record"]), "cache", path)


def _save(path: Path, model: DigitsCNN, record: dict[str, Any]) -> bool:
    """Write the cache file atomically; False when the cache cannot be written."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, partial = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
    except OSError:
        return False
    try:
        with os.fdopen(handle, "wb") as file:
            torch.save({"state_dict": model.state_dict(), "record": record}, file)
        os.chmod(partial, 0o644)  # mkstemp's 0600 would hide it from a container's other user
        os.replace(partial, path)
    except OSError:
        Path(partial).unlink(missing_ok=True)
        return False
    return True


def trained_digits_cnn(cache_dir: Path | None = None) -> TrainedDigits:
    """The trained network: from the cache when this recipe was trained on this machine before,
    else trained now (a few seconds) and cached.

    Args:
        cache_dir: the mlscope cache directory; the settings' (MLSCOPE_CACHE_DIR) when omitted.

    Raises:
        UserError: scikit-learn, which ships the digits, is not installed.
    """
    path = cache_path(cache_dir)
    cached = _load(path)
    if cached is not None:
        return cached
    model, record = _trained_here()
    saved = _save(path, model, record)
    return TrainedDigits(model, record, "trained", path if saved else None)


def make_model() -> DigitsCNN:
    """The trained digits CNN in eval mode (the `python` source of `mlscope:digits_cnn`)."""
    return trained_digits_cnn().model
