"""TrIMS warm starts: how much faster is a model loaded from the model store than from its source
or from a weights file, and how much memory do predictor processes save by sharing one copy?

Prints, in one run on this machine:
  (a) per model and framework, the cold and the warm model load as a predictor process reports them
      (`python -m mlscope.runtime.execute`, the process runner's command, one process per round):
      `cold_start.load_ms` against `cold_start.warm_load_ms` (the model from the store's mapping),
      medians over the rounds after the first (which publishes), their ratio, the first inferences
      after each, and the bytes the warm load read (rchar). The cold `load_ms` is not a file load:
      for these models (random weights) it is PyTorch's model library imported and the module built
      with random weights drawn, or ONNX Runtime's session made from the exported graph file;
  (a2) the cold start a user has: the weights loaded from a file, each way in a fresh process, the
      imports timed apart, from the page cache and with the file's pages dropped, against the warm
      load; and the cold `load_ms` broken into its parts (see _warm_start_files.py);
  (b) per model and framework, the steady-state latency of the warm model against the cold one, both
      in one process, inferences interleaved (the warm model is the one an evaluation measures), with
      a second cold model beside them as a control: how far two sessions of one model differ here
      anyway; and whether the warm model's outputs are bitwise the cold one's;
  (c) per model and framework, the resident (RSS) and proportional (PSS, from
      /proc/<pid>/smaps_rollup) memory of N predictor processes holding the model at once, each loaded
      on its own against all warm from the store, and what sharing saved. PSS divides a shared page
      among its mappers, so the sum of PSS counts the store's copy once. (ONNX Runtime's entry holds
      its pre-packed weights too, so it is larger than the weights.)

Models: ResNet-50 (torchvision, random weights) and BERT-base (transformers' default BertConfig:
12 layers, d_model 768, 12 heads, ff 3072, vocabulary 30522; random weights): the `resnet50` and
`bert_base` manifests. Nothing is downloaded. The store and cache are temporary directories (the
store on /dev/shm where there is one, the cache and the weights files on the temporary directory's
disk), removed at the end.

Usage: python benchmarks/warm_start.py [--rounds 4] [--file-rounds 3] [--processes 4]
       [--frameworks pytorch,onnxruntime] [--models resnet50,bert_base] [--inferences 20]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _warm_start_files as files

REPO = Path(__file__).resolve().parents[1]
MODELS = ("resnet50", "bert_base")
MB = 2**20

# One predictor process of the memory test: load the model (cold, or warm from the store), run one
# inference, say so, and hold it until told to go.
HOLDER = """
import sys
from pathlib import Path
import numpy as np
from mlscope.registry.models import ModelRegistry
from mlscope.runtime.model_store import ModelStore
from mlscope.runtime.frameworks import load_predictor_class
from mlscope.runtime.predictors.inputs import synthetic_batch

name, framework, mode, store_dir, key, cache = sys.argv[1:7]
manifest = ModelRegistry.load([]).get(name, framework)
predictor = load_predictor_class(framework)(manifest=manifest, cache_dir=Path(cache))
if mode == "warm":
    predictor.load_mapped(ModelStore(Path(store_dir), 2**40).open(key))
else:
    predictor.load()
predictor.predict(predictor.prepare(synthetic_batch(manifest, 1, np.random.default_rng(0))))
print("ready", flush=True)
sys.stdin.readline()
"""


# Cold and warm model side by side in one process, and a second cold model as a control, inferences
# interleaved (each round in another order): [cold median, warm median, second cold median, warm
# outputs bitwise the cold one's].
INTERLEAVED = """
import json, statistics, sys, tempfile, time
from pathlib import Path
import numpy as np
from mlscope.registry.models import ModelRegistry
from mlscope.runtime.frameworks import load_predictor_class
from mlscope.runtime.model_store import ModelStore
from mlscope.runtime.predictors.inputs import synthetic_batch

