"""Datasets resolved to materialised folders: the built-ins, a user's folders (made here with real
Pillow PNG/JPEG files), uploaded zips, the cache and the size cap; every bad input one UserError
naming the file or field."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from mlscope.contract.errors import UserError
from mlscope.contract.settings import DEFAULT_MAX_DATASET_BYTES, Settings, load_settings
from mlscope.contract.steps import decode
from mlscope.registry.datasets import BUILTIN_DATASETS, check_dataset_reference, resolve_dataset
from mlscope.registry.datasets.uploads import DatasetFiles
from mlscope.registry.uploads import UploadTooLarge
from mlscope.runtime.data import DatasetRef, iter_batches
from mlscope.runtime.data.digits import digits_split

CAP = 10 * 1024 * 1024


def image_bytes(value: int, fmt: str = "PNG", size: tuple[int, int] = (6, 5)) -> bytes:
    pixels = np.full((size[1], size[0], 3), value, dtype=np.uint8)
    pixels[0, 0] = (value + 100) % 256  # not uniform, so every image's bytes differ with its value
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format=fmt)
    return buffer.getvalue()


def write(path: Path, data: bytes | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        path.write_text(data)
    else:
        path.write_bytes(data)
    return path


def everything(ref: DatasetRef) -> tuple[list[bytes], list[int]]:
    samples: list[bytes] = []
    labels: list[int] = []
    for batch in iter_batches(ref, 4):
        samples.extend(batch.samples)
        labels.extend(batch.labels.tolist())
    return samples, labels


@pytest.fixture
def image_folder(tmp_path: Path) -> Path:
    """An ImageFolder: dog/ (2 JPEG), cat/ (1 PNG, 1 in a sub-folder), and a text file that is ignored."""
    root = tmp_path / "pets"
    write(root / "dog" / "b.jpg", image_bytes(10, "JPEG"))
    write(root / "dog" / "a.jpeg", image_bytes(20, "JPEG"))
    write(root / "cat" / "z.png", image_bytes(30))
    write(root / "cat" / "more" / "y.png", image_bytes(40))
    write(root / "cat" / "notes.txt", "not an image")
    return root


# ---- built-ins --------------------------------------------------------------------------------


def test_digits_is_the_held_out_split_as_png(tmp_path: Path) -> None:
    # When digits is resolved
    ref = resolve_dataset("digits", tmp_path / "cache", max_bytes=CAP)
    # Then it holds the 360 held-out images in the split's order, each a PNG of the exact pixels
    images, labels = digits_split("test")
    samples, got = everything(ref)
    assert (ref.name, ref.count, ref.kind, ref.task) == ("digits", 360, "image", "image_classification")
    assert ref.classes == tuple("0123456789")
    assert got == labels.tolist()
    assert samples[0].startswith(b"\x89PNG")
    for index in (0, 17, 359):
        np.testing.assert_array_equal(decode(samples[index], "grayscale")[:, :, 0], images[index])
    assert Path(ref.path).is_relative_to(tmp_path / "cache" / "datasets")


def test_sample_photos_carry_their_imagenet_classes(tmp_path: Path) -> None:
    ref = resolve_dataset("sample_photos", tmp_path, max_bytes=CAP)
    samples, labels = everything(ref)
    assert labels == [281, 967, 872]
    assert len(ref.classes) == 1000
    assert [ref.classes[i] for i in labels] == ["tabby", "espresso", "tripod"]
    assert decode(samples[0]).shape == (300, 451, 3)  # chelsea, the cat
    assert set(BUILTIN_DATASETS) == {"digits", "sample_photos"}


def test_order_is_deterministic_and_limit_reads_the_first_samples(tmp_path: Path) -> None:
    first = resolve_dataset("digits", tmp_path / "one", max_bytes=CAP)
    limited = resolve_dataset("digits", tmp_path / "two", limit=7, max_bytes=CAP)
    # The same content wherever it is materialised; the limit reads only the first 7, in the same order
    assert first.sha256 == limited.sha256 and limited.limit == 7 and limited.used == 7
    assert everything(limited)[1] == everything(first)[1][:7]
    with pytest.raises(UserError, match="limit must be at least 1") as caught:
        resolve_dataset("digits", tmp_path / "one", limit=0, max_bytes=CAP)
    assert caught.value.field == "limit"


def test_a_materialised_dataset_is_reused(tmp_path: Path) -> None:
    ref = resolve_dataset("digits", tmp_path, max_bytes=CAP)
    written = (Path(ref.path) / "meta.json").stat().st_mtime_ns
    again = resolve_dataset("digits", tmp_path, max_bytes=CAP)
    assert again == ref and (Path(ref.path) / "meta.json").stat().st_mtime_ns == written


# ---- a user's folder --------------------------------------------------------------------------


def test_image_folder_classes_sorted_and_files_sorted(image_folder: Path, tmp_path: Path) -> None:
    ref = resolve_dataset(str(image_folder), tmp_path / "cache", max_bytes=CAP)
    samples, labels = everything(ref)
    assert ref.name == "pets" and ref.classes == ("cat", "dog") and ref.count == 4
    # cat/more/y.png, cat/z.png, dog/a.jpeg, dog/b.jpg: the samples are the files' bytes
    order = ["cat/more/y.png", "cat/z.png", "dog/a.jpeg", "dog/b.jpg"]
    assert samples == [(image_folder / name).read_bytes() for name in order]
    assert labels == [0, 0, 1, 1]


def test_flat_folder_with_a_labels_file_of_names(tmp_path: Path) -> None:
    root = tmp_path / "flat"
    write(root / "one.png", image_bytes(1))
    write(root / "two.jpg", image_bytes(2, "JPEG"))
    write(root / "three.png", image_bytes(3))
    write(root / "labels.csv", "filename,label\n# a comment\ntwo.jpg,zebra\n\none.png,ant\nthree.png,zebra\n")
    ref = resolve_dataset(str(root), tmp_path / "cache", max_bytes=CAP)
    samples, labels = everything(ref)
    # The labels file's order; classes are the names, sorted
    assert ref.classes == ("ant", "zebra") and labels == [1, 0, 1]
    assert samples[0] == (root / "two.jpg").read_bytes()


def test_labels_file_of_integers_and_declared_classes(tmp_path: Path) -> None:
    root = tmp_path / "ints"
    write(root / "a.png", image_bytes(1))
    write(root / "b.png", image_bytes(2))
    write(root / "labels.txt", "a.png 7\nb.png 3\n")
    ref = resolve_dataset(str(root), tmp_path / "cache", max_bytes=CAP)
    assert ref.classes == () and everything(ref)[1] == [7, 3]
    # With classes.txt, names and integers both index it
    write(root / "classes.txt", "zero\none\ntwo\nthree\nfour\nfive\nsix\nseven\n")
    write(root / "labels.txt", "a.png seven\nb.png 3\n")
    ref = resolve_dataset(str(root), tmp_path / "cache", max_bytes=CAP)
    assert len(ref.classes) == 8 and everything(ref)[1] == [7, 3]


def test_a_changed_folder_is_materialised_again(image_folder: Path, tmp_path: Path) -> None:
    before = resolve_dataset(str(image_folder), tmp_path / "cache", max_bytes=CAP)
    write(image_folder / "cat" / "z.png", image_bytes(99))
    after = resolve_dataset(str(image_folder), tmp_path / "cache", max_bytes=CAP)
    assert after.path != before.path and after.sha256 != before.sha256
    assert everything(after)[0][1] == image_bytes(99)
    # Unchanged again: the same folder is reused
    assert resolve_dataset(str(image_folder), tmp_path / "cache", max_bytes=CAP) == after


BAD_FOLDERS = [
    ("empty", {}, "the folder is empty"),
    ("unlabelled", {"a.png": image_bytes(1)}, "images but no labels"),
    (
        "empty-class",
        {"cat/a.png": image_bytes(1), "dog/readme.txt": "x"},
        "class folder 'dog' holds no images",
    ),
    ("undecodable", {"cat/a.png": image_bytes(1), "cat/broken.jpg": b"\xff\xd8not a jpeg"}, "cat/broken.jpg"),
    (
        "truncated",
        {"cat/cut.png": image_bytes(5, size=(64, 64))[:60]},
        "cut.png: not an image Pillow can decode",
    ),
    (
        "missing-file",
        {"a.png": image_bytes(1), "labels.txt": "a.png x\ngone.png y\n"},
        "line 2: names 'gone.png'",
    ),
    (
        "unknown-label",
        {"a.png": image_bytes(1), "classes.txt": "cat\ndog\n", "labels.txt": "a.png cow\n"},
        "unknown label 'cow' for 'a.png'; known classes: cat, dog",
    ),
    (
        "label-out-of-range",
        {"a.png": image_bytes(1), "classes.txt": "cat\ndog\n", "labels.txt": "a.png 2\n"},
        "unknown label '2'",
    ),
    ("bad-line", {"a.png": image_bytes(1), "labels.txt": "a.png\n"}, "line 1: expected 'filename,label'"),
    ("outside", {"a.png": image_bytes(1), "labels.txt": "../a.png cat\n"}, "is outside the folder"),
]


@pytest.mark.parametrize(("case", "files", "message"), BAD_FOLDERS, ids=[c[0] for c in BAD_FOLDERS])
def test_a_bad_folder_is_one_user_error_naming_it(
    tmp_path: Path, case: str, files: dict[str, bytes | str], message: str
) -> None:
    root = tmp_path / case
    root.mkdir()
    for name, data in files.items():
        write(root / name, data)
    with pytest.raises(UserError) as caught:
        resolve_dataset(str(root), tmp_path / "cache", max_bytes=CAP)
    assert message in caught.value.message and caught.value.field == "dataset"
    assert str(root) in caught.value.message
    assert not list((tmp_path / "cache" / "datasets" / "folder").glob("[!.]*"))  # nothing materialised


def test_references_are_checked_cheaply_naming_the_field(tmp_path: Path) -> None:
    check_dataset_reference("digits", local_files=False)
    check_dataset_reference("sha256:" + "a" * 64, local_files=False)
    check_dataset_reference(str(tmp_path), local_files=True)
    refused = {
        ("imagenet", True): "unknown dataset 'imagenet': a built-in (digits, sample_photos)",
        ("./pets", False): "a path on your machine means nothing here; upload the folder as a zip",
        (str(tmp_path / "nowhere"), True): "no such folder",
    }
    for (reference, local_files), message in refused.items():
        with pytest.raises(UserError) as caught:
            check_dataset_reference(reference, local_files=local_files)
        assert message in caught.value.message and caught.value.field == "dataset"


# ---- the size cap ----------------------------------------------------------------------------


def test_a_dataset_over_the_cap_is_refused_giving_both_sizes(image_folder: Path, tmp_path: Path) -> None:
    size = sum(p.stat().st_size for p in image_folder.rglob("*.*") if p.suffix != ".txt")
    with pytest.raises(UserError) as caught:
        resolve_dataset(str(image_folder), tmp_path / "cache", max_bytes=size - 1)
    assert f"is {size} bytes, more than the {size - 1} bytes" in caught.value.message
    assert "MLSCOPE_MAX_DATASET_BYTES" in caught.value.message
    assert resolve_dataset(str(image_folder), tmp_path / "cache", max_bytes=size).count == 4


def test_the_cap_is_a_setting(tmp_path: Path) -> None:
    no_file = {"MLSCOPE_SETTINGS": str(tmp_path / "none.toml")}
    assert Settings().max_dataset_bytes == DEFAULT_MAX_DATASET_BYTES == 2 * 1024**3
    assert load_settings({"MLSCOPE_MAX_DATASET_BYTES": "4096", **no_file}).max_dataset_bytes == 4096
    for bad in ("lots", "0"):
        with pytest.raises(UserError, match="max_dataset_bytes") as caught:
            load_settings({"MLSCOPE_MAX_DATASET_BYTES": bad, **no_file})
        assert caught.value.field == "max_dataset_bytes"


# ---- uploaded zips ---------------------------------------------------------------------------


def zip_of(root: Path, arcroot: str = "") -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path in sorted(root.rglob("*")):
            if path.is_file():
                archive.write(path, f"{arcroot}{path.relative_to(root).as_posix()}")
    return buffer.getvalue()


def test_an_uploaded_zip_is_kept_once_and_resolves(image_folder: Path, tmp_path: Path) -> None:
    files = DatasetFiles(tmp_path / "uploads")
    data = zip_of(image_folder, "pets/")  # zipped as its own folder, as `zip -r pets.zip pets` does
    dataset, created = files.add([data[:100], data[100:]], filename="pets.zip", max_bytes=CAP)
    assert created and (dataset.count, dataset.classes, dataset.name) == (4, ["cat", "dog"], "pets")
    again, created = files.add([data], filename="other.zip", max_bytes=CAP)
    assert not created and again == dataset
    ref = resolve_dataset(dataset.ref, tmp_path / "cache", uploads=files.lookup, max_bytes=CAP)
    local = resolve_dataset(str(image_folder), tmp_path / "cache", max_bytes=CAP)
    assert ref.name == dataset.ref and everything(ref) == everything(local)


def test_bad_zips_are_refused_naming_the_member(tmp_path: Path) -> None:
    files = DatasetFiles(tmp_path / "uploads")
    broken = io.BytesIO()
    with zipfile.ZipFile(broken, "w") as archive:
        archive.writestr("cat/good.png", image_bytes(1))
        archive.writestr("cat/bad.png", b"\x89PNG garbage")
    slip = io.BytesIO()
    with zipfile.ZipFile(slip, "w") as archive:
        archive.writestr("../evil.png", image_bytes(1))
    cases = {
        b"not a zip": "not a readable zip file",
        broken.getvalue(): "data.zip: cat/bad.png: not an image Pillow can decode",
        slip.getvalue(): "member '../evil.png' leaves the folder",
    }
    for data, message in cases.items():
        with pytest.raises(UserError) as caught:
            files.add([data], filename="data.zip", max_bytes=CAP)
        assert message in caught.value.message and caught.value.field == "file"
    with pytest.raises(UploadTooLarge, match="MLSCOPE_MAX_DATASET_BYTES"):
        files.add([broken.getvalue()], max_bytes=100)
    assert [p.name for p in (tmp_path / "uploads").iterdir()] == []
    with pytest.raises(UserError, match="no dataset with this SHA-256 was uploaded") as caught:
        resolve_dataset("sha256:" + "b" * 64, tmp_path / "cache", uploads=files.lookup, max_bytes=CAP)
    assert caught.value.field == "dataset"
