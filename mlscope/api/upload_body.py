"""What every file upload to the API shares (ONNX models at /models, dataset zips at /datasets): the
body read as a stream of chunks, either the raw body (application/octet-stream) or the multipart field
`file`, capped before werkzeug buffers it; the 413 problem naming the cap and its setting; and the
problem answers documented in the OpenAPI document.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, Any, TypeVar

from flask import request

from .blueprint import ApiBlueprint
from .problems import PROBLEM_MIMETYPE, ApiProblem, ProblemSchema

__all__ = [
    "BINARY",
    "MULTIPART",
    "OCTETS",
    "SECURITY",
    "F",
    "UploadKind",
    "document_problems",
    "request_body_doc",
]

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


def _chunks(stream: IO[bytes]) -> Iterator[bytes]:
    return iter(lambda: stream.read(_CHUNK), b"")


@dataclass(frozen=True)
class UploadKind:
    """What one upload endpoint takes.

    Attributes:
        what: how messages name the file ("the ONNX file").
        setting: the setting that caps it (MLSCOPE_MAX_UPLOAD_BYTES).
        advice: what to do about a file over the cap.
        cap_key: the 413 problem's key giving the cap (max_upload_bytes).
    """

    what: str
    setting: str
    advice: str
    cap_key: str

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
