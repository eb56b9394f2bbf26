"""scikit-learn's handwritten digits (1,797 8×8 images, 10 classes), split once for everyone.

The `digits` dataset evaluates on the held-out split and `mlscope:digits_cnn` trains on the other,
so the split lives here, beside the reader both sides use. Samples are put in a fixed scrambled
order (sample i goes to place i·7919 mod 1797, a bijection: 7919 is prime to 1797) so that the
first N of a split mix the classes (the source lists them 0, 1, …, 9 over and over); the first 360
places are held out, the other 1,437 train. Pixels are 0–16 in the source and 0–255 here.
"""

from __future__ import annotations

import numpy as np

from mlscope.contract.errors import UserError

__all__ = ["SPLITS", "digits_split"]

SPLITS = ("train", "test")
_HELD_OUT = 360
_STRIDE = 7919


def digits_split(split: str) -> tuple[np.ndarray, np.ndarray]:
    """The split's images and labels.

    Args:
        split: "train" (1,437 samples) or "test" (360, held out).

    Returns:
        (images, labels): uint8 of shape (n, 8, 8) with values 0–255, and int64 labels 0–9.

    Raises:
        UserError: scikit-learn, which ships the data, is not installed; or an unknown split.
    """
    if split not in SPLITS:
        raise UserError(f"digits has splits {', '.join(SPLITS)}; got {split!r}")
    try:
        from sklearn.datasets import load_digits
    except ImportError as exc:
        raise UserError("the digits dataset ships with scikit-learn: pip install scikit-learn") from exc
    bunch = load_digits()
    images = np.rint(np.asarray(bunch.images) * (255.0 / 16.0)).clip(0, 255).astype(np.uint8)
    labels = np.asarray(bunch.target, dtype=np.int64)
    place = (np.arange(len(labels)) * _STRIDE) % len(labels)
    order = np.argsort(place)
    chosen = order[:_HELD_OUT] if split == "test" else order[_HELD_OUT:]
    return images[chosen], labels[chosen]
