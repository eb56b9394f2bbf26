"""`mlscope run ... --endpoint URL --server-metrics URL` end to end: the project's scripted endpoint
answers the requests while a real local server answers /metrics as vLLM's does, its values changing
per scrape; the stored result holds the series in mlscope's vocabulary, the CLI says one line of it,
and the dashboard's evaluation page draws it. A metrics URL nothing answers: the run goes on and
says the metrics are missing."""

from __future__ import annotations

from mlscope.api.dashboard.figures import evaluation_charts
from mlscope.runtime.generate.serve import free_port
from tests.fixtures.metrics_server import metrics_server
from tests.fixtures.mock_endpoint import mock_endpoint
from tests.integration.test_run_cli import json_lines, mlscope, printed_results

QUICK = ("--min-seconds", "0.1", "--max-seconds", "3")


def test_a_generate_run_stores_the_servers_metrics_sampled_during_its_requests(
    mlscope_env: dict[str, str],
) -> None:
    with mock_endpoint() as endpoint, metrics_server("vllm") as metrics:
        done = mlscope(
            mlscope_env,
            "run", "slow", "--scenario", "generate", "--endpoint", endpoint.base_url, "--requests", "12",
            "--output-tokens", "16", "--concurrency", "2", "--server-metrics", metrics.url,
            "--generation", "server_metrics_interval_s=0.05", "--json", *QUICK,
        )  # fmt: skip
        served = list(metrics.served)
    assert done.returncode in (0, 3), done.stderr
    [result] = json_lines(done.stdout)
    assert result["status"] == "succeeded", result["error"]
    [point] = result["measurements"]
    sampled = point["generation"]["server_metrics"]
    assert sampled["source"] == "vllm" and sampled["url"] == metrics.url
    assert sampled["interval_s"] == 0.05 and sampled["failed_samples"] == 0
    # Every scrape is a sample, with the values the server gave then, in mlscope's names: two
    # engines' requests summed, the fuller engine's KV cache
    assert sampled["samples"] == len(served) >= 5
    for name in ("kv_cache_usage", "requests_running", "requests_waiting"):
        assert sampled["series"][name] == [values[name] for values in served], name
    # Counters became rates; names mlscope does not map (preemptions, histograms, gc) stayed out
    assert set(sampled["series"]) == {
        "kv_cache_usage", "requests_running", "requests_waiting", "prompt_tokens_per_s",
        "generation_tokens_per_s",
    }  # fmt: skip
    assert all(rate > 0 for rate in sampled["series"]["prompt_tokens_per_s"][1:])
    # Sampled while the measured requests ran: within the point's duration, beside the client's
    # own requests in flight (two at most)
    assert 0 <= sampled["t_s"][0] < sampled["t_s"][-1] <= point["duration_s"] + 0.5
    assert max(sampled["client_in_flight"]) == 2
    # The dashboard's evaluation page draws them after the requests' chart
    charts = evaluation_charts(result)
    kinds = [chart["kind"] for chart in charts]
    assert kinds.index("server-metrics") == kinds.index("generation") + 1
    drawn = charts[kinds.index("server-metrics")]
    assert drawn["series"] == 4 and drawn["points"] == 4 * len(served)
    # The CLI's account of the stored result says it in one line
    shown = mlscope(mlscope_env, "results", "show", result["id"])
    assert shown.returncode == 0, shown.stderr
    [line] = [line for line in shown.stdout.splitlines() if "vLLM metrics" in line]
    peak = max(values["kv_cache_usage"] for values in served)
    assert f"{len(served)} samples every 0.05 s" in line and f"KV cache {peak:.0%}" in line, line


def test_a_metrics_url_nothing_answers_leaves_the_run_going_and_says_so(mlscope_env: dict[str, str]) -> None:
    url = f"http://127.0.0.1:{free_port()}/metrics"
    with mock_endpoint() as endpoint:
        done = mlscope(
            mlscope_env,
            "run", "ok", "--scenario", "generate", "--endpoint", endpoint.base_url, "--requests", "12",
            "--output-tokens", "8", "--server-metrics", url, *QUICK,
        )  # fmt: skip
    assert done.returncode in (0, 3), done.stderr
    [line] = [line for line in done.stdout.splitlines() if "metrics missing" in line]
    assert f"no sample from {url}: connection refused" in line
    [row] = json_lines(mlscope(mlscope_env, "results", "list", "--json").stdout)
    [shown] = printed_results(mlscope(mlscope_env, "results", "show", row["id"], "--json").stdout)
    [point] = shown["measurements"]
    assert point["generation"]["failed_requests"]["count"] == 0
    sampled = point["generation"]["server_metrics"]
    assert sampled["samples"] == 0 and sampled["source"] is None
    assert sampled["missing"] == f"no sample from {url}: connection refused"
