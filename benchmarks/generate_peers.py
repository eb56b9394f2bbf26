"""Does mlscope's endpoint client measure what a peer client measures, and the truth?

Runs GuideLLM (the `guidellm` package, in an environment of its own: its dependencies are not
mlscope's) and mlscope's generate scenario (`run_generate` over `EndpointEngine`, what `mlscope run
--scenario generate --endpoint URL` runs) against the same servers, one client after the other in
alternating rounds (`--rounds`; the median over them, their range in brackets):

  (a) the project's test endpoint (`tests/fixtures/mock_endpoint.py`, in a process of its own) with
      known timing: the first token `--first-token-ms` after the request, then one token every
      `--token-ms`. The medians of TTFT and TPOT from both clients, beside the truth (the endpoint's
      own timing of that client's requests, the scripted sleeps' overshoot included) and each one's
      distance from it (target: mlscope within 2% of the truth and no further from it than the peer);
  (b) `transformers serve` on the catalogue's tiny Llama (hf:llama, random weights, the model
      directory mlscope materialises): the same medians, side by side (no truth here);
  (c) each client's ceiling: requests/s at concurrency 16 against the test endpoint answering at once.

TPOT is vLLM's (last token - first token) / (output tokens - 1), which GuideLLM calls ITL (its own
"TPOT" includes the first token: (last token - request start) / output tokens); docs/generate.md,
"Against a peer client".

Nothing is downloaded at run time: GuideLLM runs with the Hugging Face hub offline and counts its
prompts' tokens with the tiny Llama's own tokenizer (its model directory, passed as GuideLLM's
tokenizer), the one `transformers serve` loads.

Usage:
    python benchmarks/generate_peers.py --setup ENV_DIR        # creates GuideLLM's environment
    python benchmarks/generate_peers.py --guidellm ENV_DIR/bin/guidellm [--rounds 3] [--skip-serve]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

#: the GuideLLM release this benchmark's options and report parsing follow (`--setup` installs it).
GUIDELLM_VERSION = "0.8.1"
PROMPT_TOKENS = 64
OUTPUT_TOKENS = 16
CEILING_CONCURRENCY = 16
#: the environment GuideLLM runs in: nothing from the hub (the tokenizer is a local directory).
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


class PeerMissing(RuntimeError):
    """GuideLLM is not where --guidellm says, or does not run there (exit 2, one line)."""


class ReportError(ValueError):
    """A GuideLLM report without a figure this benchmark reads; the message names its path."""


@dataclass(frozen=True)
class PeerFigures:
    """One GuideLLM benchmark's figures, in milliseconds and requests per second.

    Attributes:
        ttft_ms: median time to first token.
        tpot_ms: median (last token - first token) / (output tokens - 1): GuideLLM's ITL.
        tpot_with_first_ms: median of GuideLLM's own TPOT, (last token - start) / output tokens.
        e2e_ms: median request latency (GuideLLM reports it in seconds).
        requests_per_s: GuideLLM's mean rate of successful requests.
        successful, errored: the requests counted (warm-up excluded).
        output_tokens: median output tokens per request.
    """

    ttft_ms: float
    tpot_ms: float
    tpot_with_first_ms: float
    e2e_ms: float
    requests_per_s: float
    successful: int
    errored: int
    output_tokens: float


#: where in the report the metrics are.
METRICS = ("benchmarks[0]", "metrics")


def _at(document: Any, *path: str, root: tuple[str, ...] = ()) -> Any:
    """document[path[0]][path[1]]..., or ReportError naming the first key missing (after `root`,
    the path of `document` in the report)."""
    for depth, key in enumerate(path):
        if not isinstance(document, dict) or key not in document:
            raise ReportError(f"GuideLLM report has no {'.'.join((*root, *path[: depth + 1]))}")
        document = document[key]
    return document


def _number(metrics: Any, *path: str) -> float:
    """A number from the benchmark's metrics."""
    value = _at(metrics, *path, root=METRICS)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ReportError(f"GuideLLM report's {'.'.join((*METRICS, *path))} is not a number: {value!r}")
    return float(value)