name, framework, cache, count = sys.argv[1], sys.argv[2], Path(sys.argv[3]), int(sys.argv[4])
manifest = ModelRegistry.load([]).get(name, framework)
kind = load_predictor_class(framework)
cold = kind(manifest=manifest, cache_dir=cache)
cold.fetch()
cold.load()
with tempfile.TemporaryDirectory(dir="/dev/shm" if Path("/dev/shm").is_dir() else None) as folder:
    store = ModelStore(Path(folder), 2**40)
    store.publish("entry", cold.weights_to_store()).close()
    warm = kind(manifest=manifest, cache_dir=cache)
    warm.fetch()
    warm.load_mapped(store.open("entry"))
    control = kind(manifest=manifest, cache_dir=cache)
    control.fetch()
    control.load()
    arrays = synthetic_batch(manifest, 1, np.random.default_rng(0))
    models = {"cold": cold, "warm": warm, "control": control}
    batches = {which: (predictor, predictor.prepare(arrays)) for which, predictor in models.items()}
    answers = {which: p.outputs_to_numpy(p.predict(batch)) for which, (p, batch) in batches.items()}
    same = all(np.array_equal(answers["warm"][out], answers["cold"][out]) for out in answers["cold"])
    times = {which: [] for which in models}
    names = list(models)
    for index in range(count + 3):
        for which in names[index % 3:] + names[:index % 3]:
            predictor, batch = batches[which]
            start = time.perf_counter_ns()
            predictor.predict(batch)
            if index >= 3:
                times[which].append((time.perf_counter_ns() - start) / 1e6)
    print(json.dumps([statistics.median(times[which]) for which in names] + [same]))
    warm.close()
"""


FILE_LEGEND = """
cold start from a weights file, the way users load one, against the warm load (each: a fresh process,
medians of {rounds}; import = the framework, the model's library and the file format's, timed apart as
import_ms is; load = from opening the file to the model in eval mode, warm_load_ms's end points; read =
bytes read() while loading, /proc/self/io rchar; ratios: each load over warm_load_ms as the predictor
processes above report it ("reported", measured after a cold load in the same process) and over the
store's warm load in a fresh process like the file's ("fresh"); then load + first inference over the
same pairs).
  state_dict: the module built as usual (random weights drawn), load_state_dict(torch.load(file))
  mmap_assign: built on the meta device, load_state_dict(torch.load(file, mmap=True), assign=True):
    the tensors stay views of the file, so its pages are read at the first inference
  safetensors: torchvision's module on the meta device with load_file assigned; transformers' from_pretrained
  session: onnxruntime.InferenceSession of the exported .onnx file
  store: the predictor's load_mapped from the model store, the first model of a fresh process
  page cache: the file read just before; dropped: its pages dropped first (how, and what stayed, printed)
