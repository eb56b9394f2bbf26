"""File baselines for benchmarks/warm_start.py: a model's cold start the way a user loads its
weights from a file, and what the predictor's own cold `load_ms` holds instead.

Each measurement runs in a fresh Python process (`CHILD`), as a user's program or a predictor
process would: it imports what it needs first (timed apart, as `cold_start.import_ms` is), then
times the load from the same points as `cold_start.warm_load_ms`: from opening the file (the
store's entry) to the model ready in eval mode, and then its first inference. Methods:

  state_dict     PyTorch: the module built as usual (random weights drawn), then
                 `load_state_dict(torch.load(file, weights_only=True))`, torchvision's own way
  mmap_assign    PyTorch: the module built on the meta device, then
                 `load_state_dict(torch.load(file, mmap=True, weights_only=True), assign=True)`
                 (the tensors stay views of the file's pages: the reads come at first inference)
  safetensors    PyTorch: torchvision's module on the meta device and `safetensors.torch.load_file`
                 assigned; a transformers model through `from_pretrained` of its saved directory
  session        ONNX Runtime: `InferenceSession` of the exported `.onnx` file
  store          the predictor's warm load from the model store (`load_mapped`), in a fresh process
                 that imported the model's library first, as the others do (the predictor's
                 `warm_load_ms` is measured after a cold load in its process)
  breakdown      what the predictor's cold `load()` holds (PyTorch): the model library's import,
                 which the predictor does inside `load()`, then `build_module` (random weights);
                 and, after it, the module built on the meta device (its structure alone)

Files are measured from the page cache (read just before) and after their pages were dropped:
`posix_fadvise(POSIX_FADV_DONTNEED)` after `fsync` (no root needed), checked with `mincore`;
`/proc/sys/vm/drop_caches` (the whole machine's cache, root only) only where that leaves pages
resident.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import mmap
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

# The model's weights written the way users keep them: a torch.save'd state dict, a safetensors file
# (a transformers model: its save_pretrained directory), both fsync'ed so their pages can be dropped.
WRITE = """
import json, os, sys
from pathlib import Path
import torch
from mlscope.registry.models import ModelRegistry
from mlscope.runtime.predictors.pytorch.models import build_module

name, folder = sys.argv[1], Path(sys.argv[2])
manifest = ModelRegistry.load([]).get(name, "pytorch")
module = build_module(manifest, seed=0)
model = getattr(module, "model", module)  # the library's module, without mlscope's output selector
state = model.state_dict()
files = {"state_dict": folder / f"{name}.pt"}
torch.save(state, files["state_dict"])
try:
    import safetensors.torch
except ImportError:
    pass
else:
    if manifest.source.kind == "transformers":
        files["safetensors"] = folder / f"{name}-pretrained"
        model.save_pretrained(files["safetensors"])
    else:
        files["safetensors"] = folder / f"{name}.safetensors"
        safetensors.torch.save_file(state, files["safetensors"])
for path in files.values():
    for file in [path] if path.is_file() else sorted(path.iterdir()):
        with open(file, "rb+") as handle:
            os.fsync(handle.fileno())
files["mmap_assign"] = files["state_dict"]
print(json.dumps({method: str(path) for method, path in files.items()}))
"""

CHILD = """
import importlib, json, os, sys, time
from pathlib import Path
import numpy as np
from mlscope.registry.models import ModelRegistry
from mlscope.runtime.predictors.inputs import synthetic_batch

name, framework, method, path, store, key, cache = sys.argv[1:8]
manifest = ModelRegistry.load([]).get(name, framework)
arrays = synthetic_batch(manifest, 1, np.random.default_rng(0))
source = manifest.source
clock = time.perf_counter_ns
ms = lambda start: (clock() - start) / 1e6
out = {}

def rchar():
    with open("/proc/self/io") as io:
        return next(int(line.split()[1]) for line in io if line.startswith("rchar:"))

def import_library():
    global transformers, torchvision
    if source.kind == "torchvision":
        import torchvision
    else:
        import transformers
        model_type = transformers.AutoConfig.for_model(source.target).model_type
        importlib.import_module(f"transformers.models.{model_type}.modeling_{model_type}")

start = clock()
if method != "breakdown":  # what a user's program imports: the framework, the model's library
    if framework == "onnxruntime":
        import onnxruntime as ort
    else:
        import torch
        import_library()
    if method == "safetensors":
        import safetensors.torch
if method in ("store", "breakdown"):  # and the predictor's own, as its import phase does
    from mlscope.runtime.frameworks import load_predictor_class
    from mlscope.runtime.model_store import ModelStore
    kind = load_predictor_class(framework)
out["import_ms"] = ms(start)

def library_module():
    if source.kind == "torchvision":
        return torchvision.models.get_model(source.target, weights=None)
    return transformers.AutoModel.from_config(transformers.AutoConfig.for_model(source.target))

if method == "breakdown":
    from mlscope.runtime.predictors.pytorch.models import build_module
    start = clock()
    import_library()  # inside the predictor's load(), the first build_module
    out["library_import_ms"] = ms(start)
    start = clock()
    build_module(manifest, seed=0)
    out["random_build_ms"] = ms(start)
    start = clock()
    build_module(manifest, seed=0, skeleton=True)
    out["meta_build_ms"] = ms(start)
    print(json.dumps(out))
    raise SystemExit

