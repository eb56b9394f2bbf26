"""The Flask app factory and the server the CLI's `mlscope api` runs.

`create_app` builds one app from settings (or from parts a test hands it): the store, the Celery app,
the agent and model registries, kept on `app.extensions["mlscope"]`; flask-smorest for validation and
the OpenAPI document (`/api/openapi.json`, docs page at `/api/docs`); problem documents for every error;
bearer-token checks; Prometheus metrics; the web dashboard at `/` (mlscope.api.dashboard).
"""

from __future__ import annotations

import logging
import os
import socket

import waitress
from celery import Celery
from flask import Flask
from flask_smorest import Api

from mlscope import __version__
from mlscope.api.auth import init_auth
from mlscope.api.blueprint import EvaluationIdConverter
from mlscope.api.context import ApiContext
from mlscope.api.dashboard import SWAGGER_UI_CONFIG, SWAGGER_UI_URL, init_dashboard
from mlscope.api.metrics import ApiMetrics
from mlscope.api.openapi_fields import RulesPlugin, exclusive_bounds, stated_schema
from mlscope.api.problems import PROBLEM_MIMETYPE, ProblemSchema, install_error_handlers
from mlscope.api.resources import register_resources
from mlscope.broker.app import make_celery
from mlscope.contract.interrupts import interrupt_on_signals
from mlscope.contract.settings import Settings, load_settings
from mlscope.registry.agents import AgentRegistry
from mlscope.registry.datasets.uploads import DatasetFiles
from mlscope.registry.models import ModelRegistry
from mlscope.registry.uploads import ModelFiles
from mlscope.store import Store, open_store
from mlscope.workers.sweeper import Sweeper, sweeping

__all__ = ["MAX_BODY_BYTES", "create_app", "dashboard_url", "serve"]

MAX_BODY_BYTES = 1024 * 1024
# waitress buffers a whole request body before the app sees it, and refuses (its own plain 413) one
# past its limit: it is set this far above MLSCOPE_MAX_UPLOAD_BYTES, so the app's answer, a problem
# document naming the cap, is the one a client gets (MLSCOPE_MAX_DATASET_BYTES when it is larger).
_WAITRESS_BODY_SLACK = 1024 * 1024
logger = logging.getLogger("mlscope.api")


class _ProblemApi(Api):
    """flask-smorest's Api, documenting errors as the problem documents they are."""

    ERROR_SCHEMA = ProblemSchema

    def _register_responses(self) -> None:
        # The shared error responses (422, default) are problem documents, not application/json.
        self.DEFAULT_RESPONSE_CONTENT_TYPE = PROBLEM_MIMETYPE
        try:
            super()._register_responses()
        finally:
            del self.DEFAULT_RESPONSE_CONTENT_TYPE


def _configure(app: Flask) -> None:
    app.config.update(
        API_TITLE="mlscope",
        API_VERSION=__version__,
        OPENAPI_VERSION="3.0.3",
        OPENAPI_URL_PREFIX="/api",
        OPENAPI_JSON_PATH="openapi.json",
        OPENAPI_SWAGGER_UI_PATH="/docs",
        # Swagger UI's files come from the installed swagger_ui_bundle package, served by this process.
        OPENAPI_SWAGGER_UI_URL=SWAGGER_UI_URL,
        OPENAPI_SWAGGER_UI_CONFIG=SWAGGER_UI_CONFIG,
        API_SPEC_OPTIONS={
            "info": {
                "description": "Submit, follow and compare deep-learning benchmarks on a farm of workers. "
                "Errors are RFC 7807 problem documents (application/problem+json). Writes need a bearer "
                "token."
            },
            "components": {"securitySchemes": {"bearerAuth": {"type": "http", "scheme": "bearer"}}},
        },
        MAX_CONTENT_LENGTH=MAX_BODY_BYTES,
    )
    # Keys keep the order they were built in: result documents read in the contract's order.
    app.json.sort_keys = False  # type: ignore[attr-defined]


