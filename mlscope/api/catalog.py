"""/api/v1/models, /frameworks, /agents, /queues: what can be evaluated, and where."""

from __future__ import annotations

import time
from typing import Any

from flask.views import MethodView

from mlscope.api.blueprint import ApiBlueprint
from mlscope.api.context import bounded, context, redact_url
from mlscope.api.problems import PROBLEM_MIMETYPE, ApiProblem, ProblemSchema
from mlscope.api.schemas import (
    AgentSchema,
    FrameworkSchema,
    ModelDetailSchema,
    ModelQuerySchema,
    ModelSummarySchema,
    QueueSchema,
)
from mlscope.broker.app import queue_depths
from mlscope.contract.errors import UserError
from mlscope.runtime.frameworks import FRAMEWORKS, installed_version

__all__ = ["BROKER_TIMEOUT_S", "blp", "model_listing", "queue_listing"]

# Reading queue depths opens a broker connection; a broker that does not answer in this long is down.
BROKER_TIMEOUT_S = 5.0

blp = ApiBlueprint(
    "catalog",
    __name__,
    url_prefix="/api/v1",
    description="Models, frameworks, live agents and their queues.",
)


@blp.route("/models")
class Models(MethodView):
    @blp.arguments(ModelQuerySchema, location="query")
    @blp.response(200, ModelSummarySchema(many=True))
    def get(self, query: dict[str, Any]) -> list[dict[str, Any]]:
        """List the models that can be evaluated

        One entry per model name, with every framework it has a manifest for: the manifest files,
        then the catalogue's architectures (torchvision:NAME, timm:NAME, hf:TYPE), which any request
        may name too. Filters: task, framework, family, search (in the name or family).
        """
        return model_listing(query)


def model_listing(query: dict[str, Any]) -> list[dict[str, Any]]:
    """The models GET /models lists for `query` (task, framework, family, search), shared with the
    dashboard's catalogue page."""
    models = context().models
    listed = []
    for name, origin, family in models.listing():
        frameworks = models.frameworks_for(name)
        if origin == "manifest":
            first = models.get(name, frameworks[0])
            task, description, version = first.task, first.description, first.version
        else:  # described by its entry: no manifest is built to list it
            assert models.catalogue is not None  # listing() names catalogue entries only then
            task, description, version = models.catalogue.get(name).task, None, "1.0"
        listed.append(
            {
                "name": name,
                "task": task,
                "description": description,
                "frameworks": frameworks,
                "version": version,
                "family": family,
                "origin": origin,
            }
        )
    return [item for item in listed if _wanted(item, query)]


def _wanted(item: dict[str, Any], query: dict[str, Any]) -> bool:
    search = str(query.get("search") or "").lower()
    return (
        query.get("task") in (None, item["task"])
        and (query.get("framework") is None or query["framework"] in item["frameworks"])
        and query.get("family") in (None, item["family"])
        and (not search or search in item["name"].lower() or search in (item["family"] or ""))
    )


@blp.route("/models/<string:name>")
class ModelByName(MethodView):
    @blp.response(200, ModelDetailSchema)
    @blp.alt_response(
        404, schema=ProblemSchema, content_type=PROBLEM_MIMETYPE, description="No model has this name"
    )
    def get(self, name: str) -> dict[str, Any]:
        """Read one model's manifests, by framework"""
        models = context().models
        try:
            frameworks = models.frameworks_for(name)
        except UserError as exc:
            raise ApiProblem(404, exc.message) from None
        return {"name": name, "manifests": {f: models.get(name, f).to_dict() for f in frameworks}}


@blp.route("/frameworks")
class Frameworks(MethodView):
    @blp.response(200, FrameworkSchema(many=True))
    def get(self) -> list[dict[str, Any]]:
        """List the registered frameworks

        `installed_here` is the version installed where the API runs; `served_by` lists the live
        agents that have it.
        """
        live = context().live.live()
        return [
            {
                "name": spec.name,
                "display": spec.display,
                "installed_here": installed_version(spec),
                "served_by": [agent.id for agent in live if spec.name in agent.frameworks],
            }
            for spec in sorted(FRAMEWORKS.values(), key=lambda s: s.name)
        ]


@blp.route("/agents")
class Agents(MethodView):
    @blp.response(200, AgentSchema(many=True))
    def get(self) -> list[dict[str, Any]]:
        """List the live agents (workers) with their capabilities and queues"""
        now = time.time()
        return [
            {**agent.to_dict(), "seconds_since_heartbeat": max(0.0, now - agent.heartbeat_at)}
            for agent in context().agents.live()
        ]


@blp.route("/queues")
class Queues(MethodView):
    @blp.response(200, QueueSchema(many=True))
    @blp.alt_response(
        503,
        schema=ProblemSchema,
        content_type=PROBLEM_MIMETYPE,
        description="The broker or the agent registry is down",
    )
    def get(self) -> list[dict[str, Any]]:
        """List the queues jobs were sent to or live agents consume, with their depths"""
        return queue_listing()


def queue_listing() -> list[dict[str, Any]]:
    """The queues GET /queues lists, with their depths and consumers (shared with the dashboard).

    Raises:
        ApiProblem: 503 when the broker does not answer within BROKER_TIMEOUT_S.
    """
    ctx = context()
    live = ctx.agents.live()
    queues = sorted(ctx.agents.known_queues())
    try:
        depths = bounded(lambda: queue_depths(ctx.celery, queues), BROKER_TIMEOUT_S)
    except Exception as exc:  # kombu, redis and amqp each raise their own kinds
        raise ApiProblem(
            503, f"cannot read queue depths from the broker at {redact_url(ctx.broker_url)}: {exc}"
        ) from None
    return [
        {
            "queue": queue,
            "depth": depths.get(queue, 0),
            "consumers": [agent.id for agent in live if queue in agent.queues],
        }
        for queue in queues
    ]
