"""mlscope.api: the HTTP API of the farm: a Flask app factory, one blueprint per resource under
/api/v1, marshmallow schemas at the boundary, the OpenAPI document and problem-document errors.

Nothing imports this package but the CLI's `mlscope api` command (which calls `serve`).
"""

from mlscope.api.app import MAX_BODY_BYTES, create_app, serve
from mlscope.api.context import ApiContext

__all__ = ["MAX_BODY_BYTES", "ApiContext", "create_app", "serve"]
