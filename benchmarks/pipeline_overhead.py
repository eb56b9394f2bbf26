"""What does the shared preprocessing pipeline cost?

Prints, in one run on this machine:
  (a) preprocessing throughput (images/s) of the manifest's input steps run by the shared pipeline
      (`apply_steps` over ResNet-18's: decode rgb, resize 256 bilinear, center_crop 224, normalize,
      to_layout NCHW) and of the same steps written directly with PIL and numpy, on the same encoded
      images: the `digits` dataset's 8×8 PNGs, and scikit-image's colour photographs encoded as JPEG
      and as PNG. Both produce the same tensors (checked); the two alternate in rounds so that drift
      in the machine's load hits both alike; the ratio shared/direct has a target of ≥ 0.9;
  (b) the share of wall time spent preprocessing beside inference, for ResNet-18 (torchvision,
      random weights, PyTorch eager, batch 1): each sample preprocessed, then predicted, both timed.
      Digits-sized inputs go through decode, normalize and to_layout only (3×8×8 tensors); the others
      through the full pipeline (3×224×224).

Usage: python benchmarks/pipeline_overhead.py [--rounds 5] [--seconds 1.0] [--samples 30]
"""

from __future__ import annotations

import argparse
import io
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from mlscope.contract.manifest import load_manifest
from mlscope.contract.steps import apply_steps
from mlscope.registry.datasets import resolve_dataset
from mlscope.registry.datasets.builtin import skimage_data_dir
from mlscope.runtime.data import iter_batches

# scikit-image's colour photographs (any size; the pipeline resizes them).
PHOTOS = ("chelsea.png", "coffee.png", "astronaut.png", "rocket.jpg", "motorcycle_left.png")
MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)


def direct(data: bytes) -> np.ndarray:
    """ResNet-18's preprocessing written out with PIL and numpy, as one would by hand."""
    image = Image.open(io.BytesIO(data)).convert("RGB")
    width, height = image.size
    size = (int(256 * width / height), 256) if height <= width else (256, int(256 * height / width))
    image = image.resize(size, Image.Resampling.BILINEAR)
    left, top = round((size[0] - 224) / 2.0), round((size[1] - 224) / 2.0)
    pixels = np.asarray(image.crop((left, top, left + 224, top + 224)), dtype=np.float32) / 255.0
    return np.ascontiguousarray(((pixels - MEAN) / STD).transpose(2, 0, 1))


def encoded_photos(fmt: str) -> list[bytes]:
    folder = skimage_data_dir()
    encoded = []
    for name in PHOTOS:
        buffer = io.BytesIO()
        Image.open(folder / name).convert("RGB").save(buffer, format=fmt, quality=90)
        encoded.append(buffer.getvalue())
    return encoded


def images_per_second(fn: Callable[[bytes], Any], images: Sequence[bytes], seconds: float) -> float:
    done, started = 0, time.perf_counter()
    while True:
        for data in images:
            fn(data)
        done += len(images)
        elapsed = time.perf_counter() - started
        if elapsed >= seconds:
            return done / elapsed


def compare_throughput(name: str, shared: Callable[[bytes], Any], images: Sequence[bytes], args: Any) -> None:
    for data in images[:3]:
        np.testing.assert_allclose(shared(data), direct(data), rtol=0, atol=1e-5)
    rates: dict[str, list[float]] = {"shared": [], "direct": []}
    for round_ in range(args.rounds):
        order = ("shared", "direct") if round_ % 2 == 0 else ("direct", "shared")
        for which in order:
            fn = shared if which == "shared" else direct
            rates[which].append(images_per_second(fn, images, args.seconds))
    shared_rate, direct_rate = statistics.median(rates["shared"]), statistics.median(rates["direct"])
    ratio = shared_rate / direct_rate
    verdict = "met" if ratio >= 0.9 else "MISSED"
    print(
        f"(a) {name:<26} {len(images):4d} images  shared {shared_rate:9.1f} img/s  direct "
        f"{direct_rate:9.1f} img/s  ratio {ratio:.3f}  (target ≥ 0.9: {verdict})"
    )


def preprocessing_share(name: str, steps: Any, images: Sequence[bytes], model: Any, samples: int) -> None:
    import torch

    pre_s, infer_s = 0.0, 0.0
    with torch.inference_mode():
        for warm in images[:3]:
            model(torch.from_numpy(apply_steps(steps, warm))[None])
        for index in range(samples):
            started = time.perf_counter()
            tensor = apply_steps(steps, images[index % len(images)])
            prepared = time.perf_counter()
            model(torch.from_numpy(tensor)[None])
            ended = time.perf_counter()
            pre_s += prepared - started
            infer_s += ended - prepared
    share = pre_s / (pre_s + infer_s)
    print(
        f"(b) {name:<26} input {'×'.join(map(str, tensor.shape)):<11} preprocess "
        f"{1000 * pre_s / samples:7.3f} ms  inference {1000 * infer_s / samples:8.3f} ms  "
        f"preprocessing {100 * share:5.1f}% of wall time"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=1.0, help="per timed run of one implementation")
    parser.add_argument("--samples", type=int, default=30, help="predicted samples per input kind in (b)")
    args = parser.parse_args()

    manifest = load_manifest(Path(str(resources.files("mlscope.manifests"))) / "pytorch" / "resnet18.yaml")
    steps = manifest.inputs[0].steps
    print("steps: " + ", ".join(f"{s.name}{dict(s.params) if s.params else ''}" for s in steps))

    with tempfile.TemporaryDirectory() as tmp:
        ref = resolve_dataset("digits", Path(tmp))
        digits = [sample for batch in iter_batches(ref, 512) for sample in batch.samples]

    def shared(data: bytes) -> np.ndarray:
        result: np.ndarray = apply_steps(steps, data)
        return result

    jpegs, pngs = encoded_photos("JPEG"), encoded_photos("PNG")
    compare_throughput("digits 8×8 PNG → 224", shared, digits, args)
    compare_throughput("photos JPEG → 224", shared, jpegs, args)
    compare_throughput("photos PNG → 224", shared, pngs, args)

    import torch
    from torchvision.models import resnet18

    torch.manual_seed(0)
    model = resnet18(weights=None).eval()
    small = [s for s in steps if s.name not in ("resize", "center_crop")]
    threads = torch.get_num_threads()
    print(f"ResNet-18, random weights, PyTorch {torch.__version__} eager, batch 1, {threads} threads")
    preprocessing_share("digits 8×8 (no resize)", small, digits, model, args.samples)
    preprocessing_share("digits 8×8 → 224", steps, digits, model, args.samples)
    preprocessing_share("photos JPEG → 224", steps, jpegs, model, args.samples)


if __name__ == "__main__":
    main()
