"""Server metrics (docs/generate.md, "Server metrics"): each server's names mapped to one vocabulary,
the rest left out; a sampler against a real local server whose values change per scrape; a URL that
does not answer, or answers with nothing mapped."""

from __future__ import annotations

import itertools
import time

import pytest

from mlscope.runtime.generate.serve import free_port
from mlscope.runtime.generate.server_metrics import MetricsSampler, map_exposition
from tests.fixtures.metrics_server import metrics_server

EXPOSITIONS = {
    "vllm": (
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25\n'
        'vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.75\n'
        'vllm:num_requests_running{engine="0",model_name="m"} 3.0\n'
        'vllm:num_requests_running{engine="1",model_name="m"} 2.0\n'
        'vllm:num_requests_waiting{model_name="m"} 4.0\n'
        'vllm:generation_tokens_total{model_name="m"} 900.0\n'
        'vllm:time_to_first_token_seconds_bucket{le="0.1",model_name="m"} 7.0\n'
        'vllm:num_preemptions_total{model_name="m"} 1.0\n',
        {"kv_cache_usage": 0.75, "requests_running": 5.0, "requests_waiting": 4.0},
        {"generation_tokens_per_s": 900.0},
    ),
    "sglang": (
        'sglang:token_usage{model_name="m"} 0.5\n'
        'sglang:num_running_reqs{model_name="m"} 6\n'
        'sglang:num_queue_reqs{model_name="m"} 2\n'
        'sglang:prompt_tokens_total{model_name="m"} 1200\n'
        'sglang:cache_hit_rate{model_name="m"} 0.3\n',
        {"kv_cache_usage": 0.5, "requests_running": 6.0, "requests_waiting": 2.0},
        {"prompt_tokens_per_s": 1200.0},
    ),
    "tgi": (
        "tgi_queue_size 7\n"
        "tgi_batch_current_size 12\n"
        "tgi_batch_current_max_tokens 4096\n"
        "tgi_request_generated_tokens_sum 5000\n"
        'tgi_request_generated_tokens_bucket{le="10"} 3\n',
        {"requests_waiting": 7.0, "batch_size": 12.0},
        {"generation_tokens_per_s": 5000.0},
    ),
    "llamacpp": (
        "llamacpp:kv_cache_usage_ratio 0.125\n"
        "llamacpp:requests_processing 1\n"
        "llamacpp:requests_deferred 3\n"
        "llamacpp:tokens_predicted_total 321\n"
        "llamacpp:n_busy_slots_per_decode 1.5\n",
        {"kv_cache_usage": 0.125, "requests_running": 1.0, "requests_waiting": 3.0},
        {"generation_tokens_per_s": 321.0},
    ),
}


@pytest.mark.parametrize("source", list(EXPOSITIONS))
def test_each_servers_names_map_to_one_vocabulary_and_the_rest_is_left_out(source: str) -> None:
    text, gauges, counters = EXPOSITIONS[source]
    found, mapped, counted = map_exposition("# HELP some text\n" + text + "process_cpu_seconds_total 9\n")
    assert found == source
    assert mapped == gauges
    # Counters are kept as totals under the name of the rate they become
    assert counted == counters


def test_an_exposition_with_no_mapped_name_has_no_source() -> None:
    assert map_exposition("# TYPE up gauge\nup 1\nprocess_cpu_seconds_total 3.5\n") == (None, {}, {})


def test_the_sampler_reads_every_scrape_of_a_real_server_as_it_changes() -> None:
    with metrics_server("llamacpp") as server:
        in_flight = [1]
        sampler = MetricsSampler(server.url, 0.05, lambda: in_flight[0])
        sampler.start()
        for count in (1, 2, 3):
            in_flight[0] = count
            time.sleep(0.2)
        document = sampler.stop()
        served = list(server.served)
    assert document["source"] == "llamacpp" and "missing" not in document
    assert document["failed_samples"] == 0
    # Every scrape the server answered is a sample, in order, with the values it served
    assert document["samples"] == len(served) >= 6
    series = document["series"]
    for name in ("kv_cache_usage", "requests_running", "requests_waiting"):
        assert series[name] == [values[name] for values in served], name
    assert "batch_size" not in series  # llama.cpp's server does not give it
    t_s = document["t_s"]
    assert all(b > a for a, b in itertools.pairwise(t_s))
    # Rates from the counters: increase over the time between samples, none for the first
    rates = series["generation_tokens_per_s"]
    assert rates[0] is None
    for i in range(1, len(served)):
        expected = (served[i]["generation_tokens"] - served[i - 1]["generation_tokens"]) / (
            t_s[i] - t_s[i - 1]
        )
        assert rates[i] == pytest.approx(expected)
    assert document["peak"]["kv_cache_usage"] == max(values["kv_cache_usage"] for values in served)
    # The client's requests in flight were read beside the samples, as they changed
    assert set(document["client_in_flight"]) == {1, 2, 3}
    assert document["cpu_ms_per_sample"] > 0


def test_a_url_nothing_answers_says_the_metrics_are_missing() -> None:
    url = f"http://127.0.0.1:{free_port()}/metrics"
    sampler = MetricsSampler(url, 0.05)
    sampler.start()
    time.sleep(0.2)
    document = sampler.stop()
    assert document["samples"] == 0 and document["failed_samples"] >= 2
    assert document["source"] is None and "series" not in document
    assert document["missing"] == f"no sample from {url}: connection refused"


def test_a_url_answering_without_mapped_names_says_so() -> None:
    with metrics_server("vllm") as server:
        sampler = MetricsSampler(server.url.replace("/metrics", "/other"), 0.05)
        sampler.start()
        time.sleep(0.1)
        document = sampler.stop()
    assert document["samples"] == 0 and document["missing"].endswith(": HTTP 404")
