"""/api/v1/datasets: upload a dataset once, as a zip of its folder (ImageFolder layout, or images and a
labels file), then name it by the `sha256:<hex>` reference the answer gives as a request's `dataset`;
describe it (GET /datasets/sha256:<hex>) and download it (GET /datasets/sha256:<hex>/file: a farm's
workers do, with a token), as /api/v1/models does for ONNX files (`upload_body` is what both share).

The zip is capped at MLSCOPE_MAX_DATASET_BYTES (its members too, uncompressed), opened, and every
image decoded before it is kept as `<sha256>.zip` in `<cache_dir>/dataset-uploads`; a bad one is a
422 naming the member and keeps nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flask import Response, send_file, url_for
from flask.views import MethodView
from marshmallow import Schema, fields, validate

from mlscope.registry.datasets.uploads import DatasetFiles, UploadedDataset
from mlscope.registry.uploads import UploadTooLarge

from .blueprint import ApiBlueprint
from .context import context
from .problems import ApiProblem
from .upload_body import BINARY, OCTETS, SECURITY, F, UploadKind, document_problems, request_body_doc

__all__ = ["DatasetQuerySchema", "UploadedDatasetSchema", "blp"]

blp = ApiBlueprint(
    "datasets",
    __name__,
    url_prefix="/api/v1",
    description="Upload a dataset (a zip of its folder) once, then name it sha256:<hex> as a dataset.",
)

_ZIP = UploadKind(
    what="the zip of the dataset's folder",
    setting="MLSCOPE_MAX_DATASET_BYTES",
    advice="evaluate on fewer images, or raise the setting on the API",
    cap_key="max_dataset_bytes",
)


class DatasetQuerySchema(Schema):
    filename = fields.String(
        validate=validate.Length(min=1, max=200),
        metadata={"description": "what the zip is called (the dataset's name is its stem)"},
    )


class UploadedDatasetSchema(Schema):
    ref = fields.String(metadata={"description": "sha256:<hex>: name the dataset by it in any request"})
    sha256 = fields.String()
    size = fields.Integer(metadata={"description": "the zip's bytes"})
    filename = fields.String(metadata={"description": "the name it was first uploaded under"})
    name = fields.String(metadata={"description": "the file name's stem"})
    uploaded_at = fields.String(metadata={"description": "when it was first uploaded (ISO 8601, UTC)"})
    count = fields.Integer(metadata={"description": "how many images"})
    classes = fields.List(fields.String(), metadata={"description": "class names by label index"})
    layout = fields.String(metadata={"description": "imagefolder, or the labels file's name"})


def _problems(*answers: tuple[int, str]) -> Callable[[F], F]:
    return document_problems(blp, *answers)


def _files() -> DatasetFiles:
    return DatasetFiles(context().settings.dataset_upload_dir)


def _uploaded(digest: str) -> UploadedDataset:
    dataset = _files().find(digest)
    if dataset is None:
        raise ApiProblem(
            404, f"no dataset with SHA-256 {digest} was uploaded here; POST /api/v1/datasets uploads one"
        )
    return dataset


_NOT_FOUND = (404, "No dataset with this SHA-256 was uploaded")


@blp.route("/datasets")
class DatasetUpload(MethodView):
    @blp.arguments(DatasetQuerySchema, location="query")
    @blp.doc(requestBody=request_body_doc("the zip of the dataset's folder"), security=SECURITY)
    @blp.response(
        201,
        UploadedDatasetSchema,
        description="Uploaded",
        headers={"Location": {"description": "the dataset's URL", "schema": {"type": "string"}}},
    )
    @blp.alt_response(
        200, schema=UploadedDatasetSchema, description="These bytes were uploaded before: the same answer"
    )
    @_problems(
        (413, "Larger than MLSCOPE_MAX_DATASET_BYTES (the problem's max_dataset_bytes); nothing is kept"),
        (415, "Neither an application/octet-stream body nor a multipart field `file`"),
        (403, "Writes are disabled (no tokens configured)"),
        (401, "No token, or a wrong one"),
    )
    def post(self, query: dict[str, Any]) -> tuple[dict[str, Any], int, dict[str, str]]:
        """Upload a dataset

        The body is a zip of a dataset folder: one sub-folder of images per class, or images with a
        labels.txt/labels.csv (`filename,label` lines). Every image must decode; a zip that is not
        one, a member outside the folder, or an image that does not decode is a 422 naming the field
        `file` and the member. The answer's `ref`, `sha256:<hex>`, names it as a request's `dataset`.
        The same bytes uploaded again answer 200 with the first upload's description.
        """
        cap = context().settings.max_dataset_bytes
        chunks, filename = _ZIP.body(cap, query.get("filename"))
        try:
            dataset, created = _files().add(chunks, filename=filename, max_bytes=cap)
        except UploadTooLarge:
            raise _ZIP.too_large(cap) from None
        url = url_for("datasets.UploadedDatasetByRef", digest=dataset.sha256)
        return dataset.to_dict(), 201 if created else 200, {"Location": url}


@blp.route("/datasets/sha256:<string(length=64):digest>")
class UploadedDatasetByRef(MethodView):
    @blp.response(200, UploadedDatasetSchema)
    @_problems(_NOT_FOUND)
    def get(self, digest: str) -> dict[str, Any]:
        """Describe an uploaded dataset"""
        return _uploaded(digest).to_dict()


@blp.route("/datasets/sha256:<string(length=64):digest>/file")
class UploadedDatasetFile(MethodView):
    @blp.response(200, BINARY, content_type=OCTETS, description="The zip")
    @blp.doc(security=SECURITY)
    @_problems(_NOT_FOUND, (401, "No token, or a wrong one"))
    def get(self, digest: str) -> Response:
        """Download an uploaded dataset

        Needs a token, whatever MLSCOPE_API_READS says: a farm's workers fetch the datasets they are
        asked to evaluate on with it. The ETag is the SHA-256.
        """
        dataset = _uploaded(digest)
        return send_file(
            _files().path(digest),
            mimetype=OCTETS,
            as_attachment=True,
            download_name=dataset.filename,
            etag=dataset.sha256,
            conditional=True,
            max_age=0,
        )
