"""/api/v1/models as a place to put models: upload an ONNX file once (POST /models), name it by the
`sha256:<hex>` reference the answer gives wherever a model is named, describe it
(GET /models/sha256:<hex>) and download it (GET /models/sha256:<hex>/file: a farm's workers do,
with a token).

The file is the body (Content-Type: application/octet-stream; `?filename=` names it), streamed into
the upload directory (`<cache_dir>/uploads`) as it is read, hashed on the way and capped at
MLSCOPE_MAX_UPLOAD_BYTES; or the multipart/form-data field `file` (as `curl -F file=@model.onnx`
sends it, spooled by werkzeug first). A file that is too large, not ONNX, or cut short leaves
nothing behind; a valid one is kept as `<sha256>.onnx`, so uploading the same bytes twice keeps one.
The routes are the ones every upload has (`upload_routes`).
"""

from __future__ import annotations

from marshmallow import fields

from mlscope.api.blueprint import ApiBlueprint
from mlscope.api.upload_routes import UploadDocs, UploadedFileSchema, UploadKind, add_upload_routes
from mlscope.registry.uploads import ModelFiles

__all__ = ["UploadedModelSchema", "blp"]

blp = ApiBlueprint(
    "uploads",
    __name__,
    url_prefix="/api/v1",
    description="Upload an ONNX model once, then name it sha256:<hex> in any request.",
)


class UploadedModelSchema(UploadedFileSchema):
    inputs = fields.List(
        fields.Dict(),
        metadata={"description": "{name, dtype, shape}; a dynamic axis is its symbol (give its size as "
                  "model_options.input_shapes when submitting)"},
    )  # fmt: skip
    outputs = fields.List(fields.String())
    opset = fields.Integer(allow_none=True)


ONNX_UPLOADS = UploadKind(
    what="the ONNX file",
    setting="MLSCOPE_MAX_UPLOAD_BYTES",
    advice="export a smaller model, or raise the setting on the API",
    cap_key="max_upload_bytes",
    resource="models",
    noun="model",
    files=lambda settings: ModelFiles(settings.upload_dir),
)

add_upload_routes(
    blp,
    ONNX_UPLOADS,
    UploadedModelSchema,
    UploadDocs(
        upload="""Upload an ONNX model

        The file is checked as an ONNX graph whose inputs mlscope can feed (a corrupt or truncated
        file is a 422 naming the field `file`) and kept by its SHA-256; the answer's `ref`,
        `sha256:<hex>`, names it as a request's `model` (with `model_options.input_shapes` for
        dynamic axes besides the batch axis). The same bytes uploaded again answer 200 with the
        first upload's description.
        """,
        describe="Describe an uploaded model",
        download="""Download an uploaded model

        Needs a token, whatever MLSCOPE_API_READS says: a farm's workers fetch the models they are
        asked to run with it. The ETag is the SHA-256.
        """,
        file="The ONNX file",
    ),
    endpoints=("ModelUpload", "UploadedModelByRef", "UploadedModelFile"),
)
