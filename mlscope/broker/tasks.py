"""The task contract shared by api and workers: the task's name and the message it carries.

The api sends the task by name (it never imports the worker's code); the worker registers the
implementation under the same name. The Celery task id is the evaluation id, so a job is one id in
the broker, the store, the agent registry and the trace.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from mlscope.contract.errors import UserError
from mlscope.contract.request import EvaluationRequest, parse_request

__all__ = ["BARE_TASK", "EVALUATE_TASK", "EvaluationMessage"]

EVALUATE_TASK = "mlscope.evaluate"
# A task that does nothing: what benchmarks/dispatch.py sends to measure bare Celery.
BARE_TASK = "mlscope.noop"
MESSAGE_VERSION = 1


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
        companions: other evaluations measured in the same predictor job, after this one: a farm's
            bricks (options.brick), each (evaluation id, request), recorded as queued by the api
            with no message of their own. Optional as well: a message without it has none.
    """

    evaluation_id: str
    request: EvaluationRequest
    queue: str
    submitted_at: float = field(default_factory=time.time)
    traceparent: str = ""
    companions: tuple[tuple[str, EvaluationRequest], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": MESSAGE_VERSION,
            "evaluation_id": self.evaluation_id,
            "request": self.request.to_dict(),
            "queue": self.queue,
            "submitted_at": self.submitted_at,
            "traceparent": self.traceparent,
            **(
                {"companions": [{"evaluation_id": id, "request": r.to_dict()} for id, r in self.companions]}
                if self.companions
                else {}
            ),
        }

    @classmethod
    def from_dict(cls, data: Any) -> EvaluationMessage:
        """Read a message; the request inside is validated again, as at any other door.

        Raises:
            UserError: the message is not one this version understands.
        """
        if not isinstance(data, dict) or data.get("version") != MESSAGE_VERSION:
            version = data.get("version") if isinstance(data, dict) else None
            raise UserError(f"task message: version {version!r} is not {MESSAGE_VERSION}", field="version")
        try:
            return cls(
                evaluation_id=str(data["evaluation_id"]),
                request=parse_request(data["request"]),
                queue=str(data["queue"]),
                submitted_at=float(data["submitted_at"]),
                traceparent=str(data.get("traceparent") or ""),
                companions=tuple(
                    (str(item["evaluation_id"]), parse_request(item["request"]))
                    for item in data.get("companions") or ()
                ),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise UserError(f"task message: missing or malformed field {exc}") from None
