"""`mlscope run` end to end: real frameworks, real child processes, a real SQLite store.

Given / When / Then in each test's comments. Figures are never asserted against fixed numbers
(the machine is shared): the tests assert shapes, relations and stored state.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import RUNTIME_MANIFESTS
from tests.result_shape import LATENCY_KEYS, RESULT_KEYS

pytestmark = pytest.mark.slow

# Short runs whose figures count as valid on a busy machine (a loose stability bound, other processes
# allowed): these tests check the pipeline, not the machine's quiet; `mlscope run` exits 3 when a
# result is not valid.
FAST = [
    "--min-seconds", "0.2", "--min-count", "5", "--max-seconds", "5", "--measure", "warmup_seconds=0.05",
    "--measure", "stability=0.99", "--measure", "contention_limit=1.0",
]  # fmt: skip


def mlscope(env: dict[str, str], *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mlscope", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def printed_results(text: str) -> list[dict]:
    """The results a command printed with --json: one object, or one per line."""
    try:
        whole = json.loads(text)
    except ValueError:
        return [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    return whole if isinstance(whole, list) else [whole]


def ran_valid(done: subprocess.CompletedProcess[str]) -> list[dict]:
    """The results of a run that must be valid, asserting exit 0 and every point valid.

    Where the model is a tiny one and the run's settings put no limit on the machine's other load and
    accept any spread (FAST, or QUICK_VALID on a farm), nothing but a fault makes a point invalid, so
    exit 3 is a failure here; the message names each invalid point's reasons.
    """
    results = printed_results(done.stdout) if done.stdout.strip() else []
    invalid = [
        f"{r['framework']['name']} {m['scenario']} batch {m['batch_size']}: {m['validity']['reasons']}"
        for r in results
        for m in r.get("measurements") or []
        if not m["validity"]["valid"]
    ]
    assert done.returncode == 0 and not invalid, (
        f"exit {done.returncode}; invalid points: {invalid}\n{done.stderr[-3000:]}"
    )
    return results


def stored(env: dict[str, str]) -> list[dict]:
    listed = mlscope(env, "results", "list", "--json", "--limit", "1000")
    assert listed.returncode == 0, listed.stderr
    return json_lines(listed.stdout)


def test_run_on_both_frameworks_stores_results_of_the_contract_shape(mlscope_env: dict[str, str]) -> None:
    # Given a small real model with manifests for PyTorch and ONNX Runtime
    # When it is run on both at two batch sizes, in child processes
    done = mlscope(
        mlscope_env, "run", "test_tiny_mlp", "-f", "pytorch,onnxruntime", "-b", "1,4", "--json", *FAST
    )
    # Then both succeed, with the result shape of the contract and one measurement per batch size
    assert done.returncode == 0, done.stderr
    results = json_lines(done.stdout)
    assert [r["framework"]["name"] for r in results] == ["pytorch", "onnxruntime"]
    for result in results:
        assert set(result) >= RESULT_KEYS, RESULT_KEYS - set(result)
        assert result["status"] == "succeeded" and result["error"] is None
        assert result["runner"] == "process" and result["device"] == "cpu"
        assert [m["batch_size"] for m in result["measurements"]] == [1, 4]
        for m in result["measurements"]:
            latency = m["latency_ms"]
            assert set(latency) >= LATENCY_KEYS
            assert latency["count"] >= 5
            assert latency["min"] <= latency["median"] <= latency["p99"] <= latency["max"]
            assert latency["median_ci"][0] <= latency["median"] <= latency["median_ci"][1]
            assert m["throughput"] > 0
        cold = result["cold_start"]
        assert cold["import_ms"] > 0 and cold["load_ms"] > 0 and cold["first_inference_ms"] > 0
        assert cold["warm_process"] is False  # a fresh child process: the import was cold
        assert result["system"]["id"] and result["system"]["cpu"]["logical_cores"] >= 1
        assert result["framework"]["version"]
    # And the store lists them afterwards, newest first
    listed = stored(mlscope_env)
    assert [r["id"] for r in listed] == [r["id"] for r in reversed(results)]


def test_results_show_accepts_a_prefix_and_prints_the_stored_figures(mlscope_env: dict[str, str]) -> None:
    # Given one stored evaluation
    done = mlscope(mlscope_env, "run", "test_tiny_mlp", "-f", "pytorch", "--json", *FAST)
    assert done.returncode == 0, done.stderr
    (result,) = json_lines(done.stdout)
    # When it is shown by an 8-character prefix, as JSON with raw latencies
    shown = mlscope(mlscope_env, "results", "show", result["id"][:8], "--json", "--raw")
    # Then it is the same evaluation, and the raw latencies agree with the summary
    assert shown.returncode == 0, shown.stderr
    document = json.loads(shown.stdout)
    assert document["id"] == result["id"]
    (measurement,) = document["measurements"]
    raw = measurement["latencies_ns"]
    assert len(raw) == measurement["latency_ms"]["count"]
    assert min(raw) / 1e6 == pytest.approx(measurement["latency_ms"]["min"], rel=1e-6)
    # And the human view names the model and the system
    human = mlscope(mlscope_env, "results", "show", result["id"][:8])
    assert (
        human.returncode == 0 and "test_tiny_mlp" in human.stdout and result["system"]["id"] in human.stdout
    )


@pytest.mark.parametrize(
    ("model", "error_type", "phase", "words"),
    [
        ("test_crashing", "PredictorCrashed", "first_inference", "SIGSEGV"),
        ("test_broken_factory", "ValueError", "load", "weights file is corrupt"),
    ],
)
def test_a_failing_predictor_ends_as_a_failed_evaluation_not_a_dead_caller(
    mlscope_env: dict[str, str], model: str, error_type: str, phase: str, words: str
) -> None:
    # Given a stored successful evaluation
    good = mlscope(mlscope_env, "run", "test_tiny_mlp", "-f", "pytorch", "--json", *FAST)
    assert good.returncode == 0, good.stderr
    # When a model whose predictor fails is run in a child process
    bad = mlscope(mlscope_env, "run", model, "-f", "pytorch", "--json", *FAST)
    # Then mlscope exits 1 (not 2: not the user's mistake) with the failure stored, naming its phase
    assert bad.returncode == 1, bad.stderr
    (result,) = json_lines(bad.stdout)
    assert result["status"] == "failed"
    assert result["error"]["type"] == error_type
    assert result["error"]["phase"] == phase
    assert words in result["error"]["message"]
    # And nothing stored before is lost
    statuses = {r["model"]["name"]: r["status"] for r in stored(mlscope_env)}
    assert statuses == {"test_tiny_mlp": "succeeded", model: "failed"}


def test_a_hanging_predictor_is_ended_at_the_time_limit(mlscope_env: dict[str, str]) -> None:
    # When a model that never returns is run with a 20-second limit
    done = mlscope(mlscope_env, "run", "test_hanging", "-f", "pytorch", "--timeout", "20", "--json", *FAST)
    # Then it fails as a timeout in the phase where it hung, and the caller returned
    assert done.returncode == 1, done.stderr
    (result,) = json_lines(done.stdout)
    assert result["error"]["type"] == "Timeout"
    assert result["error"]["phase"] == "first_inference"


def test_a_predictor_over_its_memory_limit_is_ended(mlscope_env: dict[str, str]) -> None:
    # When a model that keeps allocating is run with a 1500 MB limit
    done = mlscope(
        mlscope_env, "run", "test_memory_hungry", "-f", "pytorch", "--memory-limit", "1500", "--json", *FAST
    )
    # Then it fails as out of memory, naming the limit
    assert done.returncode == 1, done.stderr
    (result,) = json_lines(done.stdout)
    assert result["error"]["type"] == "OutOfMemory"
    assert "1500 MB" in result["error"]["message"]


def test_a_predictor_over_the_default_memory_limit_is_ended(mlscope_env: dict[str, str]) -> None:
    # Given a default limit of 1500 MB for every predictor, and a request that sets none
    env = {**mlscope_env, "MLSCOPE_PREDICTOR_MEMORY_MB": "1500"}
    # When a model that keeps allocating is run in a child process
    done = mlscope(env, "run", "test_memory_hungry", "-f", "pytorch", "--json", *FAST)
    # Then it fails as out of memory, naming the limit and that it was the default
    assert done.returncode == 1, done.stderr
    (result,) = json_lines(done.stdout)
    assert result["error"]["type"] == "OutOfMemory"
    assert (
        "over its memory limit of 1500 MB (the default: setting predictor_memory_mb)"
        in result["error"]["message"]
    )


def test_inline_runner_gives_the_same_shape_and_reports_a_warm_process(mlscope_env: dict[str, str]) -> None:
    # When run inline (the caller's process) on both frameworks
    done = mlscope(
        mlscope_env,
        "run",
        "test_tiny_mlp",
        "-f",
        "pytorch,onnxruntime",
        "--runner",
        "inline",
        "--json",
        *FAST,
    )
    # Then both succeed with the same result shape
    assert done.returncode == 0, done.stderr
    results = json_lines(done.stdout)
    assert [r["runner"] for r in results] == ["inline", "inline"]
    assert all(set(r) >= RESULT_KEYS for r in results)
    # And the first import of each framework in this process was a cold one
    assert [r["cold_start"]["warm_process"] for r in results] == [False, False]


@pytest.fixture(scope="module")
def store_with_one_result(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    """A SQLite store holding one real run's result, made once for the module, and its listing: each
    bad-input test starts from a copy of it."""
    directory = tmp_path_factory.mktemp("one-result")
    env = {
        **os.environ,
        "MLSCOPE_STORE_URL": f"sqlite:///{directory / 'store.db'}",
        "MLSCOPE_CACHE_DIR": str(directory / "cache"),
        "MLSCOPE_MANIFESTS": str(RUNTIME_MANIFESTS),
        "MLSCOPE_SETTINGS": str(directory / "no-settings.toml"),
    }
    good = mlscope(env, "run", "test_tiny_mlp", "-f", "onnxruntime", *FAST)
    assert good.returncode == 0, good.stderr
    listed = stored(env)
    assert [r["status"] for r in listed] == ["succeeded"]
    return directory / "store.db", listed


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["run", "resnet19"], "unknown model 'resnet19'"),
        (["run", "resnet18", "-f", "tensorflw"], "unknown framework 'tensorflw'"),
        (["run", "resnet18", "-f", "pytorch", "-b", "1,0"], "batch_sizes.1"),
        (["run", "resnet18", "-f", "pytorch", "-b", "one"], "'one' is not a whole number"),
        (["run", "resnet18", "-f", "pytorch", "--device", "tpu"], "device"),
        (["run", "resnet18", "-f", "pytorch", "--device", "cuda:0"], "cuda:0"),
        (["run", "resnet18", "-f", "pytorch", "--runner", "ssh"], "runner"),
        (["run", "resnet18", "-f", "pytorch", "--measure", "min_count=-3"], "min_count"),
        (["run", "resnet18", "-f", "pytorch", "--measure", "speed=9"], "speed"),
        (["run", "resnet18", "-f", "pytorch", "-s", "serve"], "scenarios.0"),
        (
            ["run", "resnet18", "-f", "onnxruntime", "--option", "graph_optimization_level=fast"],
            "options.graph_optimization_level",
        ),
        (["run", "resnet18", "-f", "onnxruntime", "--option", "colour=red"], "options.colour"),
        (["results", "show", "ffffffffffff"], "ffffffffffff"),
        (["results", "list", "--status", "done"], "status"),
    ],
)
def test_bad_input_exits_2_with_one_line_and_keeps_the_store(
    mlscope_env: dict[str, str], store_with_one_result: tuple[Path, list[dict]], args: list[str], words: str
) -> None:
    # Given a store with one result
    made, listed = store_with_one_result
    store = Path(mlscope_env["MLSCOPE_STORE_URL"].removeprefix("sqlite:///"))
    for part in made.parent.glob(f"{made.name}*"):  # the database and any journal beside it
        shutil.copy2(part, store.with_name(part.name))
    # When the user makes a mistake
    done = mlscope(mlscope_env, *args)
    # Then the answer is exit code 2 with a short message naming the problem, never a traceback
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert words in done.stderr
    assert "Traceback" not in done.stderr
    # And the store still holds exactly what it held
    assert stored(mlscope_env) == listed


def test_a_malformed_manifest_names_its_file_and_field(mlscope_env: dict[str, str], tmp_path: Path) -> None:
    # Given a manifest directory with a manifest whose batch dimension is zero
    extra = tmp_path / "manifests"
    extra.mkdir()
    broken = (RUNTIME_MANIFESTS / "tiny_mlp-pytorch.yaml").read_text().replace("shape: [32]", "shape: [0]")
    (extra / "broken.yaml").write_text(broken.replace("test_tiny_mlp", "broken_mlp"))
    env = {**mlscope_env, "MLSCOPE_MANIFESTS": f"{RUNTIME_MANIFESTS}:{extra}"}
    # When any model is run
    done = mlscope(env, "run", "test_tiny_mlp", "-f", "pytorch")
    # Then exit 2, naming the file and the field
    assert done.returncode == 2
    assert "broken.yaml" in done.stderr and "inputs.0.shape.0" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_framework_version_the_manifest_excludes_is_refused(
    mlscope_env: dict[str, str], tmp_path: Path
) -> None:
    # Given a manifest that needs an ONNX Runtime from the future
    extra = tmp_path / "manifests"
    extra.mkdir()
    text = (RUNTIME_MANIFESTS / "tiny_mlp-onnxruntime.yaml").read_text().replace('">=1.16"', '">=99"')
    (extra / "future.yaml").write_text(text.replace("test_tiny_mlp", "future_mlp"))
    env = {**mlscope_env, "MLSCOPE_MANIFESTS": f"{RUNTIME_MANIFESTS}:{extra}"}
    # When it is run
    done = mlscope(env, "run", "future_mlp", "-f", "onnxruntime")
    # Then exit 2, naming the constraint and the installed version
    assert done.returncode == 2
    assert "needs onnxruntime >=99" in done.stderr


def test_models_and_frameworks_list_what_is_shipped(mlscope_env: dict[str, str]) -> None:
    models = json_lines(mlscope(mlscope_env, "models", "--json").stdout)
    pairs = {(m["name"], m["framework"]) for m in models}
    for name in ("resnet18", "resnet50", "mobilenet_v2", "alexnet", "vgg16", "bert_base"):
        assert {(name, "pytorch"), (name, "onnxruntime")} <= pairs
    frameworks = {f["name"]: f for f in json_lines(mlscope(mlscope_env, "frameworks", "--json").stdout)}
    assert frameworks["pytorch"]["available"] and frameworks["onnxruntime"]["available"]


@pytest.mark.parametrize(
    "signals",
    [(signal.SIGINT,), (signal.SIGTERM,), (signal.SIGTERM, signal.SIGINT, signal.SIGINT)],
    ids=["SIGINT", "SIGTERM", "SIGTERM-then-two-SIGINTs"],
)
def test_interrupting_a_run_ends_its_predictor_and_cancels_the_evaluation(
    mlscope_env: dict[str, str], signals: tuple[signal.Signals, ...], tmp_path: Path
) -> None:
    # Given a run whose predictor process is stuck inside an inference (it writes no more events,
    # so nothing but mlscope can end it)
    marker = tmp_path / "hanging"
    run = subprocess.Popen(
        [sys.executable, "-m", "mlscope", "run", "test_hanging", "-f", "pytorch"],
        # faulthandler: a run that does not end is made to print every thread's stack (below).
        env={**mlscope_env, "MLSCOPE_TEST_HANG_MARKER": str(marker), "PYTHONFAULTHANDLER": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert marker.exists(), "the predictor never reached its inference"
    # The predictor was started ahead and given its job before the store was opened
    # (runners/prestart.py): the evaluation is recorded a moment later, on a loaded machine later still
    while [r["status"] for r in stored(mlscope_env)] != ["running"] and time.monotonic() < deadline:
        time.sleep(0.2)
    predictors = [
        p
        for p in psutil.Process(run.pid).children(recursive=True)
        if "mlscope.runtime.execute" in p.cmdline()
    ]
    assert predictors
    # When mlscope is interrupted (Ctrl-C, or a SIGTERM from a supervisor), maybe again at once (an
    # impatient user's second Ctrl-C while it stops)
    for signum in signals:
        run.send_signal(signum)
        time.sleep(0.03)  # the next one lands while it stops the predictor and stores the cancellation
    try:
        code = run.wait(timeout=90)  # behaviour, not speed: a loaded machine is slow to end it
    except subprocess.TimeoutExpired:
        run.send_signal(signal.SIGABRT)  # faulthandler prints where each thread is, then it ends
        _, stuck = run.communicate(timeout=30)
        for child in predictors:
            with contextlib.suppress(psutil.NoSuchProcess):
                child.kill()
        names = ", ".join(signum.name for signum in signals)
        pytest.fail(f"mlscope did not end within 90 s of {names}; its threads:\n{stuck[-6000:]}")
    # Then mlscope ends with 130, its predictor process is gone, and the evaluation is cancelled
    assert code == 130, run.stderr.read() if run.stderr else ""
    _gone, alive = psutil.wait_procs(predictors, timeout=10)
    for survivor in alive:
        survivor.kill()
    assert not alive, "the predictor process outlived mlscope"
    assert [r["status"] for r in stored(mlscope_env)] == ["cancelled"]


def test_predictor_options_reach_the_framework_and_are_recorded(mlscope_env: dict[str, str]) -> None:
    # When ONNX Runtime is asked for one thread and basic graph optimisation
    done = mlscope(
        mlscope_env,
        "run",
        "test_tiny_mlp",
        "-f",
        "onnxruntime",
        "--threads",
        "1",
        "--option",
        "graph_optimization_level=basic",
        "--json",
        *FAST,
    )
    # Then the stored result says what the session ran with
    assert done.returncode == 0, done.stderr
    (result,) = json_lines(done.stdout)
    assert result["framework"]["threads"] == 1
    assert result["framework"]["graph_optimization_level"] == "basic"
    assert result["framework"]["providers"] == ["CPUExecutionProvider"]


def test_a_run_whose_every_point_is_invalid_exits_3_and_is_listed_as_not_valid(
    mlscope_env: dict[str, str],
) -> None:
    # Given a run that cannot reach its minimum count before its time is up
    done = mlscope(
        mlscope_env, "run", "test_tiny_mlp", "-f", "pytorch", "--json",
        "--min-count", "100000000", "--min-seconds", "0.1", "--max-seconds", "0.3",
    )  # fmt: skip
    # Then the evaluation succeeded but the command says its figures are not to be trusted
    assert done.returncode == 3, done.stderr
    (result,) = json_lines(done.stdout)
    assert result["status"] == "succeeded"
    assert all(not m["validity"]["valid"] for m in result["measurements"])
    # And the listing does not show it as a plain success
    listed = mlscope(mlscope_env, "results", "list")
    assert listed.returncode == 0, listed.stderr
    assert "succeeded, NOT" in listed.stdout  # "succeeded, NOT VALID: ...", wrapped in its column


def test_progress_is_drawn_when_forced_and_never_under_json_or_into_a_pipe(
    mlscope_env: dict[str, str],
) -> None:
    # Given a run of one model on two frameworks at two batch sizes (inline: quick)
    args = ["run", "test_tiny_mlp", "-f", "pytorch,onnxruntime", "-b", "1,4", "--runner", "inline", *FAST]
    # When progress is forced (stderr here is a pipe, as in a script)
    forced = mlscope({**mlscope_env, "MLSCOPE_PROGRESS": "always"}, *args)
    # Then stderr shows a row per evaluation and one for both, as they ended: points done, elapsed
    assert forced.returncode == 0, forced.stderr
    shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", forced.stderr).replace("\r", "\n")
    last = [line for line in shown.splitlines() if line.strip()][-3:]  # the rows as they were left
    assert re.match(r"2 evaluations\s.*4/4 .*\d:\d\d:\d\d", last[0]), last
    assert re.match(r"test_tiny_mlp on pytorch\s.*2/2 succeeded\s+\d:\d\d:\d\d", last[1]), last
    assert re.match(r"test_tiny_mlp on onnxruntime\s.*2/2 succeeded\s+\d:\d\d:\d\d", last[2]), last
    # And while the second ran, an ETA at the pace of the points done
    assert re.search(r"2 evaluations\s.*[123]/4 .*ETA \d:\d\d:\d\d", shown), shown
    # When the same runs with --json, forced or not, or without forcing into a pipe
    for env, extra in (
        ({**mlscope_env, "MLSCOPE_PROGRESS": "always"}, ["--json"]),
        ({k: v for k, v in mlscope_env.items() if k != "MLSCOPE_PROGRESS"}, []),
    ):
        quiet = mlscope(env, *args, *extra)
        # Then stderr has no progress at all: no rows, no carriage return, no cursor movement
        assert quiet.returncode == 0, quiet.stderr
        assert "test_tiny_mlp on" not in quiet.stderr and "evaluations" not in quiet.stderr
        assert "\r" not in quiet.stderr and "\x1b[" not in quiet.stderr, quiet.stderr
        assert "test_tiny_mlp" in quiet.stdout  # the results themselves are on stdout
