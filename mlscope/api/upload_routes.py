"""The routes every kind of upload has (ONNX models at /models, dataset zips at /datasets), made by
`add_upload_routes` for one `UploadKind`: POST /<resource> (the body read as a stream of chunks, the
raw body or the multipart field `file`, capped before werkzeug buffers it; 413 naming the cap and its
setting), GET /<resource>/sha256:<hex> (the description; 404 for an unknown digest) and
GET /<resource>/sha256:<hex>/file (the download, its SHA-256 the ETag), documented with their
problem answers in the OpenAPI document.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, Any, TypeVar

from flask import Response, request, send_file, url_for
from flask.views import MethodView
from marshmallow import Schema, fields, validate

from mlscope.api.blueprint import ApiBlueprint
from mlscope.api.context import context
from mlscope.api.problems import PROBLEM_MIMETYPE, ApiProblem, ProblemSchema
from mlscope.contract.settings import Settings
from mlscope.registry.uploads import UploadedFile, UploadedFiles, UploadTooLarge

__all__ = ["OCTETS", "UploadKind", "UploadQuerySchema", "UploadedFileSchema", "add_upload_routes"]

F = TypeVar("F", bound=Callable[..., Any])
_CHUNK = 1 << 20
# What a multipart body may add around the file (boundaries, part headers, a filename).
_MULTIPART_SLACK = 64 * 1024
OCTETS = "application/octet-stream"
MULTIPART = "multipart/form-data"
SECURITY: list[dict[str, list[str]]] = [{"bearerAuth": []}]
BINARY = {"type": "string", "format": "binary"}


def document_problems(blp: ApiBlueprint, *answers: tuple[int, str]) -> Callable[[F], F]:
    """Document problem answers (status, description) of a view of `blp`."""

    def document(view: F) -> F:
        for status, description in answers:
            view = blp.alt_response(
                status, schema=ProblemSchema, content_type=PROBLEM_MIMETYPE, description=description
            )(view)
        return view

    return document


def request_body_doc(what: str) -> dict[str, Any]:
    """The OpenAPI requestBody of an upload of `what` ("the ONNX file")."""
    return {
        "required": True,
        "description": f"{what}: the raw body, or the multipart field `file`",
        "content": {
            OCTETS: {"schema": BINARY},
            MULTIPART: {"schema": {"type": "object", "properties": {"file": BINARY}}},
        },
    }


class UploadQuerySchema(Schema):
    filename = fields.String(
        validate=validate.Length(min=1, max=200),
        metadata={"description": "what the file is called (its name in results is the stem)"},
    )


class UploadedFileSchema(Schema):
    ref = fields.String(metadata={"description": "sha256:<hex>: name it by it in any request"})
    sha256 = fields.String()
    size = fields.Integer(metadata={"description": "bytes"})
    filename = fields.String(metadata={"description": "the name it was first uploaded under"})
    name = fields.String(metadata={"description": "its name in results (the file name's stem)"})
    uploaded_at = fields.String(metadata={"description": "when it was first uploaded (ISO 8601, UTC)"})


def _chunks(stream: IO[bytes]) -> Iterator[bytes]:
    return iter(lambda: stream.read(_CHUNK), b"")


@dataclass(frozen=True)
class UploadKind:
    """What one upload endpoint takes.

    Attributes:
        what: how messages name the file ("the ONNX file").
        setting: the setting that caps it (MLSCOPE_MAX_UPLOAD_BYTES).
        advice: what to do about a file over the cap.
        cap_key: the 413 problem's key giving the cap, and the Settings field (max_upload_bytes).
        resource: the path under /api/v1 ("models").
        noun: what one is called ("model").
        files: the directory the API keeps them in, from the settings.
    """

    what: str
    setting: str
    advice: str
    cap_key: str
    resource: str
    noun: str
    files: Callable[[Settings], UploadedFiles[Any]]

    @property
    def upload_problems(self) -> tuple[tuple[int, str], ...]:
        """The problems a POST may answer, for `document_problems`."""
        return (
            (413, f"Larger than {self.setting} (the problem's {self.cap_key}); nothing is kept"),
            (415, "Neither an application/octet-stream body nor a multipart field `file`"),
            (403, "Writes are disabled (no tokens configured)"),
            (401, "No token, or a wrong one"),
        )

    def receive(self, files: UploadedFiles[Any], cap: int, filename: str | None) -> tuple[UploadedFile, bool]:
        """Read the request's file into `files` (whose `add` checks it): (its description, whether new).

        Raises:
            ApiProblem: as `body`, and 413 when more than `cap` bytes arrive.
            UserError: the file is not one `files` keeps (field `file`).
        """
        chunks, name = self.body(cap, filename)
        try:
            described, created = files.add(chunks, filename=name, max_bytes=cap)
        except UploadTooLarge:
            raise self.too_large(cap) from None
        return described, created

    def find(self, files: UploadedFiles[Any], digest: str) -> Any:
        """The description of the upload with this SHA-256.

        Raises:
            ApiProblem: 404, none was uploaded.
        """
        described = files.find(digest)
        if described is None:
            raise ApiProblem(
                404,
                f"no {self.noun} with SHA-256 {digest} was uploaded here; POST /api/v1/{self.resource} "
                "uploads one",
            )
        return described

    def download(self, files: UploadedFiles[Any], digest: str) -> Response:
        """The uploaded file as an attachment, its SHA-256 the ETag (404 when none was uploaded)."""
        described = self.find(files, digest)
        return send_file(
            files.path(digest),
            mimetype=OCTETS,
            as_attachment=True,
            download_name=described.filename,
            etag=described.sha256,
            conditional=True,
            max_age=0,
        )

    def too_large(self, cap: int) -> ApiProblem:
        """The 413 answer to a file over `cap` bytes."""
        message = (
            f"the file is larger than {cap} bytes, the most this API accepts ({self.setting}); {self.advice}"
        )
        extra: dict[str, Any] = {self.cap_key: cap}
        return ApiProblem(413, f"file: {message}", errors={"file": [message]}, **extra)

    def body(self, cap: int, filename: str | None) -> tuple[Iterator[bytes], str | None]:
        """The uploaded file's bytes as they are read, and its name.

        Raises:
            ApiProblem: 413 over the cap, 422 a multipart body without `file`, 415 another body.
        """
        length = request.content_length
        if request.mimetype == OCTETS:
            if length is not None and length > cap:
                raise self.too_large(cap)
            # One byte past the cap is read, so the upload's own count says "too large", not werkzeug's.
            request.max_content_length = cap + 1
            return _chunks(request.stream), filename
        if request.mimetype == MULTIPART:
            if length is not None and length > cap + _MULTIPART_SLACK:
                raise self.too_large(cap)
            request.max_content_length = cap + _MULTIPART_SLACK
            part = request.files.get("file")
            if part is None:
                raise ApiProblem.for_field(
                    422, "file", f"missing: send {self.what} as the multipart field `file`, or as the body"
                )
            return _chunks(part.stream), filename or part.filename
        raise ApiProblem.for_field(
            415,
            "file",
            f"send {self.what} as the body with Content-Type: {OCTETS} (or as the {MULTIPART} field "
            f"`file`), not {request.mimetype or 'no content type'}",
        )


_SAME_BYTES = "These bytes were uploaded before: the same answer"


@dataclass(frozen=True)
class UploadDocs:
    """The words of one kind's routes in the OpenAPI document (a summary line, then a description)."""

    upload: str
    describe: str
    download: str
    file: str


