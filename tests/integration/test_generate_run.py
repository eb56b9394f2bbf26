"""`mlscope run ... --scenario generate` end to end, as a user types it: a tiny GPT-2 measured in
process and behind a real `transformers serve` process that mlscope starts (--compare-served), and a
run against an endpoint that drops every stream mid-way (the run completes, the failures counted)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlscope.contract.generation import GenerationSettings
from tests.fixtures.mock_endpoint import mock_endpoint
from tests.integration.test_run_cli import json_lines, mlscope

TINY = ("--config", "n_layer=2", "--config", "n_embd=64", "--config", "n_head=2")
QUICK = ("--min-seconds", "0.1", "--max-seconds", "3")


@pytest.mark.slow
def test_compare_served_measures_the_same_requests_in_process_and_behind_a_real_server(
    mlscope_env: dict[str, str], tmp_path: Path
) -> None:
    done = mlscope(
        mlscope_env,
        "run", "hf:gpt2", *TINY, "--scenario", "generate", "--prompt-tokens", "16",
        "--output-tokens", "uniform:4-8", "--requests", "10", "--compare-served", "--json", *QUICK,
    )  # fmt: skip
    assert done.returncode in (0, 3), done.stderr
    [result] = json_lines(done.stdout)
    assert result["status"] == "succeeded", result["error"]
    [point] = result["measurements"]
    generation = point["generation"]
    served = generation["served"]
    # Both halves generated exactly the lengths asked for
    for half in (generation, served):
        count = half["requests"]
        _, asked = GenerationSettings(output_tokens="uniform:4-8").lengths(count, 0)
        assert half["per_request"]["output_tokens"] == asked
        assert half["failed_requests"]["count"] == 0
    # Serving adds HTTP, JSON and a server's scheduling to the very same model: TTFT grows
    assert served["ttft_ms"]["median"] > generation["ttft_ms"]["median"]
    overhead = generation["serving_overhead"]["ttft_ms"]
    assert overhead["added_ms"] > 0 and overhead["ratio"] > 1
    assert served["via"] == "endpoint" and served["server"].startswith("transformers serve")
    # The requests' TTFT and TPOT, drawn: a CDF of each (an SVG keeps its text)
    drawn = tmp_path / "generation.svg"
    plotted = mlscope(mlscope_env, "plot", result["id"], "--kind", "generation", "-o", str(drawn))
    assert plotted.returncode == 0, plotted.stderr
    svg = drawn.read_text()
    assert "TTFT · generate · batch 1" in svg and "TPOT · generate · batch 1" in svg


def test_an_endpoint_that_drops_every_stream_gives_a_finished_run_with_its_failures_counted(
    mlscope_env: dict[str, str],
) -> None:
    with mock_endpoint() as server:
        done = mlscope(
            mlscope_env,
            "run", "drop", "--scenario", "generate", "--endpoint", server.base_url, "--requests", "12",
            "--output-tokens", "8", "--json", *QUICK,
        )  # fmt: skip
    # Exit 3: the run succeeded and its result is stored, but it is not valid
    assert done.returncode == 3, done.stderr
    [result] = json_lines(done.stdout)
    assert result["status"] == "succeeded" and result["framework"]["name"] == "endpoint"
    [point] = result["measurements"]
    failed = point["generation"]["failed_requests"]
    # Every request failed: after the first 8, the rest were not sent
    assert failed["count"] == point["generation"]["requests"] == 8
    assert "without [DONE]" in failed["first"] or "ended" in failed["first"], failed
    assert point["validity"]["valid"] is False and point["latency_ms"]["median"] is None
    listed = json_lines(mlscope(mlscope_env, "results", "list", "--json").stdout)
    assert [row["id"] for row in listed] == [result["id"]]
    # A chart of its requests has nothing to draw, and says why (exit 2), not an empty image
    plotted = mlscope(mlscope_env, "plot", result["id"], "--kind", "generation", "--json")
    assert plotted.returncode == 2 and "every request failed" in plotted.stderr


def test_an_embeddings_endpoint_is_timed_end_to_end_with_its_api_recorded_and_no_tokens_shown(
    mlscope_env: dict[str, str],
) -> None:
    from mlscope.analysis.chart_generation import request_cdf
    from mlscope.cli.render_generation import generation_lines

    with mock_endpoint() as server:
        # Given a server that answers each embeddings request 10 ms after reading it
        server.answer_delay_s = 0.01
        done = mlscope(
            mlscope_env,
            "run", "bge-small", "--scenario", "generate", "--endpoint", server.base_url, "--api",
            "embeddings", "--inputs-per-request", "4", "--prompt-tokens", "16", "--requests", "12",
            "--slo", "e2e_ms=1000", "--json", *QUICK,
        )  # fmt: skip
        served = server.requests
    # Exit 3 where the machine's load left the point unstable within QUICK's 3 s: stored all the same
    assert done.returncode in (0, 3), done.stderr
    [result] = json_lines(done.stdout)
    [point] = result["measurements"]
    generation = point["generation"]
    # Then every request sent (and the first one, and the probe-free warm-up) reached the server
    assert served == generation["requests"] + 1 + 2
    assert generation["failed_requests"]["count"] == 0
    assert point["latency_ms"]["min"] >= 10.0 and generation["goodput_fraction"] == 1.0
    assert result["cold_start"]["first_inference_ms"] >= 10.0
    # The api is the request's (so a diff tells it from a chat run) and the answer's
    assert result["request"]["generation"]["api"] == "embeddings" and generation["api"] == "embeddings"
    assert result["request"]["generation"]["inputs_per_request"] == 4
    # TTFT and TPOT are said not to apply, never shown as 0
    lines = generation_lines(result)
    assert any(
        line.split() == ["TTFT", "not", "applicable", "(embeddings:", "no", "tokens)"] for line in lines
    )
    assert "ttft_ms" not in generation and "ttft_ms" in generation["not_applicable"]
    # Its chart draws the end-to-end latency, the one it has
    chart = request_cdf(result)
    assert [series.name.split(" · ")[0] for series in chart.series] == ["end-to-end"]
    assert "SLO: end-to-end ≤ 1000 ms" in chart.notes


def test_an_endpoint_without_the_api_is_refused_in_one_line_before_anything_is_stored_or_sent(
    mlscope_env: dict[str, str],
) -> None:
    # Given a server with routes for chat and completions only
    with mock_endpoint() as server:
        server.apis = {"chat", "completions"}
        done = mlscope(
            mlscope_env,
            "run", "ok", "--scenario", "generate", "--endpoint", server.base_url, "--api", "rerank",
            "--json", *QUICK,
        )  # fmt: skip
        sent = server.requests
    # Then exit 2 with one line naming generation.api and the server's answer; nothing stored, and
    # the one request sent to settle it (its GET answered 404) is all that was sent
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().startswith(
        "mlscope: error: generation.api: the endpoint does not serve api 'rerank' (HTTP 404"
    ), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and json_lines(done.stdout) == []
    assert sent == 1
    listed = mlscope(mlscope_env, "results", "list", "--json")
    assert listed.returncode == 0 and json_lines(listed.stdout) == []


def test_a_route_that_answers_the_first_request_404_stops_the_run_at_once_naming_the_setting(
    mlscope_env: dict[str, str],
) -> None:
    # Given a server with a rerank route (a GET of it answers 405) that answers its requests 404
    with mock_endpoint() as server:
        done = mlscope(
            mlscope_env,
            "run", "unserved", "--scenario", "generate", "--endpoint", server.base_url, "--api", "rerank",
            "--json", *QUICK,
        )  # fmt: skip
        sent = server.requests
    [result] = json_lines(done.stdout)
    # Only the first request was sent: the run failed with one line naming generation.api
    assert sent == 1 and result["status"] == "failed"
    assert result["error"]["message"].startswith("generation.api: the endpoint does not serve api 'rerank'")
    assert "HTTP 404" in result["error"]["message"] and "\n" not in result["error"]["message"]
