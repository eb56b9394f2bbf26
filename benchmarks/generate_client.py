"""How much does mlscope's endpoint engine add to the latencies it measures, and how many requests a
second can it issue?

Prints, in one run on this machine:
  (a) client overhead: the median time to first token mlscope's `EndpointEngine` records, divided by
      that of a minimal httpx streaming client (post, iter_lines, time the first chunk with content)
      issuing the same requests to the same server in the same process, over a connection pool
      configured alike (target ≤ 1.02). The two alternate request by request in a seeded random
      order, so drift and whichever connection ran last favour neither.
      Against `transformers serve` on a tiny random model (2 layers, width 64) and against the mock
      endpoint streaming with a fixed delay per token, whose first token is due that delay after the
      request: the engine's TTFT less the delay is its distance from the truth (target <= 2 ms; the
      server's own handling of the request is in it too);
  (b) the requests/s the engine sustains against the mock endpoint answering instantly (16 output
      tokens, one chunk each), at concurrency 1, 4 and 16 (one engine shared by that many threads).
      The mock runs in a process of its own; this bounds the request rate mlscope can measure. The
      minimal httpx client's rate (one httpx client shared by as many threads, its pool as large) is
      printed beside it, from slices alternating with the engine's, with the ratio of the two and
      the machine's load average (the rate is the client's CPU per request on a busy machine).

Usage: python benchmarks/generate_client.py [--requests 30] [--seconds 3] [--skip-serve]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from mlscope.runtime.generate.endpoint import (  # noqa: E402
    EndpointEngine,
    PromptText,
    synthetic_prompt,
    tokenizer_prompt,
)
from mlscope.runtime.generate.records import GenerationRequest  # noqa: E402
from mlscope.runtime.generate.serve import LocalServer  # noqa: E402

PROMPT_TOKENS = 32
OUTPUT_TOKENS = 16
#: the mock's scripted delay before each token in (a): the first token's true time.
TOKEN_DELAY_S = 0.005


def bare_body(model: str, text: str) -> dict[str, Any]:
    """What the minimal client sends: the engine's request without its options."""
    return {
        "model": model,
        "messages": [{"role": "user", "content": text}],
        "stream": True,
        "max_tokens": OUTPUT_TOKENS,
        "stream_options": {"include_usage": True},
        "temperature": 0,
    }


def bare_client(connections: int) -> httpx.Client:
    """An httpx client configured as the engine's was before it had a client of its own."""
    return httpx.Client(
        timeout=httpx.Timeout(120, pool=None),
        limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
    )


def minimal_ttft_ns(client: httpx.Client, url: str, body: dict[str, Any]) -> int:
    """The bare client: time from the POST to the first data line carrying content."""
    start = time.perf_counter_ns()
    first = 0
    with client.stream("POST", url, json=body) as response:
        for line in response.iter_lines():
            if not first and line.startswith("data: ") and line != "data: [DONE]":
                choice = (json.loads(line[6:]).get("choices") or [{}])[0]
                if (choice.get("delta") or {}).get("content") or choice.get("text"):
                    first = time.perf_counter_ns()
    return first - start


def client_overhead(
    label: str,
    base_url: str,
    model: str,
    requests: int,
    prompt: PromptText = synthetic_prompt,
    scripted_ms: float | None = None,
) -> None:
    engine = EndpointEngine(base_url, model, api="chat", timeout_s=120, concurrency=1, prompt_text=prompt)
    client = bare_client(1)
    url = base_url + "/chat/completions"
    ours: list[int] = []
    bare: list[int] = []
    failures = 0

    def run_ours(index: int) -> None:
        nonlocal failures
        record = engine.generate(GenerationRequest(index, PROMPT_TOKENS, OUTPUT_TOKENS))
        if record.ok:
            ours.append(record.token_ns[0] - record.start_ns)
        else:
            failures += 1

    def run_bare(index: int) -> None:
        bare.append(minimal_ttft_ns(client, url, bare_body(model, prompt(PROMPT_TOKENS, 0, index))))

    for index in range(3):  # warm both connections and the server
        run_ours(index)
        run_bare(index)
    ours.clear()
    bare.clear()
    order = random.Random(0)
    for index in range(requests):
        pair = [run_ours, run_bare]
        order.shuffle(pair)
        for run in pair:
            run(index)
    engine.close()
    client.close()
    mine, theirs = statistics.median(ours) / 1e6, statistics.median(bare) / 1e6
    truth = "" if scripted_ms is None else f"   mlscope - scripted {mine - scripted_ms:+.3f} ms"
    print(
        f"  {label:<34} TTFT median mlscope {mine:8.3f} ms   minimal httpx {theirs:8.3f} ms   "
        f"ratio {mine / theirs:.3f}{truth}   (n={len(ours)}+{len(bare)}, failed {failures})",
        flush=True,
    )


