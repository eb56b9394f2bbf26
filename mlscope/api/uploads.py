"""/api/v1/models as a place to put models: upload an ONNX file once (POST /models), name it by the
`sha256:<hex>` reference the answer gives wherever a model is named, describe it
(GET /models/sha256:<hex>) and download it (GET /models/sha256:<hex>/file: a farm's workers do,
with a token).

The file is the body (Content-Type: application/octet-stream; `?filename=` names it), streamed into
the upload directory (`<cache_dir>/uploads`) as it is read, hashed on the way and capped at
MLSCOPE_MAX_UPLOAD_BYTES; or the multipart/form-data field `file` (as `curl -F file=@model.onnx`
sends it, spooled by werkzeug first). A file that is too large, not ONNX, or cut short leaves
nothing behind; a valid one is kept as `<sha256>.onnx`, so uploading the same bytes twice keeps one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flask import Response, send_file, url_for
from flask.views import MethodView
from marshmallow import Schema, fields, validate

from mlscope.registry.uploads import ModelFiles, UploadedModel, UploadTooLarge

from .blueprint import ApiBlueprint
from .context import context
from .problems import ApiProblem
from .upload_body import BINARY, OCTETS, SECURITY, F, UploadKind, document_problems, request_body_doc

__all__ = ["UploadQuerySchema", "UploadedModelSchema", "blp"]

blp = ApiBlueprint(
    "uploads",
    __name__,
    url_prefix="/api/v1",
    description="Upload an ONNX model once, then name it sha256:<hex> in any request.",
)


class UploadQuerySchema(Schema):
    filename = fields.String(
        validate=validate.Length(min=1, max=200),
        metadata={"description": "what the file is called (the model's name is its stem)"},
    )


class UploadedModelSchema(Schema):
    ref = fields.String(metadata={"description": "sha256:<hex>: name the model by it in any request"})
    sha256 = fields.String()
    size = fields.Integer(metadata={"description": "bytes"})
    filename = fields.String(metadata={"description": "the name it was first uploaded under"})
    name = fields.String(metadata={"description": "the model's name in results (the file name's stem)"})
    uploaded_at = fields.String(metadata={"description": "when it was first uploaded (ISO 8601, UTC)"})
    inputs = fields.List(
        fields.Dict(),
        metadata={"description": "{name, dtype, shape}; a dynamic axis is its symbol (give its size as "
                  "model_options.input_shapes when submitting)"},
    )  # fmt: skip
    outputs = fields.List(fields.String())
    opset = fields.Integer(allow_none=True)


def _problems(*answers: tuple[int, str]) -> Callable[[F], F]:
    return document_problems(blp, *answers)


def _files() -> ModelFiles:
    return ModelFiles(context().settings.upload_dir)


_ONNX = UploadKind(
    what="the ONNX file",
    setting="MLSCOPE_MAX_UPLOAD_BYTES",
    advice="export a smaller model, or raise the setting on the API",
    cap_key="max_upload_bytes",
)


def _url(model: UploadedModel) -> str:
    return url_for("uploads.UploadedModelByRef", digest=model.sha256)


@blp.route("/models")
class ModelUpload(MethodView):
    @blp.arguments(UploadQuerySchema, location="query")
    @blp.doc(requestBody=request_body_doc("the ONNX file"), security=SECURITY)
    @blp.response(
        201,
        UploadedModelSchema,
        description="Uploaded",
        headers={"Location": {"description": "the model's URL", "schema": {"type": "string"}}},
    )
    @blp.alt_response(
        200, schema=UploadedModelSchema, description="These bytes were uploaded before: the same answer"
    )
    @_problems(
        (413, "Larger than MLSCOPE_MAX_UPLOAD_BYTES (the problem's max_upload_bytes); nothing is kept"),
        (415, "Neither an application/octet-stream body nor a multipart field `file`"),
        (403, "Writes are disabled (no tokens configured)"),
        (401, "No token, or a wrong one"),
    )
    def post(self, query: dict[str, Any]) -> tuple[dict[str, Any], int, dict[str, str]]:
        """Upload an ONNX model

        The file is checked as an ONNX graph whose inputs mlscope can feed (a corrupt or truncated
        file is a 422 naming the field `file`) and kept by its SHA-256; the answer's `ref`,
        `sha256:<hex>`, names it as a request's `model` (with `model_options.input_shapes` for
        dynamic axes besides the batch axis). The same bytes uploaded again answer 200 with the
        first upload's description.
        """
        cap = context().settings.max_upload_bytes
        chunks, filename = _ONNX.body(cap, query.get("filename"))
        try:
            model, created = _files().add(chunks, filename=filename, max_bytes=cap)
        except UploadTooLarge:
            raise _ONNX.too_large(cap) from None
        return model.to_dict(), 201 if created else 200, {"Location": _url(model)}


def _uploaded(digest: str) -> UploadedModel:
    model = _files().find(digest)
    if model is None:
        raise ApiProblem(
            404,
            f"no model with SHA-256 {digest} was uploaded here; POST /api/v1/models uploads one",
        )
    return model


_NOT_FOUND = (404, "No model with this SHA-256 was uploaded")


@blp.route("/models/sha256:<string(length=64):digest>")
class UploadedModelByRef(MethodView):
    @blp.response(200, UploadedModelSchema)
    @_problems(_NOT_FOUND)
    def get(self, digest: str) -> dict[str, Any]:
        """Describe an uploaded model"""
        return _uploaded(digest).to_dict()


@blp.route("/models/sha256:<string(length=64):digest>/file")
class UploadedModelFile(MethodView):
    @blp.response(200, BINARY, content_type=OCTETS, description="The ONNX file")
    @blp.doc(security=SECURITY)
    @_problems(_NOT_FOUND, (401, "No token, or a wrong one"))
    def get(self, digest: str) -> Response:
        """Download an uploaded model

        Needs a token, whatever MLSCOPE_API_READS says: a farm's workers fetch the models they are
        asked to run with it. The ETag is the SHA-256.
        """
        model = _uploaded(digest)
        return send_file(
            _files().path(digest),
            mimetype=OCTETS,
            as_attachment=True,
            download_name=model.filename,
            etag=model.sha256,
            conditional=True,
            max_age=0,
        )