def parse_guidellm_report(report: dict[str, Any]) -> PeerFigures:
    """The figures of the report's one benchmark (GuideLLM's JSON output, `--output kind=json`).

    GuideLLM keeps each metric as a distribution per status (`successful`, `errored`,
    `incomplete`, `total`); the successful requests' medians are read. Its latencies are in
    milliseconds where the name says `_ms`, and its `request_latency` in seconds.

    Raises:
        ReportError: not one benchmark, a metric missing, or no successful request.
    """
    benchmarks = _at(report, "benchmarks")
    if not isinstance(benchmarks, list) or len(benchmarks) != 1:
        count = len(benchmarks) if isinstance(benchmarks, list) else "no list of"
        raise ReportError(f"GuideLLM report's benchmarks: expected one benchmark, found {count}")
    metrics = _at(benchmarks[0], "metrics", root=METRICS[:1])
    successful = int(_number(metrics, "request_totals", "successful"))
    if successful < 1:
        raise ReportError(
            "GuideLLM report's benchmarks[0].metrics.request_totals.successful is 0: no request succeeded"
        )
    return PeerFigures(
        ttft_ms=_number(metrics, "time_to_first_token_ms", "successful", "median"),
        tpot_ms=_number(metrics, "inter_token_latency_ms", "successful", "median"),
        tpot_with_first_ms=_number(metrics, "time_per_output_token_ms", "successful", "median"),
        e2e_ms=_number(metrics, "request_latency", "successful", "median") * 1e3,
        requests_per_s=_number(metrics, "requests_per_second", "successful", "mean"),
        successful=successful,
        errored=int(_number(metrics, "request_totals", "errored")),
        output_tokens=_number(metrics, "output_token_count", "successful", "median"),
    )


# -- GuideLLM's environment and runs -------------------------------------------------------------


def setup(directory: Path) -> Path:
    """Create a virtual environment at `directory` with GuideLLM, and return its executable."""
    subprocess.run([sys.executable, "-m", "venv", str(directory)], check=True)
    python = directory / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", f"guidellm=={GUIDELLM_VERSION}"], check=True)
    return directory / "bin" / "guidellm"


def guidellm_command(path: Path) -> list[str]:
    """How to run GuideLLM from its environment's `guidellm` executable or its python.

    Raises:
        PeerMissing: the path does not exist, or its GuideLLM does not run; one line saying how to
            create the environment.
    """
    hint = "create its environment with: python benchmarks/generate_peers.py --setup DIR"
    if not path.is_file():
        raise PeerMissing(f"--guidellm {path}: no such file; {hint}")
    command = [str(path), "-m", "guidellm"] if path.name.startswith("python") else [str(path)]
    probe = subprocess.run([*command, "--version"], capture_output=True, text=True, env=_env())
    if probe.returncode != 0 or "guidellm" not in probe.stdout.lower():
        last = ((probe.stderr or probe.stdout).strip().splitlines() or ["(no message)"])[-1]
        raise PeerMissing(f"--guidellm {path} does not run GuideLLM ({last}); {hint}")
    return command


def _env() -> dict[str, str]:
    return {**os.environ, **OFFLINE}


def run_guidellm(
    name: str,
    command: list[str],
    target: str,
    model: str,
    tokenizer: Path,
    requests: int,
    concurrency: int,
    scratch: Path,
    *,
    force_output: bool = True,
    warmup: int = 2,
) -> tuple[PeerFigures, Path]:
    """One GuideLLM benchmark at a fixed concurrency: `warmup` requests, then `requests` counted;
    its scenario and report are `scratch`/scenario-`name`.json and guidellm-`name`.json.

    `force_output` asks each request for exactly OUTPUT_TOKENS tokens as GuideLLM does for a
    synthetic output length (`max_completion_tokens` with vLLM's `ignore_eos`); without it the
    length is only capped (`max_tokens` of the backend), for a server that refuses `ignore_eos`
    (`transformers serve`) and generates to the cap anyway (its model names no end-of-sequence).

    Returns:
        The report's figures and the report's path.
    """
    data: dict[str, Any] = {"kind": "synthetic_text", "prompt_tokens": PROMPT_TOKENS}
    backend: dict[str, Any] = {"kind": "openai_http", "target": target, "model": model}
    if force_output:
        data["output_tokens"] = OUTPUT_TOKENS
    else:
        backend["max_tokens"] = OUTPUT_TOKENS
    report = scratch / f"guidellm-{name}.json"
    scenario = {
        "spec": {
            "backend": backend,
            "profile": {
                "kind": "concurrent",
                "streams": [concurrency],
                "warmup": {"value": warmup, "mode": "requests"},
            },
            "constraints": [{"kind": "max_requests", "count": requests + warmup}],
            "data": [data],
            "tokenizer": {"kind": "huggingface_auto", "model": str(tokenizer)},
            "outputs": [{"kind": "json", "path": str(report)}],
        }
    }
    path = scratch / f"scenario-{name}.json"
    path.write_text(json.dumps(scenario))
    done = subprocess.run(
        [*command, "run", "--scenario", str(path), "--disable-console-interactive"],
        capture_output=True,
        text=True,
        env=_env(),
    )
    if done.returncode != 0 or not report.is_file():
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise SystemExit(f"generate_peers: GuideLLM failed (exit {done.returncode}):\n{tail}")
    return parse_guidellm_report(json.loads(report.read_text())), report


