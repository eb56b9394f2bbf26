"""The datasets that ship with mlscope's dependencies, so an accuracy run needs no download.

    digits          scikit-learn's handwritten digits, the held-out split (360 images, 8×8 grayscale
                    PNG, classes "0".."9"); `mlscope:digits_cnn` trains on the other split
    sample_photos   scikit-image's bundled photographs that show one ImageNet-1k class plainly,
                    labelled by hand with its index (classes: the 1000 ImageNet-1k names when
                    torchvision is installed, else none)

Each is built from its source in a fixed order; `RECIPE` versions the way it is built, so a change
here materialises it again rather than reusing a stale copy.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlscope.contract.errors import UserError
from mlscope.runtime.data import DatasetRef, write_dataset

__all__ = ["BUILTIN_DATASETS", "RECIPE", "SAMPLE_PHOTOS", "Builtin", "imagenet_classes"]

RECIPE = 1

# scikit-image's photographs that show one ImageNet-1k class plainly: (file in skimage's data folder,
# class index, class name). Its other images are textures, microscopy, astronomy, a portrait, a
# silhouette, a motorcycle (ImageNet has only moped and motor scooter) or a launch vehicle (not a missile).
SAMPLE_PHOTOS = (
    ("chelsea.png", 281, "tabby"),
    ("coffee.png", 967, "espresso"),
    ("camera.png", 872, "tripod"),
)


def _png(pixels: Any) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def imagenet_classes() -> tuple[str, ...]:
    """The 1000 ImageNet-1k class names by index, as torchvision ships them; () without torchvision."""
    try:
        from torchvision.models._meta import _IMAGENET_CATEGORIES
    except ImportError:
        return ()
    return tuple(_IMAGENET_CATEGORIES)


def _digits(path: Path) -> DatasetRef:
    from mlscope.runtime.data.digits import digits_split  # numpy, only when the dataset is made

    images, labels = digits_split("test")
    return write_dataset(
        path,
        name="digits",
        kind="image",
        task="image_classification",
        samples=(_png(image) for image in images),
        labels=labels.tolist(),
        classes=[str(digit) for digit in range(10)],
        extra={"source": "scikit-learn load_digits, held-out split (mlscope.runtime.data.digits)"},
    )


def skimage_data_dir() -> Path:
    """scikit-image's folder of bundled images.

    Raises:
        UserError: scikit-image is not installed.
    """
    try:
        import skimage
    except ImportError as exc:
        raise UserError("sample_photos ships with scikit-image: pip install scikit-image") from exc
    return Path(skimage.__file__).parent / "data"


def _sample_photos(path: Path) -> DatasetRef:
    folder = skimage_data_dir()
    missing = [name for name, _, _ in SAMPLE_PHOTOS if not (folder / name).is_file()]
    if missing:
        raise UserError(f"this scikit-image does not ship {', '.join(missing)} in {folder}")
    classes = imagenet_classes()
    for _, index, name in SAMPLE_PHOTOS:
        if classes and classes[index] != name:
            raise UserError(f"ImageNet class {index} is {classes[index]!r} here, not {name!r}")
    return write_dataset(
        path,
        name="sample_photos",
        kind="image",
        task="image_classification",
        samples=((folder / name).read_bytes() for name, _, _ in SAMPLE_PHOTOS),
        labels=[index for _, index, _ in SAMPLE_PHOTOS],
        classes=classes,
        extra={
            "source": "scikit-image's bundled photographs, labelled by hand with ImageNet-1k classes",
            "files": [name for name, _, _ in SAMPLE_PHOTOS],
            "label_names": [label for _, _, label in SAMPLE_PHOTOS],
        },
    )


@dataclass(frozen=True)
class Builtin:
    """A built-in dataset: a one-line description and how to write it into a folder."""

    description: str
    build: Callable[[Path], DatasetRef]


BUILTINS: dict[str, Builtin] = {
    "digits": Builtin(
        "scikit-learn's handwritten digits, held-out split: 360 8×8 grayscale PNGs, classes 0-9", _digits
    ),
    "sample_photos": Builtin(
        f"{len(SAMPLE_PHOTOS)} of scikit-image's bundled photographs, labelled with ImageNet-1k classes "
        f"({', '.join(label for _, _, label in SAMPLE_PHOTOS)})",
        _sample_photos,
    ),
}

BUILTIN_DATASETS: dict[str, str] = {name: builtin.description for name, builtin in BUILTINS.items()}
