"""A user's folder of images as a dataset: ImageFolder layout or a flat folder with a labels file.

    <root>/<class>/**/*.jpg        ImageFolder: classes are the sub-folders, sorted by name, indexed
                                   from 0; each class's images sorted by their path
    <root>/labels.txt|labels.csv   one `filename,label` (or `filename label`) per line; a label is a
                                   class name or an integer; `classes.txt` (one name a line), when
                                   present, fixes the class names and their order

Every image must decode with Pillow. Its identity is a SHA-256 over the listed files' names, labels
and bytes (and the class names), so editing, adding or relabelling an image gives another identity
and the folder is materialised again. Blank lines and lines starting with '#' in a labels file are
skipped, and so is a first line `filename,label`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from mlscope.contract.errors import UserError

__all__ = ["IMAGE_SUFFIXES", "LABEL_FILES", "FolderDataset", "check_image", "scan_folder"]

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm")
LABEL_FILES = ("labels.txt", "labels.csv")
CLASSES_FILE = "classes.txt"
_HEADERS = {("filename", "label"), ("file", "label"), ("path", "label")}


@dataclass(frozen=True)
class FolderDataset:
    """What a folder holds, in evaluation order.

    Attributes:
        root: the folder.
        files: each image's path, in order.
        labels: each image's class index.
        classes: the class names, by index (empty when a labels file gives bare integers).
        layout: "imagefolder" or the labels file's name.
    """

    root: Path
    files: tuple[Path, ...]
    labels: tuple[int, ...]
    classes: tuple[str, ...]
    layout: str

    @property
    def size(self) -> int:
        """The images' bytes, together."""
        return sum(path.stat().st_size for path in self.files)

    def digest(self) -> str:
        """A SHA-256 over the images' names, labels and bytes, and the class names."""
        digest = hashlib.sha256(json.dumps([self.layout, list(self.classes)]).encode())
        for path, label in zip(self.files, self.labels, strict=True):
            digest.update(json.dumps([path.relative_to(self.root).as_posix(), label]).encode())
            with path.open("rb") as handle:
                for chunk in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(chunk)
        return digest.hexdigest()


def _is_image(path: Path) -> bool:
    return path.suffix.lower() in IMAGE_SUFFIXES and not path.name.startswith(".")


def _visible(folder: Path) -> Iterator[Path]:
    return (child for child in sorted(folder.iterdir()) if not child.name.startswith((".", "__MACOSX")))


def check_image(path: Path, shown: str | None = None) -> None:
    """Decode the image at `path` fully with Pillow.

    Args:
        path: the image file.
        shown: how the message names it (the path when None).

    Raises:
        UserError: it does not decode (field `dataset`), naming the file.
    """
    from PIL import Image

    try:
        with Image.open(path) as image:
            image.load()
    except Exception as exc:  # Pillow raises OSError, SyntaxError, ValueError, DecompressionBombError...
        raise UserError(
            f"{shown or path}: not an image Pillow can decode ({type(exc).__name__}: {exc})", field="dataset"
        ) from None


def _image_folder(root: Path) -> FolderDataset:
    class_dirs = [child for child in _visible(root) if child.is_dir()]
    files: list[Path] = []
    labels: list[int] = []
    for index, class_dir in enumerate(class_dirs):
        images = sorted(path for path in class_dir.rglob("*") if path.is_file() and _is_image(path))
        if not images:
            raise UserError(
                f"{class_dir}: class folder {class_dir.name!r} holds no images ({', '.join(IMAGE_SUFFIXES)})",
                field="dataset",
            )
        files.extend(images)
        labels.extend([index] * len(images))
    return FolderDataset(root, tuple(files), tuple(labels), tuple(d.name for d in class_dirs), "imagefolder")


def _read_classes(root: Path) -> tuple[str, ...] | None:
    path = root / CLASSES_FILE
    if not path.is_file():
        return None
    names = tuple(line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip())
    if len(set(names)) != len(names):
        raise UserError(f"{path}: a class name is listed twice", field="dataset")
    return names


def _label_lines(path: Path) -> Iterator[tuple[int, str, str]]:
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.rsplit(",", 1) if "," in line else line.rsplit(None, 1)
        name, label = (parts[0].strip(), parts[1].strip()) if len(parts) == 2 else ("", "")
        if not name or not label:
            raise UserError(
                f"{path}, line {number}: expected 'filename,label' or 'filename label'; got {raw!r}",
                field="dataset",
            )
        if number == 1 and (name.lower(), label.lower()) in _HEADERS:
            continue
        yield number, name, label


def _labelled_folder(root: Path, labels_file: Path) -> FolderDataset:
    declared = _read_classes(root)
    rows = list(_label_lines(labels_file))
    if not rows:
        raise UserError(f"{labels_file}: lists no images", field="dataset")
    integers = all(label.isdigit() for _, _, label in rows)
    if declared is not None:
        classes = declared
    elif integers:
        classes = ()
    else:
        classes = tuple(sorted({label for _, _, label in rows}))
    index = {name: i for i, name in enumerate(classes)}
    files: list[Path] = []
    labels: list[int] = []
    for number, name, label in rows:
        path = root / name
        where = f"{labels_file}, line {number}"
        if not path.resolve().is_relative_to(root.resolve()):
            raise UserError(f"{where}: {name!r} is outside the folder", field="dataset")
        if not path.is_file():
            raise UserError(f"{where}: names {name!r}, which is not a file in {root}", field="dataset")
        if label in index:
            value = index[label]
        elif label.isdigit() and (not classes or int(label) < len(classes)):
            value = int(label)
        else:
            known = f"known classes: {', '.join(classes)}" if classes else "labels are integers ≥ 0 here"
            raise UserError(f"{where}: unknown label {label!r} for {name!r}; {known}", field="dataset")
        files.append(path)
        labels.append(value)
    return FolderDataset(root, tuple(files), tuple(labels), classes, labels_file.name)


def scan_folder(root: Path) -> FolderDataset:
    """List a folder's images and labels (without decoding them: `check_image` does).

    Args:
        root: an ImageFolder or a folder with `labels.txt`/`labels.csv` (see the module's docstring).

    Returns:
        The folder's images, labels and classes, in evaluation order.

    Raises:
        UserError: it is not a folder, holds no images, an empty class folder, a labels file naming a
            missing file, an unknown label (field `dataset`, naming the file or line).
    """
    if not root.is_dir():
        raise UserError(f"{root}: no such folder", field="dataset")
    labels_file = next((root / name for name in LABEL_FILES if (root / name).is_file()), None)
    if labels_file is not None:
        return _labelled_folder(root, labels_file)
    if any(child.is_dir() for child in _visible(root)):
        return _image_folder(root)
    if any(_is_image(child) for child in _visible(root)):
        raise UserError(
            f"{root}: images but no labels: put each class's images in a sub-folder named after it, or "
            f"list them in {' or '.join(LABEL_FILES)} (lines 'filename,label')",
            field="dataset",
        )
    raise UserError(
        f"{root}: the folder is empty: a dataset folder holds one sub-folder of images per class, "
        f"or images and {' or '.join(LABEL_FILES)}",
        field="dataset",
    )