The old cold: load_ms, as the predictor processes report it for these random-weights models:
  PyTorch: the model library imported (torchvision, transformers) inside load, then the module built
  with random weights drawn (broken down below); ONNX Runtime: the session from the cached .onnx file."""


def environment() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }


def job(name: str, framework: str, cache: Path, store: Path) -> dict[str, Any]:
    from mlscope.contract.job import Job
    from mlscope.registry.models import ModelRegistry

    manifest = ModelRegistry.load([]).get(name, framework)
    return Job(
        evaluation_id="warm-start-benchmark",
        manifest=manifest.to_dict(),
        origin=manifest.origin,
        framework=framework,
        device="cpu",
        batch_sizes=(1,),
        scenarios=("single_stream",),
        measure={"min_count": 1, "min_seconds": 0, "warmup_count": 0, "warmup_seconds": 0, "max_seconds": 5},
        cache_dir=str(cache),
        model_store={"directory": str(store), "budget_mb": 4096},
    ).to_dict()


def predictor_process(document: dict[str, Any]) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "mlscope.runtime.execute"],
        input=json.dumps(document),
        capture_output=True,
        text=True,
        env=environment(),
        timeout=1800,
        check=False,
    )
    final = json.loads(done.stdout.strip().splitlines()[-1])
    if final["event"] != "result":
        raise SystemExit(f"the predictor process failed: {final.get('message')}\n{done.stderr[-2000:]}")
    return dict(final["result"]["cold_start"])


def load_times(name: str, framework: str, rounds: int, cache: Path, store: Path) -> dict[str, float]:
    """Print the cold and warm loads the predictor processes report; returns their medians."""
    document = job(name, framework, cache, store)
    colds = [predictor_process(document) for _ in range(rounds)]
    published, found = colds[0], colds[1:]
    assert published["warm_source"] == "published" and all(c["warm_source"] == "store" for c in found)

    def median(key: str) -> float:
        return statistics.median(c[key] for c in found)

    cold_ms, warm_ms = median("load_ms"), median("warm_load_ms")
    print(
        f"{name:9} {framework:11} {published['warm_shared_mb']:7.1f} MB  load: cold {cold_ms:8.1f} ms, "
        f"warm {warm_ms:6.1f} ms, ratio {cold_ms / warm_ms:6.1f}x | first inference: cold "
        f"{median('first_inference_ms'):7.1f} ms, warm {median('warm_first_inference_ms'):7.1f} ms | "
        f"read while loading warm {median('warm_read_mb'):.2f} MB | publish (round 1) "
        f"{published['warm_publish_ms']:.0f} ms"
    )
    keys = ("load_ms", "warm_load_ms", "first_inference_ms", "warm_first_inference_ms")
    return {key: median(key) for key in keys}


def onnx_file(name: str, cache: Path) -> Path:
    """The exported graph of the model the predictor processes made in the cache."""
    from mlscope.registry.models import ModelRegistry

    manifest = ModelRegistry.load([]).get(name, "onnxruntime")
    return cache / "onnx" / f"{manifest.sha256}-seed0.onnx"


def file_baselines(
    name: str,
    framework: str,
    rounds: int,
    reported: dict[str, float],
    cache: Path,
    store: Path,
    weights: dict[str, Path],
) -> None:
    """The model's cold start from a file, each way in fresh processes, beside the warm load."""
    entry = entry_of(name, framework, store)
    assert entry is not None, "load_times published it"
    key = entry[0]
    warm_ms, old = reported["warm_load_ms"], reported["load_ms"]
    warm_total = warm_ms + reported["warm_first_inference_ms"]
    print(
        f"{name:9} {framework:11} reported: load_ms {old:7.1f} ms (the old cold), warm_load_ms "
        f"{warm_ms:6.1f} ms, ratio {old / warm_ms:5.1f}x; with first inference {warm_total:6.1f} ms warm"
    )
    env = environment()
    fresh, _ = files.measure(rounds, [name, framework, "store", "", str(store), key, str(cache)], env, None)
    fresh_total = fresh["load_ms"] + fresh["first_inference_ms"]

    def line(label: str, figures: dict[str, Any], state: str) -> None:
        if "unavailable" in figures:
            print(f"    {label:29} n/a: {figures['unavailable']}")
            return
        load, first = figures["load_ms"], figures["first_inference_ms"]
        ratios = (
            f"over warm: {load / warm_ms:5.1f}x reported, {load / fresh['load_ms']:5.1f}x fresh; with first "
            f"inference {(load + first) / warm_total:4.1f}x, {(load + first) / fresh_total:4.1f}x"
        )
        print(
            f"    {label:29} import {figures['import_ms']:7.1f} ms | load {load:7.1f} ms, first inference "
            f"{first:7.1f} ms, read {figures['read_mb']:5.1f} MB | {ratios} | {state}"
        )

    line("store (warm, fresh process)", fresh, "the store on /dev/shm: in memory")
    methods = [m for m in files.PYTORCH_METHODS if m in weights]
    for method in ["session"] if framework == "onnxruntime" else methods:
        path = onnx_file(name, cache) if method == "session" else weights[method]
        paths = files.files_of(path)
        for cache_state, before in (("page cache", files.read_through), ("dropped", files.evict)):
            arguments = [name, framework, method, str(path), str(store), key, str(cache)]
            figures, state = files.measure(rounds, arguments, env, functools.partial(before, paths))
            line(f"{method} ({cache_state})", figures, state)
            if "unavailable" in figures:
                break
    if framework == "pytorch":
        parts, _ = files.measure(rounds, [name, framework, "breakdown", "", "", "", str(cache)], env, None)
        print(
            f"    the old cold load_ms holds, in a fresh process: the model library's import "
            f"{parts['library_import_ms']:7.1f} ms + the module built with random weights "
            f"{parts['random_build_ms']:7.1f} ms (its structure alone, on the meta device, after: "
            f"{parts['meta_build_ms']:6.1f} ms); no weights file"
        )
    else:
        print("    the old cold load_ms is the session from the same .onnx file, from the page cache")


def steady_latency(name: str, framework: str, cache: Path, inferences: int) -> None:
    """Does the warm model run as fast as the cold one? Both loaded in one process, inferences
    interleaved (so the machine's load hits both alike), medians."""
    done = subprocess.run(
        [sys.executable, "-c", INTERLEAVED, name, framework, str(cache), str(inferences)],
        capture_output=True,
        text=True,
        env=environment(),
        timeout=1800,
        check=True,
    )
    cold_ms, warm_ms, control_ms, same = json.loads(done.stdout.strip().splitlines()[-1])
    print(
        f"{name:9} {framework:11} median of {inferences}: cold model {cold_ms:7.1f} ms, "
        f"warm model {warm_ms:7.1f} ms, second cold model (control) {control_ms:7.1f} ms | warm outputs "
        f"{'bitwise the cold ones' if same else 'DIFFER from the cold ones'}"
    )