before = rchar()
start = clock()
if method == "store":
    predictor = kind(manifest=manifest, cache_dir=Path(cache))
    start = clock()  # warm_load_ms's start: the predictor made, the store's entry not yet opened
    predictor.load_mapped(ModelStore(Path(store), 2**40).open(key))
    out["load_ms"] = ms(start)
    batch = predictor.prepare(arrays)
    run = lambda: predictor.predict(batch)
elif method == "session":
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    out["load_ms"] = ms(start)
    run = lambda: session.run(None, arrays)
else:
    if method == "state_dict":
        model = library_module()
        model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
    elif method == "safetensors" and source.kind == "transformers":
        model = transformers.AutoModel.from_pretrained(path, local_files_only=True)
    else:
        with torch.device("meta"):
            model = library_module()
        if method == "mmap_assign":
            state = torch.load(path, map_location="cpu", mmap=True, weights_only=True)
        else:
            state = safetensors.torch.load_file(path)
        model.load_state_dict(state, assign=True)
    model.eval()
    out["load_ms"] = ms(start)
    left = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta]
    if left:
        why = f"{', '.join(left[:2])} stay on the meta device (not in a state dict)"
        print(json.dumps({"unavailable": why}))
        raise SystemExit
    inputs = [torch.from_numpy(arrays[spec.name]) for spec in manifest.inputs]
    names = [spec.name for spec in manifest.inputs]

    def run():
        with torch.inference_mode():
            return model(*inputs) if source.kind == "torchvision" else model(**dict(zip(names, inputs)))

out["read_mb"] = (rchar() - before) / 2**20
start = clock()
run()
out["first_inference_ms"] = ms(start)
print(json.dumps(out))
"""

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int]
_libc.mmap.argtypes += [ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]


def files_of(path: Path) -> list[Path]:
    """The file, or the files of a directory (a transformers save_pretrained directory)."""
    return [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())


def resident(paths: Sequence[Path]) -> float:
    """The fraction of the files' pages in the page cache (mincore on a mapping of each)."""
    pages = resident_pages = 0
    for path in paths:
        size = path.stat().st_size
        if size == 0:
            continue
        fd = os.open(path, os.O_RDONLY)
        try:
            address = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
            if address in (None, ctypes.c_void_p(-1).value):
                raise OSError(ctypes.get_errno(), f"mmap of {path}")
            count = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
            vector = ctypes.create_string_buffer(count)
            failed = _libc.mincore(ctypes.c_void_p(address), size, vector)
            _libc.munmap(ctypes.c_void_p(address), size)
            if failed:
                raise OSError(ctypes.get_errno(), f"mincore of {path}")
        finally:
            os.close(fd)
        pages += count
        resident_pages += sum(byte & 1 for byte in vector.raw)
    return resident_pages / pages if pages else 1.0


def evict(paths: Sequence[Path]) -> str:
    """Drop the files' pages from the page cache; returns how, and what stayed resident."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    how = "posix_fadvise DONTNEED"
    if resident(paths) > 0.01:
        try:
            with open("/proc/sys/vm/drop_caches", "w") as drop:
                drop.write("1\n")
            how = "/proc/sys/vm/drop_caches"
        except OSError:
            pass
    return f"{how}, {resident(paths):.0%} resident after"


def read_through(paths: Sequence[Path]) -> str:
    """Read the files once, so they are in the page cache; returns what is resident."""
    for path in paths:
        with open(path, "rb") as handle:
            while handle.read(1 << 24):
                pass
    return f"read first, {resident(paths):.0%} resident"


def write_files(name: str, folder: Path, environment: dict[str, str]) -> dict[str, Path]:
    """The model's weights files ({method: path}), written by a child process."""
    done = subprocess.run(
        [sys.executable, "-c", WRITE, name, str(folder)],
        capture_output=True,
        text=True,
        env=environment,
        timeout=1800,
        check=True,
    )
    return {method: Path(path) for method, path in json.loads(done.stdout.strip().splitlines()[-1]).items()}


def child(arguments: Sequence[str], environment: dict[str, str]) -> dict[str, Any]:
    """One measurement in a fresh process (see CHILD's arguments)."""
    done = subprocess.run(
        [sys.executable, "-c", CHILD, *arguments],
        capture_output=True,
        text=True,
        env=environment,
        timeout=1800,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"a baseline process failed ({' '.join(arguments[:4])}):\n{done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def medians(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Each figure's median over the runs (the first run's answer when one was unavailable)."""
    if "unavailable" in runs[0]:
        return runs[0]
    return {key: sorted(run[key] for run in runs)[len(runs) // 2] for key in runs[0]}


def measure(
    rounds: int, arguments: Sequence[str], environment: dict[str, str], before: Callable[[], str] | None
) -> tuple[dict[str, Any], str]:
    """Median figures of `rounds` fresh processes, each after `before()` (the page cache's state)."""
    runs, states = [], []
    for _ in range(rounds):
        states.append(before() if before else "")
        runs.append(child(arguments, environment))
        if "unavailable" in runs[-1]:
            break
    return medians(runs), states[-1]


#: PyTorch's file baselines, in the order printed.
PYTORCH_METHODS = ("state_dict", "mmap_assign", "safetensors")