def create_app(
    settings: Settings | None = None,
    *,
    store: Store | None = None,
    celery: Celery | None = None,
    agents: AgentRegistry | None = None,
    models: ModelRegistry | None = None,
) -> Flask:
    """Build the API app.

    Args:
        settings: the settings; `load_settings()` when None.
        store: the store; opened from `settings.store_url` when None. The SQL store is safe to share
            between request threads (not between forked processes).
        celery: the Celery app jobs are sent through; `make_celery(settings)` when None.
        agents: the agent registry; at `settings.agent_registry_url` when None.
        models: the manifests; when None, the shipped ones plus `settings.manifests`, resolving no
            local paths or factories (they would name this server's files, or be code on the wire),
            and `sha256:<hex>` from the models uploaded to `settings.upload_dir`.

    Returns:
        The Flask app, its parts on `app.extensions["mlscope"]` (an ApiContext).

    Raises:
        UserError: a setting is invalid, the store cannot be opened, or a manifest is broken.
    """
    settings = settings if settings is not None else load_settings()
    ctx = ApiContext(
        settings=settings,
        store=store if store is not None else open_store(settings.store_url),
        celery=celery if celery is not None else make_celery(settings),
        agents=agents if agents is not None else AgentRegistry(settings.agent_registry_url),
        models=models
        if models is not None
        else ModelRegistry.load(
            settings.manifests,
            local_files=False,
            uploads=ModelFiles(settings.upload_dir).lookup,
            dataset_uploads=DatasetFiles(settings.dataset_upload_dir).lookup,
        ),
        metrics=ApiMetrics(),
        store_url=settings.store_url if store is None else None,
    )
    ctx.metrics.watch(ctx)

    # No static folder of the app's own: /static/ is the dashboard's (mlscope.api.dashboard.assets).
    app = Flask("mlscope.api", static_folder=None)
    _configure(app)
    app.extensions["mlscope"] = ctx
    ctx.metrics.init_app(app)
    init_auth(app)
    app.url_map.converters["evaluation_id"] = EvaluationIdConverter
    api = _ProblemApi(app, spec_kwargs={"extra_plugins": [RulesPlugin()]})
    api.register_converter(EvaluationIdConverter, EvaluationIdConverter.openapi_schema)
    api.ma_plugin.converter.add_attribute_function(exclusive_bounds)
    api.ma_plugin.converter.add_attribute_function(stated_schema)
    register_resources(api)
    # After flask-smorest's own handler, so these win.
    install_error_handlers(app)
    init_dashboard(app)
    return app


def dashboard_url(host: str, port: int) -> str:
    """The URL a browser on this machine opens the dashboard at: a wildcard address (0.0.0.0, ::)
    listens on every interface, so the loopback one is named."""
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}/"


def serve(
    settings: Settings | None = None, host: str = "127.0.0.1", port: int = 8000, threads: int = 8
) -> None:
    """Serve the API until interrupted.

    It runs on waitress, a production WSGI server in pure Python (a pool of `threads` request
    threads); for more than one process, serve `create_app()` from a WSGI server such as gunicorn.

    Args:
        settings: the settings; `load_settings()` when None.
        host: the address to listen on.
        port: the TCP port.
        threads: request threads.

    Raises:
        UserError: as `create_app`.
    """
    app = create_app(settings)
    ctx: ApiContext = app.extensions["mlscope"]
    # SIGTERM (docker stop, Kubernetes) and SIGINT, even where it was inherited ignored, end the server
    # through the clean-up below.
    interrupt_on_signals()
    logger.info("mlscope dashboard at %s (API at /api/v1, docs at /api/docs)", dashboard_url(host, port))
    # The api sweeps too: evaluations of workers that died are resolved even when no worker is left.
    sweeper = Sweeper(ctx.store, ctx.agents, ctx.celery, holder=f"api:{socket.gethostname()}:{os.getpid()}")
    try:
        with sweeping(sweeper):
            waitress.serve(
                app,
                host=host,
                port=port,
                threads=threads,
                ident="mlscope",
                max_request_body_size=max(ctx.settings.max_upload_bytes, ctx.settings.max_dataset_bytes)
                + _WAITRESS_BODY_SLACK,
            )
    finally:
        ctx.store.close()
        ctx.agents.close()