# -- mlscope's runs -------------------------------------------------------------------------------


@dataclass(frozen=True)
class OwnFigures:
    ttft_ms: float
    tpot_ms: float
    requests_per_s: float
    successful: int
    failed: int


def run_mlscope(
    base_url: str,
    model: str,
    requests: int,
    concurrency: int,
    prompt: Any = None,
) -> OwnFigures:
    """mlscope's generate scenario over its endpoint client: 2 warm-up requests, then exactly
    `requests`, as many as the peer sends (a closed loop's stopping rule, which would send more
    until the median TPOT is known to 2%, given no time to)."""
    from mlscope.contract.generation import GenerationSettings
    from mlscope.contract.load import LoadSettings
    from mlscope.runtime.generate.driver import run_generate
    from mlscope.runtime.generate.endpoint import EndpointEngine
    from mlscope.runtime.measure.settings import MeasureSettings

    settings = GenerationSettings(
        requests=requests,
        prompt_tokens=PROMPT_TOKENS,
        output_tokens=OUTPUT_TOKENS,
        concurrency=concurrency,
        endpoint=base_url,
    )
    engine = EndpointEngine(base_url, model, concurrency=concurrency, prompt_text=prompt)
    try:
        measurement = run_generate(
            engine, settings, LoadSettings(), MeasureSettings(min_seconds=0, max_seconds=0), remote=True
        )
    finally:
        engine.close()
    generation = measurement["generation"]
    failed = int(generation["failed_requests"]["count"])
    return OwnFigures(
        ttft_ms=float(generation["ttft_ms"]["median"]),
        tpot_ms=float(generation["tpot_ms"]["median"]),
        requests_per_s=float(generation["requests_per_s"]),
        successful=int(generation["requests"]) - failed,
        failed=failed,
    )


# -- servers --------------------------------------------------------------------------------------


@contextmanager
def mock_process(token_ms: float = 0.0, first_token_ms: float | None = None) -> Iterator[str]:
    """The test endpoint in a child process (the clients' CPU is not its own); yields its base URL."""
    command = [sys.executable, "-m", "tests.fixtures.mock_endpoint", "--token-delay-s", str(token_ms / 1e3)]
    if first_token_ms is not None:
        command += ["--first-token-delay-s", str(first_token_ms / 1e3)]
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        yield process.stdout.readline().strip()
    finally:
        process.terminate()
        process.wait(10)


def tiny_llama(cache: Path) -> Path:
    """The catalogue's tiny Llama as the model directory mlscope materialises (random weights, its
    own tokenizer, no end-of-sequence token)."""
    from mlscope.registry.models import ModelRegistry
    from mlscope.runtime.predictors.pytorch.model_directory import materialise

    return materialise(ModelRegistry.load().get("hf:llama", "pytorch"), cache)


# -- the table ------------------------------------------------------------------------------------


def endpoint_timings(base_url: str) -> list[dict[str, float]]:
    """The test endpoint's own timing of each "slow" request so far: from the request read to the
    first chunk written (TTFT), and the mean gap from the first chunk written to the last (TPOT)."""
    with urllib.request.urlopen(base_url + "/timings", timeout=10) as answer:
        timings: list[dict[str, float]] = json.load(answer)["timings"]
    return timings


def truth_of(timings: list[dict[str, float]]) -> tuple[float, float]:
    """The medians of TTFT and TPOT of the endpoint's own timings."""
    return statistics.median(t["ttft_ms"] for t in timings), statistics.median(t["tpot_ms"] for t in timings)


