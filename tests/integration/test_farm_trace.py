"""A traced evaluation through the farm: one trace from the HTTP request through the Celery task into
the predictor process, stored with the evaluation and sent to a real OTLP/HTTP receiver.

Real `mlscope api` and `mlscope worker` processes on Redis and PostgreSQL (one broker suffices: the
trace context travels in the task message, which is the same on both).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import requests

from mlscope.runtime.trace.spans import TraceContext
from mlscope.store import open_store
from tests.integration.farm import QUICK_TRACED as QUICK
from tests.integration.farm import TOKEN, Farm, wait_until
from tests.otlp_receiver import OtlpReceiver

MODEL = "test_tiny_mlp"


def _ancestors(span: dict[str, Any], by_id: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    chain = []
    while span["parent_id"] in by_id:
        span = by_id[span["parent_id"]]
        chain.append(span)
    return chain


@pytest.mark.parametrize("farm", ["redis"], indirect=True)
def test_a_traced_evaluation_is_one_trace_from_the_http_request_to_the_layers(farm: Farm) -> None:
    with OtlpReceiver() as receiver:
        # Given a farm whose api and worker export to a real OTLP/HTTP receiver
        farm.env["MLSCOPE_OTLP_ENDPOINT"] = receiver.endpoint
        farm.start_api()
        farm.start_worker("agent-trace", farm.capability("trace"))
        caller = TraceContext.new()

        # When a client that is itself traced submits an evaluation at FRAMEWORK level
        answer = requests.post(
            f"{farm.api_url}/api/v1/evaluations",
            json={
                "model": MODEL,
                "framework": "pytorch",
                "target": "cpu",
                "trace_level": "FRAMEWORK",
                "measure": QUICK,
            },
            headers={"Authorization": f"Bearer {TOKEN}", "traceparent": caller.traceparent()},
            timeout=30,
        )
        assert answer.status_code == 202, answer.text
        evaluation_id = answer.json()["id"]
        (result,) = farm.client.wait([evaluation_id], timeout_s=180)
        assert result["status"] == "succeeded", result.get("error")

        # Then the evaluation names the caller's trace, and every stored span belongs to it
        assert result["trace_id"] == caller.trace_id
        assert result["trace_level"] == "FRAMEWORK"
        with open_store(farm.env["MLSCOPE_STORE_URL"]) as store:
            # The worker's task span ends (and is stored) just after the evaluation's result is.
            spans = wait_until(
                lambda: (
                    (found := store.get_spans(evaluation_id))
                    and any(s["name"] == "mlscope.evaluate" for s in found)
                    and found
                ),
                30,
                "the worker's task span to be stored",
            )
        assert {span["trace_id"] for span in spans} == {caller.trace_id}
        by_id = {span["span_id"]: span for span in spans}
        assert len(by_id) == len(spans)

        # the api's span continues the caller's, the task span the api's, the predictor the task's
        (api_span,) = [s for s in spans if s["name"] == "POST /api/v1/evaluations"]
        (task_span,) = [s for s in spans if s["name"] == "mlscope.evaluate"]
        (queue_wait,) = [s for s in spans if s["name"] == "queue_wait"]
        (predictor,) = [s for s in spans if s["name"] == "evaluation"]
        assert api_span["parent_id"] == caller.span_id
        assert api_span["attributes"]["mlscope.process"] == "api"
        assert task_span["parent_id"] == api_span["span_id"]
        assert task_span["attributes"]["mlscope.process"] == "worker"
        assert queue_wait["parent_id"] == task_span["span_id"]
        assert predictor["parent_id"] == task_span["span_id"]
        assert predictor["attributes"]["mlscope.process"] == "predictor"
        phases = {s["name"] for s in spans if s["parent_id"] == predictor["span_id"]}
        assert {
            "import",
            "fetch",
            "load",
            "first_inference",
            "preprocess",
            "predict",
            "postprocess",
        } <= phases
        assert "profile FRAMEWORK" in phases and "profile LIBRARY" not in phases

        # every timed inference of the measurement is a MODEL span under its "predict" span
        (predict,) = [s for s in spans if s["name"] == "predict"]
        measured = [s for s in spans if s["level"] == "MODEL" and s["attributes"].get("pass") == "MODEL"]
        assert len(measured) == result["measurements"][0]["latency_ms"]["count"]
        assert all(s["parent_id"] == predict["span_id"] for s in measured)

        # layer spans sit inside the profiled inference they belong to, in time and by parent
        layers = [s for s in spans if s["level"] == "FRAMEWORK"]
        assert layers, Counter(s["level"] for s in spans)
        profiled = {
            s["span_id"]: s
            for s in spans
            if s["level"] == "MODEL" and s["attributes"].get("pass") == "FRAMEWORK"
        }
        assert len(profiled) == QUICK["trace_iterations"]
        for layer in layers:
            inference = next(a for a in _ancestors(layer, by_id) if a["span_id"] in profiled)
            assert inference["start_ns"] <= layer["start_ns"] <= layer["end_ns"] <= inference["end_ns"]
            assert layer["attributes"]["layer_type"] in {"Linear", "ReLU"}
        # and the measured pass never overlaps a profiled one
        assert max(s["end_ns"] for s in measured) <= min(s["start_ns"] for s in profiled.values())

        # And the receiver got the same spans, each from the process that made it
        received = receiver.wait_for(len(spans), timeout_s=30)
        ours = [s for s in received if s["trace_id"] == caller.trace_id]
        assert {s["span_id"] for s in ours} == set(by_id)
        services = {s["span_id"]: s["service_name"] for s in ours}
        assert services[api_span["span_id"]] == "mlscope-api"
        assert services[task_span["span_id"]] == "mlscope-worker"
        assert services[predictor["span_id"]] == "mlscope-predictor"
