"""The task contract shared by api and workers: the task's name and the messages it carries.

The api sends the task by name (it never imports the worker's code); the worker registers the
implementation under the same name. The Celery task id is the evaluation id, so a job is one id in
the broker, the store, the agent registry and the trace.

Two kinds of job travel under the one task: an evaluation (`EvaluationMessage`) and a brick group
(`BrickGroupMessage`, "kind": "bricks"): a farm's bricks measured together in one predictor job,
each still an evaluation of its own. `read_message` tells them apart.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from mlscope.contract.errors import UserError
from mlscope.contract.request import EvaluationRequest, parse_request

__all__ = [
    "BARE_TASK",
    "BRICKS_KIND",
    "EVALUATE_TASK",
    "BrickGroupMessage",
    "EvaluationMessage",
    "TaskMessage",
    "read_message",
]

EVALUATE_TASK = "mlscope.evaluate"
# A task that does nothing: what benchmarks/dispatch.py sends to measure bare Celery.
BARE_TASK = "mlscope.noop"
MESSAGE_VERSION = 1
# The "kind" of a brick group's message; an evaluation's message has no "kind".
BRICKS_KIND = "bricks"


@dataclass(frozen=True)
class EvaluationMessage:
    """What travels on the queue for one evaluation.

    Attributes:
        evaluation_id: the id the api recorded the evaluation under (status queued).
        request: the validated request.
        queue: the queue it was sent to.
        submitted_at: wall-clock seconds (time.time()) when the api sent it; the worker's queue wait
            is measured from it.
        traceparent: the W3C trace context of the api's span for a traced request, so the
            worker's and the predictor's spans join the same trace; "" when not traced. An
            optional field: a message without it is read as untraced (still version 1).
    """

    evaluation_id: str
    request: EvaluationRequest
    queue: str
    submitted_at: float = field(default_factory=time.time)
    traceparent: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": MESSAGE_VERSION,
            "evaluation_id": self.evaluation_id,
            "request": self.request.to_dict(),
            "queue": self.queue,
            "submitted_at": self.submitted_at,
            "traceparent": self.traceparent,
        }

    @classmethod
    def from_dict(cls, data: Any) -> EvaluationMessage:
        """Read a message; the request inside is validated again, as at any other door.

        Raises:
            UserError: the message is not one this version understands, or it is a brick group's
                (`read_message` reads either kind).
        """
        _check_version(data)
        if _is_brick_group(data):
            raise UserError("task message: a brick group's, not one evaluation's (read_message reads it)")
        try:
            return cls(
                evaluation_id=str(data["evaluation_id"]),
                request=parse_request(data["request"]),
                queue=str(data["queue"]),
                submitted_at=float(data["submitted_at"]),
                traceparent=str(data.get("traceparent") or ""),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise UserError(f"task message: missing or malformed field {exc}") from None


@dataclass(frozen=True)
class BrickGroupMessage:
    """What travels on the queue for a brick group: a farm's bricks (options.brick) of one queue,
    each recorded as queued by the api under its own evaluation id, measured together in one
    predictor job (docs/bricks.md).

    Its wire form is {"version", "kind": "bricks", "members": [{"evaluation_id", "request"}, ...],
    "queue", "submitted_at", "traceparent"}. An evaluation's message that carries "companions" (an
    older api's form of a brick group, still queued while the farm is upgraded: the first brick as
    the message's evaluation, the others as its companions) is read as the same group, its
    evaluation first, and handled by the brick group's job.

    Attributes:
        members: each brick's (evaluation id, request), in the order they are measured; never empty.
        queue: the queue it was sent to (every member's).
        submitted_at: wall-clock seconds when the api sent it, as `EvaluationMessage.submitted_at`.
        traceparent: the W3C trace context of the api's span, as `EvaluationMessage.traceparent`.
    """

    members: tuple[tuple[str, EvaluationRequest], ...]
    queue: str
    submitted_at: float = field(default_factory=time.time)
    traceparent: str = ""

    def __post_init__(self) -> None:
        if not self.members:
            raise UserError("task message: a brick group has no members", field="members")

    @property
    def evaluation_id(self) -> str:
        """The first member's id: the Celery task id of the group's job."""
        return self.members[0][0]

    @property
    def request(self) -> EvaluationRequest:
        """The first member's request, whose settings (runner, time limit) the job runs under."""
        return self.members[0][1]

    @property
    def evaluation_ids(self) -> list[str]:
        return [id for id, _ in self.members]

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": MESSAGE_VERSION,
            "kind": BRICKS_KIND,
            "members": [{"evaluation_id": id, "request": r.to_dict()} for id, r in self.members],
            "queue": self.queue,
            "submitted_at": self.submitted_at,
            "traceparent": self.traceparent,
        }

    @classmethod
    def from_dict(cls, data: Any) -> BrickGroupMessage:
        """Read a brick group's message, in its own form or an evaluation's with "companions"; every
        member's request is validated again.

        Raises:
            UserError: the message is not one this version understands, or not a brick group's.
        """
        _check_version(data)
        if not _is_brick_group(data):
            raise UserError("task message: not a brick group's")
        try:
            # An older api's evaluation message with companions: the evaluation is the first brick.
            own = data.get("kind") == BRICKS_KIND
            listed = list(data["members"]) if own else [data, *data["companions"]]
            return cls(
                members=tuple(
                    (str(item["evaluation_id"]), parse_request(item["request"])) for item in listed
                ),
                queue=str(data["queue"]),
                submitted_at=float(data["submitted_at"]),
                traceparent=str(data.get("traceparent") or ""),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise UserError(f"task message: missing or malformed field {exc}") from None


TaskMessage = EvaluationMessage | BrickGroupMessage


def read_message(data: Any) -> TaskMessage:
    """The message of either kind of job: a brick group's ("kind": "bricks", or an evaluation's that
    carries "companions"), else one evaluation's.

    Raises:
        UserError: the message is not one this version understands.
    """
    if _is_brick_group(data):
        return BrickGroupMessage.from_dict(data)
    return EvaluationMessage.from_dict(data)


def _check_version(data: Any) -> None:
    if not isinstance(data, dict) or data.get("version") != MESSAGE_VERSION:
        version = data.get("version") if isinstance(data, dict) else None
        raise UserError(f"task message: version {version!r} is not {MESSAGE_VERSION}", field="version")
    kind = data.get("kind")
    if kind is not None and kind != BRICKS_KIND:
        raise UserError(f"task message: kind {kind!r} is not {BRICKS_KIND!r} (or none)", field="kind")


def _is_brick_group(data: Any) -> bool:
    return isinstance(data, dict) and (data.get("kind") == BRICKS_KIND or bool(data.get("companions")))
