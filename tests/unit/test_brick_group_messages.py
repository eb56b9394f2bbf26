"""A brick group is a job kind of its own: its message's wire form, how an older api's evaluation
message carrying "companions" is read as the same group, and the group's field of the predictor job."""

from __future__ import annotations

from dataclasses import replace

import pytest

from mlscope.broker.tasks import BrickGroupMessage, EvaluationMessage, read_message
from mlscope.contract.errors import UserError
from mlscope.contract.job import Job
from mlscope.contract.request import parse_request


def test_a_brick_groups_message_round_trips_as_a_kind_of_its_own() -> None:
    brick = {"model": "sha256:" + "a" * 64, "framework": "onnxruntime", "options": {"brick": True}}
    lead, other = parse_request(brick), parse_request({**brick, "model": "sha256:" + "b" * 64})
    group = BrickGroupMessage((("lead", lead), ("other", other)), "onnxruntime@cpu", traceparent="tp")

    wire = group.to_dict()
    assert wire["kind"] == "bricks" and [m["evaluation_id"] for m in wire["members"]] == ["lead", "other"]
    assert BrickGroupMessage.from_dict(wire) == group == read_message(wire)
    assert (group.evaluation_id, group.request, group.evaluation_ids) == ("lead", lead, ["lead", "other"])
    # an evaluation's message is read as one, and neither kind is read as the other
    plain = EvaluationMessage("one", lead, "onnxruntime@cpu")
    assert read_message(plain.to_dict()) == plain and "kind" not in plain.to_dict()
    with pytest.raises(UserError, match="brick group"):
        EvaluationMessage.from_dict(wire)
    with pytest.raises(UserError, match="not a brick group"):
        BrickGroupMessage.from_dict(plain.to_dict())
    with pytest.raises(UserError, match="kind"):
        read_message({**wire, "kind": "other"})
    with pytest.raises(UserError, match="no members"):
        read_message({**wire, "members": []})
    with pytest.raises(UserError, match="batch_sizes"):  # every member's request is validated
        read_message(
            {
                **wire,
                "members": [
                    *wire["members"][:1],
                    {**wire["members"][1], "request": {**other.to_dict(), "batch_sizes": [0]}},
                ],
            }
        )


def test_an_older_apis_message_with_companions_is_read_as_a_brick_group_its_evaluation_first() -> None:
    # Given an evaluation's message carrying companions, as an older api queued a brick group
    brick = {"model": "sha256:" + "a" * 64, "framework": "onnxruntime", "options": {"brick": True}}
    lead, other = parse_request(brick), parse_request({**brick, "model": "sha256:" + "b" * 64})
    older = {
        **EvaluationMessage("lead", lead, "onnxruntime@cpu", submitted_at=3.0, traceparent="tp").to_dict(),
        "companions": [{"evaluation_id": "other", "request": other.to_dict()}],
    }
    # When it is read, then it is that brick group (the worker hands it to the brick group's job)
    assert read_message(older) == BrickGroupMessage(
        (("lead", lead), ("other", other)), "onnxruntime@cpu", submitted_at=3.0, traceparent="tp"
    )
    # and without companions (or with none) it is one evaluation's
    assert isinstance(read_message({**older, "companions": []}), EvaluationMessage)
    with pytest.raises(UserError, match="batch_sizes"):  # a companion's request is validated too
        read_message(
            {
                **older,
                "companions": [
                    {"evaluation_id": "other", "request": {**other.to_dict(), "batch_sizes": [0]}}
                ],
            }
        )


def test_a_jobs_brick_group_crosses_to_the_predictor_under_its_name_or_an_older_workers() -> None:
    request = parse_request({"model": "m", "framework": "onnxruntime", "options": {"brick": True}})
    plain = Job.from_request(request, evaluation_id="own", manifest={}, origin="o", cache_dir="c")
    member = {"evaluation_id": "other", "manifest": {}, "origin": "o", "batch_size": 1}
    grouped = replace(plain, group=[member])

    assert "group" not in plain.to_dict() and Job.from_dict(plain.to_dict()) == plain
    assert Job.from_dict(grouped.to_dict()) == grouped
    older = {key: value for key, value in grouped.to_dict().items() if key != "group"}
    assert Job.from_dict({**older, "companions": [member]}) == grouped
