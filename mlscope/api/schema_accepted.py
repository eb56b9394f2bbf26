"""What a submission answers: the evaluation it queued (POST /evaluations), or each of a batch's and the
pairs it skipped (POST /evaluations/batch). Re-exported by `schemas`."""

from __future__ import annotations

from marshmallow import Schema, fields

__all__ = ["BatchAcceptedSchema", "EvaluationAcceptedSchema"]


class LinksSchema(Schema):
    self = fields.String(metadata={"description": "the evaluation's URL"})


def _served_by() -> fields.List:
    return fields.List(
        fields.String(),
        allow_none=True,
        metadata={
            "description": "the live agents consuming its queue when it was queued: empty when none "
            "does, so the job waits until a worker serving it starts (a warning says which); null "
            "when the agent registry could not be read"
        },
    )


class PartSchema(Schema):
    id = fields.String(metadata={"description": "the part's evaluation"})
    agent = fields.String(metadata={"description": "the agent that issues it"})
    queue = fields.String()


class EvaluationAcceptedSchema(Schema):
    id = fields.String()
    status = fields.String(metadata={"description": "queued"})
    queue = fields.String(metadata={"description": "the broker queue the job waits in"})
    target = fields.String(metadata={"description": "the capability or agent:<id> it runs on"})
    warnings = fields.List(fields.String())
    served_by = _served_by()
    parts = fields.List(
        fields.Nested(PartSchema),
        metadata={"description": "with load.agents > 1: each agent's part; `id` is the merged evaluation"},
    )
    links = fields.Nested(LinksSchema)


class BatchEvaluationSchema(Schema):
    id = fields.String()
    model = fields.String()
    framework = fields.String()
    target = fields.String()
    queue = fields.String()
    warnings = fields.List(fields.String())
    served_by = _served_by()


class SkippedSchema(Schema):
    model = fields.String()
    framework = fields.String()
    reason = fields.String()


class BatchAcceptedSchema(Schema):
    evaluations = fields.List(fields.Nested(BatchEvaluationSchema))
    skipped = fields.List(fields.Nested(SkippedSchema))
    warnings = fields.List(fields.String())
    compare_url = fields.String(metadata={"description": "the comparison of exactly these evaluations"})