def alternate(
    rounds: int, own: Callable[[int], Any], peer: Callable[[int], Any]
) -> tuple[list[Any], list[Any]]:
    """`rounds` runs of each client, in the order mlscope, GuideLLM, GuideLLM, mlscope, ...: a
    machine that slows down for a while (it is shared) slows both alike."""
    mine: list[Any] = []
    theirs: list[Any] = []
    for number in range(rounds):
        if number % 2 == 0:
            mine.append(own(number))
            theirs.append(peer(number))
        else:
            theirs.append(peer(number))
            mine.append(own(number))
    return mine, theirs


def _spread(values: list[float]) -> str:
    middle = statistics.median(values)
    return f"{middle:8.3f} ({min(values):.3f}-{max(values):.3f})" if len(values) > 1 else f"{middle:8.3f}"


def latency_rows(
    label: str,
    own: list[OwnFigures],
    peer: list[PeerFigures],
    truth: tuple[list[tuple[float, float]], list[tuple[float, float]]] | None,
) -> None:
    """Each client's medians (the median over the rounds, their range in brackets); with `truth`
    (per client and round: the endpoint's own medians over that client's requests), each one's
    distance from it (the median over the rounds) and the targets."""
    print(f"  {label}")
    for name, index in (("TTFT", 0), ("TPOT", 1)):
        mine = [(o.ttft_ms, o.tpot_ms)[index] for o in own]
        theirs = [(p.ttft_ms, p.tpot_ms)[index] for p in peer]
        line = f"    {name} median ms   mlscope {_spread(mine)}   GuideLLM {_spread(theirs)}"
        if truth is not None:
            known = [t[index] for t in truth[0]]
            peer_known = [t[index] for t in truth[1]]
            off = statistics.median((m - k) / k for m, k in zip(mine, known, strict=True))
            peer_off = statistics.median((m - k) / k for m, k in zip(theirs, peer_known, strict=True))
            within = abs(off) <= 0.02
            closer = abs(off) <= abs(peer_off)
            line += (
                f"   truth {statistics.median(known):7.3f} / {statistics.median(peer_known):7.3f}   "
                f"off mlscope {off * 100:+6.2f}%  GuideLLM {peer_off * 100:+6.2f}%   "
                f"({'within 2%' if within else 'NOT within 2%'}, "
                f"{'no further than the peer' if closer else 'further than the peer'})"
            )
        print(line)
    print(
        f"    requests   mlscope {sum(o.successful for o in own)} ok, {sum(o.failed for o in own)} failed   "
        f"GuideLLM {sum(p.successful for p in peer)} ok, {sum(p.errored for p in peer)} errored, in "
        f"{len(own)} rounds each (GuideLLM's own TPOT, first token included: "
        f"{statistics.median(p.tpot_with_first_ms for p in peer):.3f} ms)",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--setup", type=Path, metavar="DIR", help="create GuideLLM's environment at DIR")
    parser.add_argument("--guidellm", type=Path, help="GuideLLM's environment's guidellm (or python)")
    parser.add_argument("--requests", type=int, default=48, help="requests per client and round in (a), (b)")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each client, alternating")
    parser.add_argument("--concurrency", type=int, default=4, help="requests in flight in (a)")
    parser.add_argument("--serve-concurrency", type=int, default=1, help="requests in flight in (b)")
    parser.add_argument("--first-token-ms", type=float, default=50.0, help="(a): the scripted TTFT")
    parser.add_argument("--token-ms", type=float, default=20.0, help="(a): the scripted gap between tokens")
    parser.add_argument(
        "--ceiling-requests", type=int, default=3000, help="requests per client and round (c)"
    )
    parser.add_argument("--skip-serve", action="store_true", help="no transformers serve (b)")
    parser.add_argument("--skip-ceiling", action="store_true", help="no ceiling (c)")
    parser.add_argument("--cache", type=Path, help="where the tiny Llama's directory goes")
    parser.add_argument("--reports", type=Path, help="keep GuideLLM's JSON reports in this folder")
    args = parser.parse_args()
    if args.setup is not None:
        print(f"GuideLLM {GUIDELLM_VERSION}: {setup(args.setup)}")
        return
    if args.guidellm is None:
        parser.exit(
            2,
            "generate_peers: --guidellm PATH is required (GuideLLM's guidellm or python); "
            "create its environment with: python benchmarks/generate_peers.py --setup DIR\n",
        )
    try:
        command = guidellm_command(args.guidellm)
    except PeerMissing as exc:
        parser.exit(2, f"generate_peers: {exc}\n")
    version = subprocess.run(
        [*command, "--version"], capture_output=True, text=True, env=_env()
    ).stdout.strip()
    cache = args.cache or Path(tempfile.mkdtemp(prefix="mlscope-peers-"))
    llama = tiny_llama(cache)
    print(
        f"mlscope against {version} on the same servers: prompt {PROMPT_TOKENS} tokens, output "
        f"{OUTPUT_TOKENS}, hub offline (load average {load_average()})"
    )
    with tempfile.TemporaryDirectory() as scratch:
        work = args.reports or Path(scratch)
        work.mkdir(parents=True, exist_ok=True)
        with mock_process(args.token_ms, args.first_token_ms) as base_url:
            target = base_url.removesuffix("/v1")

            def own_timed(number: int) -> tuple[OwnFigures, tuple[float, float]]:
                before = len(endpoint_timings(base_url))
                figures = run_mlscope(base_url, "slow", args.requests, args.concurrency)
                return figures, truth_of(endpoint_timings(base_url)[before:])

            def peer_timed(number: int) -> tuple[PeerFigures, tuple[float, float]]:
                before = len(endpoint_timings(base_url))
                figures, _ = run_guidellm(
                    f"timed-{number}", command, target, "slow", llama, args.requests, args.concurrency, work
                )
                return figures, truth_of(endpoint_timings(base_url)[before:])

            mine, theirs = alternate(args.rounds, own_timed, peer_timed)
        latency_rows(
            f"(a) test endpoint scripted to a first token {args.first_token_ms:g} ms after the request, then "
            f"{args.token_ms:g} ms per token; concurrency {args.concurrency}; truth: the endpoint's own "
            "timing of each client's requests (mlscope's / GuideLLM's)",
            [figures for figures, _ in mine],
            [figures for figures, _ in theirs],
            ([truth for _, truth in mine], [truth for _, truth in theirs]),
        )
        if not args.skip_serve:
            from mlscope.runtime.generate.serve import LocalServer
            from mlscope.runtime.predictors.pytorch.model_directory import PromptWords, tokenizer_for

            words = PromptWords.of(tokenizer_for(llama))  # prompts of exactly PROMPT_TOKENS tokens
            with LocalServer(llama) as served:
                url, model, concurrency = served.base_url, served.model, args.serve_concurrency
                mine, theirs = alternate(
                    args.rounds,
                    lambda number: run_mlscope(url, model, args.requests, concurrency, words.prompt_text),
                    lambda number: run_guidellm(
                        f"serve-{number}",
                        command,
                        url.removesuffix("/v1"),
                        model,
                        llama,
                        args.requests,
                        concurrency,
                        work,
                        force_output=False,
                    )[0],
                )
            latency_rows(
                f"(b) transformers serve, tiny Llama (hf:llama), concurrency {concurrency}",
                mine,
                theirs,
                None,
            )
        if args.skip_ceiling:
            return
        with mock_process() as base_url:
            mine, theirs = alternate(
                args.rounds,
                lambda number: run_mlscope(base_url, "ok", args.ceiling_requests, CEILING_CONCURRENCY),
                lambda number: run_guidellm(
                    f"ceiling-{number}",
                    command,
                    base_url.removesuffix("/v1"),
                    "ok",
                    llama,
                    args.ceiling_requests,
                    CEILING_CONCURRENCY,
                    work,
                )[0],
            )
        ours = [o.requests_per_s for o in mine]
        peers = [p.requests_per_s for p in theirs]
        print(f"  (c) ceiling at concurrency {CEILING_CONCURRENCY}, the test endpoint answering at once")
        print(
            f"    requests/s   mlscope {_spread(ours)}   GuideLLM {_spread(peers)}   ratio "
            f"{statistics.median(ours) / statistics.median(peers):.2f}   "
            f"(mlscope {sum(o.successful for o in mine)} ok, {sum(o.failed for o in mine)} failed; "
            f"GuideLLM {sum(p.successful for p in theirs)} ok, {sum(p.errored for p in theirs)} errored; "
            f"load average {load_average()})"
        )


def load_average() -> str:
    """The 1-, 5- and 15-minute load averages: the machine is shared, and a rate is CPU-bound."""
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


if __name__ == "__main__":
    main()