def add_upload_routes(
    blp: ApiBlueprint,
    kind: UploadKind,
    schema: type[Schema],
    docs: UploadDocs,
    *,
    endpoints: tuple[str, str, str],
) -> None:
    """Add the upload, describe and download routes of `kind` to `blp`.

    Args:
        blp: the blueprint (its url_prefix is /api/v1).
        kind: what is uploaded.
        schema: the description's schema (an `UploadedFileSchema`).
        docs: the routes' docstrings.
        endpoints: the names of the upload, describe and download endpoints (auth names them).
    """
    upload_name, describe_name, download_name = endpoints

    def post(self: MethodView, query: dict[str, Any]) -> tuple[dict[str, Any], int, dict[str, str]]:
        settings = context().settings
        described, created = kind.receive(
            kind.files(settings), getattr(settings, kind.cap_key), query.get("filename")
        )
        location = url_for(f"{blp.name}.{describe_name}", digest=described.sha256)
        return described.to_dict(), 201 if created else 200, {"Location": location}

    def describe(self: MethodView, digest: str) -> dict[str, Any]:
        return dict(kind.find(kind.files(context().settings), digest).to_dict())

    def download(self: MethodView, digest: str) -> Response:
        return kind.download(kind.files(context().settings), digest)

    post.__doc__, describe.__doc__, download.__doc__ = docs.upload, docs.describe, docs.download
    not_found = (404, f"No {kind.noun} with this SHA-256 was uploaded")
    # The decorators a `def` would carry, innermost first.
    upload_view: Any = document_problems(blp, *kind.upload_problems)(post)
    upload_view = blp.alt_response(200, schema=schema, description=_SAME_BYTES)(upload_view)
    location = {"description": f"the {kind.noun}'s URL", "schema": {"type": "string"}}
    upload_view = blp.response(201, schema, description="Uploaded", headers={"Location": location})(
        upload_view
    )
    upload_view = blp.doc(requestBody=request_body_doc(kind.what), security=SECURITY)(upload_view)
    upload_view = blp.arguments(UploadQuerySchema, location="query")(upload_view)
    describe_view = blp.response(200, schema)(document_problems(blp, not_found)(describe))
    download_view: Any = document_problems(blp, not_found, (401, "No token, or a wrong one"))(download)
    download_view = blp.doc(security=SECURITY)(download_view)
    download_view = blp.response(200, BINARY, content_type=OCTETS, description=docs.file)(download_view)
    prefix = f"/{kind.resource}/sha256:<string(length=64):digest>"
    for rule, name, method, view in (
        (f"/{kind.resource}", upload_name, "post", upload_view),
        (prefix, describe_name, "get", describe_view),
        (f"{prefix}/file", download_name, "get", download_view),
    ):
        blp.route(rule, endpoint=name)(type(name, (MethodView,), {method: view}))