def rollup(pid: int) -> tuple[int, int]:
    """(RSS, PSS) of a process in bytes, from /proc/<pid>/smaps_rollup."""
    values = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        parts = line.split()
        if parts and parts[0] in ("Rss:", "Pss:"):
            values[parts[0]] = int(parts[1]) * 1024
    return values["Rss:"], values["Pss:"]


def held_memory(
    name: str, framework: str, mode: str, processes: int, cache: Path, store: Path, key: str
) -> tuple[int, int]:
    """Sum of RSS and of PSS of `processes` predictor processes holding the model at once."""
    children = [
        subprocess.Popen(
            [sys.executable, "-c", HOLDER, name, framework, mode, str(store), key, str(cache)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=environment(),
        )
        for _ in range(processes)
    ]
    try:
        for child in children:
            assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        time.sleep(0.5)
        readings = [rollup(child.pid) for child in children]
    finally:
        for child in children:
            if child.stdin is not None:
                child.stdin.close()
        for child in children:
            child.wait(timeout=60)
    return sum(r for r, _ in readings), sum(p for _, p in readings)


def entry_of(name: str, framework: str, store: Path) -> tuple[str, int] | None:
    """The store's entry of the model on the framework, and its size in bytes."""
    from mlscope.runtime.model_store import ModelStore

    prefix = f"{framework}-{name}-"
    found = [(key, size) for key, size, _, _ in ModelStore(store, 2**40).entries() if key.startswith(prefix)]
    return found[0] if found else None


def memory_saved(name: str, framework: str, processes: int, cache: Path, store: Path) -> None:
    entry = entry_of(name, framework, store)
    if entry is None:
        predictor_process(job(name, framework, cache, store))  # publishes it
        entry = entry_of(name, framework, store)
    assert entry is not None
    key, size = entry
    own_rss, own_pss = held_memory(name, framework, "cold", processes, cache, store, key)
    warm_rss, warm_pss = held_memory(name, framework, "warm", processes, cache, store, key)
    saved = own_pss - warm_pss
    own = f"each its own: RSS {own_rss / MB:7.1f} MB, PSS {own_pss / MB:7.1f} MB"
    shared = f"sharing the store's: RSS {warm_rss / MB:7.1f} MB, PSS {warm_pss / MB:7.1f} MB"
    print(
        f"{name:9} {framework:11} stored {size / MB:6.1f} MB | {own} | {shared} | saved (PSS) "
        f"{saved / MB:7.1f} MB = {saved / size:.2f} x the stored size (one copy instead of {processes}: "
        f"{processes - 1} x)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4, help="predictor processes per model (>= 2)")
    parser.add_argument("--file-rounds", type=int, default=3, help="fresh processes per file baseline")
    parser.add_argument("--processes", type=int, default=4, help="processes holding a model at once")
    parser.add_argument("--frameworks", default="pytorch,onnxruntime")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--inferences", type=int, default=20, help="per model in the latency check")
    arguments = parser.parse_args()
    shm = Path("/dev/shm")
    root = Path(tempfile.mkdtemp(prefix="mlscope-warm-bench-", dir=shm if shm.is_dir() else None))
    cache = Path(tempfile.mkdtemp(prefix="mlscope-warm-bench-cache-"))
    store = root / "models"
    try:
        print(f"cold vs warm model load ({arguments.rounds} predictor processes each; medians of the last "
              f"{arguments.rounds - 1}; CPU, {os.cpu_count()} logical cores; load average "
              f"{os.getloadavg()[0]:.1f})")  # fmt: skip
        models = arguments.models.split(",")
        reported = {
            (name, framework): load_times(name, framework, arguments.rounds, cache, store)
            for name in models
            for framework in arguments.frameworks.split(",")
        }
        print(FILE_LEGEND.format(rounds=arguments.file_rounds))
        for name in models:
            weights = {}
            if "pytorch" in arguments.frameworks.split(","):
                folder = cache / "weights"
                folder.mkdir(exist_ok=True)
                weights = files.write_files(name, folder, environment())
            for framework in arguments.frameworks.split(","):
                file_baselines(
                    name, framework, arguments.file_rounds, reported[name, framework], cache, store, weights
                )
        print("\nsteady-state latency, batch 1: the warm model against the cold one")
        for name in models:
            for framework in arguments.frameworks.split(","):
                steady_latency(name, framework, cache, arguments.inferences)
        print(f"\nmemory of {arguments.processes} predictor processes holding one model")
        for name in models:
            for framework in arguments.frameworks.split(","):
                memory_saved(name, framework, arguments.processes, cache, store)
        print(f"\nload average at the end: {os.getloadavg()[0]:.1f}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(cache, ignore_errors=True)


if __name__ == "__main__":
    main()
