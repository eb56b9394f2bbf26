"""benchmarks/generate_peers.py reads GuideLLM's JSON report: the right metric for each figure, in
the right unit, and one line naming what is missing. The sample is a real report of GuideLLM 0.8.1
from the benchmark's run against the test endpoint, trimmed to the figures read (tests/data/guidellm).
And the test endpoint's scripted timing and its own record of it, the truth the benchmark uses.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import sys
import urllib.request
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from mlscope.runtime.generate.endpoint import EndpointEngine
from mlscope.runtime.generate.records import GenerationRequest
from tests.fixtures.mock_endpoint import mock_endpoint

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "tests" / "data" / "guidellm" / "report-timed.json"


@pytest.fixture(scope="module")
def peers() -> ModuleType:
    spec = importlib.util.spec_from_file_location("generate_peers", REPO / "benchmarks" / "generate_peers.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def report() -> dict[str, Any]:
    return json.loads(SAMPLE.read_text())


def test_figures_are_the_successful_requests_medians(peers: ModuleType, report: dict[str, Any]) -> None:
    figures = peers.parse_guidellm_report(report)
    metrics = report["benchmarks"][0]["metrics"]
    assert figures.ttft_ms == metrics["time_to_first_token_ms"]["successful"]["median"]
    # mlscope's TPOT, (last - first) / (n - 1), is what GuideLLM calls inter-token latency.
    assert figures.tpot_ms == metrics["inter_token_latency_ms"]["successful"]["median"]
    assert figures.successful == metrics["request_totals"]["successful"] > 0
    assert figures.errored == metrics["request_totals"]["errored"]


def test_units_agree_with_the_request_latency(peers: ModuleType, report: dict[str, Any]) -> None:
    """Equal-length requests: end to end = TTFT + (n - 1) TPOT = n x GuideLLM's own TPOT (first token
    included); a figure read in seconds for milliseconds, or the two TPOTs swapped, breaks these."""
    figures = peers.parse_guidellm_report(report)
    n = figures.output_tokens
    assert n > 1
    assert figures.e2e_ms == pytest.approx(figures.ttft_ms + (n - 1) * figures.tpot_ms, rel=0.02)
    assert figures.e2e_ms == pytest.approx(n * figures.tpot_with_first_ms, rel=0.02)
    assert figures.tpot_with_first_ms > figures.tpot_ms  # the first token's wait is in GuideLLM's own
    # A closed loop of `streams` requests in flight, each lasting e2e: the rate follows.
    streams = report["benchmarks"][0]["config"]["strategy"]["streams"]
    assert figures.requests_per_s == pytest.approx(streams / (figures.e2e_ms / 1e3), rel=0.15)


def test_a_missing_metric_is_named(peers: ModuleType, report: dict[str, Any]) -> None:
    broken = copy.deepcopy(report)
    del broken["benchmarks"][0]["metrics"]["inter_token_latency_ms"]["successful"]
    with pytest.raises(
        peers.ReportError,
        match=r"^GuideLLM report has no benchmarks\[0\]\.metrics\.inter_token_latency_ms\.successful$",
    ):
        peers.parse_guidellm_report(broken)


def test_no_successful_request_is_refused(peers: ModuleType, report: dict[str, Any]) -> None:
    broken = copy.deepcopy(report)
    broken["benchmarks"][0]["metrics"]["request_totals"]["successful"] = 0
    with pytest.raises(peers.ReportError, match=r"request_totals\.successful is 0"):
        peers.parse_guidellm_report(broken)
    broken["benchmarks"] = []
    with pytest.raises(peers.ReportError, match="expected one benchmark, found 0"):
        peers.parse_guidellm_report(broken)


def test_a_missing_guidellm_fails_in_one_line(peers: ModuleType, tmp_path: Path) -> None:
    with pytest.raises(peers.PeerMissing) as stopped:
        peers.guidellm_command(tmp_path / "env" / "bin" / "guidellm")
    message = str(stopped.value)
    assert "no such file" in message and "--setup" in message and "\n" not in message


def test_the_test_endpoints_scripted_timing_and_its_own_record() -> None:
    """The timing benchmarks/generate_peers.py holds both clients to: the first token at least the
    scripted delay after the request, then the scripted gap; the endpoint's own record of them
    (GET /v1/timings) never after what a client sees; `max_completion_tokens` (GuideLLM's name for
    the length) honoured as `max_tokens` is."""
    with mock_endpoint() as server:
        server.first_token_delay_s, server.token_delay_s = 0.03, 0.005
        engine = EndpointEngine(server.base_url, "slow")
        try:
            record = engine.generate(GenerationRequest(0, 8, 4))
        finally:
            engine.close()
        with urllib.request.urlopen(server.base_url + "/timings", timeout=5) as answer:
            timings = json.load(answer)["timings"]
        body = json.dumps({"model": "ok", "max_completion_tokens": 3, "stream": True}).encode()
        request = urllib.request.Request(server.base_url + "/chat/completions", data=body, method="POST")
        with urllib.request.urlopen(request, timeout=5) as answer:
            chunks = [line for line in answer.read().decode().splitlines() if '"content": "w ' in line]
    assert record.ok and record.output_tokens == 4
    client_ttft_ms = (record.token_ns[0] - record.start_ns) / 1e6
    client_tpot_ms = (record.token_ns[-1] - record.token_ns[0]) / 3 / 1e6
    assert len(timings) == 1
    assert 30 <= timings[0]["ttft_ms"] <= client_ttft_ms
    assert 5 <= timings[0]["tpot_ms"] < 30
    assert client_tpot_ms >= 5
    assert len(chunks) == 3
