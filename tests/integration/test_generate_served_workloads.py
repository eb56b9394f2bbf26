"""The LLM workloads of docs/generate.md end to end against a real `transformers serve` process (one
for the module, on a tiny random GPT-2 directory whose generation never stops before max_tokens), as
a user types them: a trace replayed on its arrivals, conversations with a shared prefix, the
Interactive preset under caps, the server's metrics asked of a server that has none, and an API the
server does not serve refused before anything is stored. The scripted-timing endpoint
(tests/fixtures/mock_endpoint.py) holds the figures to known truths; this holds them to a real
server's protocol."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from mlscope.runtime.generate.serve import LocalServer
from mlscope.runtime.measure.certify import min_queries
from tests.integration.test_run_cli import json_lines, mlscope

QUICK = ("--min-seconds", "0.1", "--max-seconds", "3")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    from tests.fixtures.generative import tiny_generative_directory

    directory = tiny_generative_directory(tmp_path_factory.mktemp("generative") / "tiny")
    with LocalServer(directory) as server:
        yield server


def _run(env: dict[str, str], server: LocalServer, *args: str) -> tuple[int, list[dict], str]:
    done = mlscope(
        env,
        "run", "tiny-gpt2", "--scenario", "generate", "--endpoint", server.base_url,
        "--endpoint-model", server.model, *args, "--json",
    )  # fmt: skip
    return done.returncode, json_lines(done.stdout), done.stderr


def _succeeded(outcome: tuple[int, list[dict], str], server: LocalServer) -> dict:
    returncode, results, stderr = outcome
    assert returncode in (0, 3), stderr
    [result] = results
    assert result["status"] == "succeeded", (result["error"], server.log_tail())
    return result


def test_a_trace_is_replayed_against_the_server_on_its_arrivals(
    served: LocalServer, mlscope_env: dict[str, str], tmp_path: Path
) -> None:
    # Given a Mooncake trace of 10 requests over 0.9 s, replayed at twice its speed
    arrivals = [0, 100, 150, 300, 320, 500, 610, 700, 850, 900]
    lines = [
        {"timestamp": t, "input_length": 12 + 3 * i, "output_length": 3 + i % 4}
        for i, t in enumerate(arrivals)
    ]
    path = tmp_path / "mooncake.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    result = _succeeded(
        _run(mlscope_env, served, "--trace", str(path), "--trace-speed", "2", "--concurrency", "4", *QUICK),
        served,
    )
    [point] = result["measurements"]
    generation, load = point["generation"], point["load"]
    # Then every line was sent once and the server generated exactly its output length
    assert generation["requests"] == len(lines) and generation["failed_requests"]["count"] == 0
    assert generation["per_request"]["output_tokens"] == [line["output_length"] for line in lines]
    # And the replay's intended and achieved timing are recorded beside the trace that made it
    assert load["intended_span_s"] == pytest.approx(arrivals[-1] / 2 / 1000)
    assert load["achieved_span_s"] > 0 and load["issue_lateness_ms"]["p50"] >= 0
    assert {key: load["trace"][key] for key in ("name", "lines", "speed")} == {
        "name": "mooncake.jsonl",
        "lines": 10,
        "speed": 2.0,
    }


def test_conversations_with_a_shared_prefix_run_against_the_server_with_ttft_per_turn(
    served: LocalServer, mlscope_env: dict[str, str]
) -> None:
    result = _succeeded(
        _run(
            mlscope_env, served, "--turns", "3", "--think-time", "10", "--shared-prefix-tokens", "24",
            "--prefix-groups", "2", "--prompt-tokens", "8", "--output-tokens", "4", "--requests", "6",
            "--concurrency", "2", *QUICK,
        ),
        served,
    )  # fmt: skip
    [point] = result["measurements"]
    generation = point["generation"]
    assert generation["failed_requests"]["count"] == 0
    turns = generation["per_request"]["turn"]
    assert set(turns) == {1, 2, 3} and generation["requests"] >= 6
    # Each turn's prompt carries the prefix and the turns before it: the server counted more prompt
    # tokens for later turns than for first ones
    prompts = generation["per_request"]["prompt_tokens"]
    first = [n for n, turn in zip(prompts, turns, strict=True) if turn == 1]
    third = [n for n, turn in zip(prompts, turns, strict=True) if turn == 3]
    assert min(third) > max(first)
    assert set(generation["turns"]["ttft_median_ms"]) == {"1", "2", "3"}
    assert generation["workload"] == {
        "sessions": {"turns": 3, "think_time_ms": 10.0},
        "shared_prefix": {"tokens": 24, "groups": 2},
    }


def test_the_interactive_preset_runs_to_its_p99_certificate_against_the_server(
    served: LocalServer, mlscope_env: dict[str, str]
) -> None:
    # Given caps far above what a tiny model takes (the server's speed is not what is checked), the
    # preset runs the requests a p99 certificate needs, whatever --max-seconds says, and certifies
    result = _succeeded(
        _run(
            mlscope_env, served, "--scenario", "interactive", "--slo", "ttft_ms=10000,tpot_ms=1000",
            "--prompt-tokens", "8", "--output-tokens", "2", "--concurrency", "4", *QUICK,
        ),
        served,
    )  # fmt: skip
    [point] = result["measurements"]
    generation = point["generation"]
    assert generation["preset"] == {
        "name": "interactive",
        "caps": {"ttft_ms": 10000.0, "tpot_ms": 1000.0},
        "percentile": 99.0,
        "caps_from": "slo",
    }
    assert generation["requests"] >= min_queries(0.99, 0.99)
    assert generation["failed_requests"]["count"] == 0
    certified = generation["certified"]
    assert {metric: c["percentile"] for metric, c in certified.items()} == {"ttft_ms": 99.0, "tpot_ms": 99.0}
    assert all(c["ok"] for c in certified.values()), certified


def test_metrics_asked_of_a_server_without_them_leave_the_run_going_and_say_why(
    served: LocalServer, mlscope_env: dict[str, str]
) -> None:
    url = served.base_url.removesuffix("/v1") + "/metrics"
    result = _succeeded(
        _run(
            mlscope_env,
            served,
            "--server-metrics",
            url,
            "--requests",
            "6",
            "--prompt-tokens",
            "8",
            "--output-tokens",
            "4",
            *QUICK,
        ),
        served,
    )
    [point] = result["measurements"]
    sampled = point["generation"]["server_metrics"]
    assert point["generation"]["failed_requests"]["count"] == 0, point["generation"]["failed_requests"]
    assert sampled["samples"] == 0 and sampled["missing"].startswith(f"no sample from {url}: HTTP 404")


def test_an_api_the_server_does_not_serve_is_refused_before_anything_is_stored(
    served: LocalServer, mlscope_env: dict[str, str]
) -> None:
    returncode, results, stderr = _run(mlscope_env, served, "--api", "embeddings", *QUICK)
    assert returncode == 2 and results == [], stderr
    assert stderr.strip().startswith(
        "mlscope: error: generation.api: the endpoint does not serve api 'embeddings' (HTTP 404"
    ), stderr
    assert len(stderr.strip().splitlines()) == 1
    listed = mlscope(mlscope_env, "results", "list", "--json")
    assert json_lines(listed.stdout) == []
