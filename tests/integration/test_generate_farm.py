"""The generate scenario on a farm: submitted over HTTP like any evaluation, run by a real worker
process, stored with its `generation` section — in process on a tiny Hugging Face model, and against
an endpoint (a real HTTP server in this process that fails every third request: the run completes
and the failures are a measured rate, the point invalid, never a crash), and against a server
without the API asked for (the worker refuses the job naming the setting)."""

from __future__ import annotations

import pytest

from mlscope.contract.generation import GenerationSettings
from tests.fixtures.mock_endpoint import mock_endpoint
from tests.integration.farm import Farm

TINY_GPT2 = {"n_layer": 2, "n_embd": 64, "n_head": 2}
QUICK = {"min_seconds": 0.1, "max_seconds": 5}


@pytest.mark.slow
@pytest.mark.parametrize("farm", ["redis"], indirect=True)
def test_generate_jobs_run_on_a_worker_in_process_and_against_an_endpoint(farm: Farm) -> None:
    farm.start_api()
    capability = farm.capability("generate")
    farm.start_worker("agent-generate", capability)
    generation = {"prompt_tokens": 8, "output_tokens": "uniform:3-6", "requests": 10, "warmup_requests": 1}
    with mock_endpoint() as server, mock_endpoint() as chat_only:
        chat_only.apis = {"chat", "completions"}
        in_process = farm.client.submit(
            {
                "model": "hf:gpt2",
                "framework": "pytorch",
                "scenarios": ["generate"],
                "model_options": {"config": TINY_GPT2},
                "generation": generation,
                "measure": QUICK,
                "target": capability,
            }
        )["id"]
        served = farm.client.submit(
            {
                "model": "fail_some",
                "framework": "endpoint",
                "scenarios": ["generate"],
                "generation": {**generation, "endpoint": server.base_url, "warmup_requests": 0},
                "measure": QUICK,
                "target": capability,
            }
        )["id"]
        # ... and against a server without the API asked for, which the API does not contact
        unserved = farm.client.submit(
            {
                "model": "ok",
                "framework": "endpoint",
                "scenarios": ["generate"],
                "generation": {"endpoint": chat_only.base_url, "api": "embeddings", "requests": 10},
                "measure": QUICK,
                "target": capability,
            }
        )["id"]
        local, remote, refused = farm.client.wait([in_process, served, unserved], timeout_s=300)
        sent_unserved = chat_only.requests

    # Without the API: the worker refused the job when it took it, naming the setting, after the one
    # request that settles it (a GET of the path answered 404)
    assert refused["status"] == "failed" and refused["error"]["type"] == "InvalidRequest"
    assert refused["error"]["message"].startswith(
        "generation.api: the endpoint does not serve api 'embeddings' (HTTP 404"
    ), refused["error"]
    assert refused["measurements"] == [] and sent_unserved == 1

    # In process: every request generated exactly the length it asked for
    assert local["status"] == "succeeded", local["error"]
    [point] = local["measurements"]
    per_request = point["generation"]["per_request"]
    count = point["generation"]["requests"]
    _, asked = GenerationSettings.from_dict(generation).lengths(count, 0)
    assert per_request["output_tokens"] == asked and count >= 10
    assert all(0 < t < e for t, e in zip(per_request["ttft_ms"], per_request["e2e_ms"], strict=True))
    assert local["framework"]["name"] == "pytorch" and point["generation"]["via"] == "in_process"

    # Against the endpoint: a third of the requests failed, counted by reason, the point not valid
    assert remote["status"] == "succeeded", remote["error"]
    [point] = remote["measurements"]
    failed = point["generation"]["failed_requests"]
    # The mock fails its 1st, 4th, 7th... request (counted from 0 at the server, the first-request probe
    # included): 3 or 4 of the 10 measured.
    assert failed["count"] in (3, 4) and failed["reasons"] == {"HTTP 500": failed["count"]}
    assert point["validity"]["valid"] is False
    assert point["validity"]["reasons"][0].startswith(f"{failed['count']} of 10 requests failed")
    assert remote["framework"]["name"] == "endpoint" and point["generation"]["endpoint"] == server.base_url