@contextmanager
def mock_process(token_delay_s: float = 0.0) -> Iterator[str]:
    """The mock endpoint in a child process; yields its base URL."""
    command = [sys.executable, "-m", "tests.fixtures.mock_endpoint", "--token-delay-s", str(token_delay_s)]
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        yield process.stdout.readline().strip()
    finally:
        process.terminate()
        process.wait(10)


def sustained_rate(
    base_url: str, concurrency: int, seconds: float, minimal: bool = False
) -> tuple[int, int, float, float]:
    """Requests one engine (or, `minimal`, the bare httpx client) completes in about `seconds` with
    `concurrency` threads issuing back to back: the requests, the failures, the seconds they took and
    this process's CPU seconds (what the client costs)."""
    engine = None if minimal else EndpointEngine(base_url, "ok", concurrency=concurrency)
    client = bare_client(concurrency) if minimal else None
    url = base_url + "/chat/completions"
    done = [0] * concurrency
    failed = [0] * concurrency

    def one(index: int) -> bool:
        if engine is not None:
            return engine.generate(GenerationRequest(index, PROMPT_TOKENS, OUTPUT_TOKENS)).ok
        assert client is not None
        body = bare_body("ok", synthetic_prompt(PROMPT_TOKENS, 0, index))
        return minimal_ttft_ns(client, url, body) > 0

    threads = [threading.Thread(target=one, args=(slot,)) for slot in range(concurrency)]
    for thread in threads:  # open the connections before the clock starts
        thread.start()
    for thread in threads:
        thread.join()
    deadline = time.perf_counter() + seconds

    def issue(slot: int) -> None:
        index = slot
        while time.perf_counter() < deadline:
            ok = one(index)
            done[slot] += 1
            failed[slot] += 0 if ok else 1
            index += concurrency

    start = time.perf_counter()
    cpu = time.process_time()
    threads = [threading.Thread(target=issue, args=(slot,)) for slot in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    cpu = time.process_time() - cpu
    (engine or client).close()  # type: ignore[union-attr]
    return sum(done), sum(failed), elapsed, cpu


def load_average() -> str:
    """The 1-, 5- and 15-minute load averages: the machine is shared, and a rate is CPU-bound."""
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=30, help="requests per client and server (a)")
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per concurrency level (b)")
    parser.add_argument("--skip-serve", action="store_true", help="no transformers serve in (a)")
    args = parser.parse_args()

    print(
        f"(a) client overhead, {args.requests} requests each, prompt ~{PROMPT_TOKENS}, {OUTPUT_TOKENS} tokens"
    )
    with mock_process(token_delay_s=TOKEN_DELAY_S) as base_url:
        client_overhead(
            f"mock endpoint, {TOKEN_DELAY_S * 1e3:g} ms per token",
            base_url,
            "slow",
            args.requests,
            scripted_ms=TOKEN_DELAY_S * 1e3,
        )
    if not args.skip_serve:
        from tests.fixtures.generative import tiny_generative_directory

        with tempfile.TemporaryDirectory() as scratch:
            directory = tiny_generative_directory(Path(scratch) / "tiny")
            with LocalServer(directory) as served:
                prompt = tokenizer_prompt(directory)  # exactly PROMPT_TOKENS of the model's tokenizer
                client_overhead(
                    "transformers serve, tiny gpt2", served.base_url, served.model, args.requests, prompt
                )

    print(
        f"(b) requests/s against the instant mock endpoint ({OUTPUT_TOKENS} tokens), {args.seconds:g} s each"
        f" (load average {load_average()})"
    )
    with mock_process() as base_url:
        for concurrency in (1, 4, 16):
            # Three slices each, alternating, so the machine's drift hits both clients alike.
            totals = {False: [0, 0, 0.0, 0.0], True: [0, 0, 0.0, 0.0]}
            for round_ in range(3):
                for minimal in (False, True) if round_ % 2 == 0 else (True, False):
                    figures = sustained_rate(base_url, concurrency, args.seconds / 3, minimal)
                    totals[minimal] = [a + b for a, b in zip(totals[minimal], figures, strict=True)]
            for minimal, (count, failed, elapsed, cpu) in totals.items():
                print(
                    f"  concurrency {concurrency:>2} {'minimal httpx' if minimal else 'mlscope':<13} "
                    f"{count / elapsed:8.1f} requests/s ({int(count)} requests, {int(failed)} failed; "
                    f"client CPU {cpu / max(1, count) * 1e3:.2f} ms per request)"
                )
            (ours, _, our_s, _), (bare, _, bare_s, _) = totals[False], totals[True]
            print(
                f"  concurrency {concurrency:>2} ratio mlscope / minimal httpx "
                f"{(ours / our_s) / (bare / bare_s):.2f} (load average {load_average()})"
            )


if __name__ == "__main__":
    main()
