"""The files the dashboard's and the Swagger page's browsers load, all served by this process: plotly.js
(the basic bundle vendored from npm at build time by ops/dashboard/vendor.sh, or else the full bundle
of the installed `plotly` package), Swagger UI from the installed `swagger_ui_bundle` package, and
our own CSS and JavaScript (the blueprint's static folder). Nothing is fetched from a CDN, so the
pages work on a farm with no way out to the internet.

The basic bundle holds every trace type the dashboard draws (scatter and bar, with error bars, a
second axis and annotations) at a quarter of the full plotly.min.js's size, and a browser on a slow
core compiles it in a fraction of the full bundle's time before any chart is drawn. Either is read once,
gzip-compressed once and kept in memory, and sent with a long cache lifetime under a URL that names
its content, so a browser downloads it once per bundle.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib
import mimetypes
import threading
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from flask import Blueprint, Response, abort, request, send_from_directory

__all__ = ["ASSETS", "PLOTLY_JS_URL", "SWAGGER_UI_URL", "VendoredFile", "plotly_js", "plotly_js_url"]

PLOTLY_JS_URL = "/static/vendor/plotly.min.js"
# Where the Swagger page (flask-smorest's, at /api/docs) loads swagger-ui's files from.
SWAGGER_UI_URL = "/api/docs/assets/"
# A year: the URL changes with the version, so a cached copy is never stale.
_IMMUTABLE = "public, max-age=31536000, immutable"
_SWAGGER_FILES = frozenset(
    {
        "swagger-ui.css",
        "swagger-ui-bundle.js",
        "swagger-ui-standalone-preset.js",
        "favicon-16x16.png",
        "favicon-32x32.png",
    }
)

# Our own CSS and script are this blueprint's static files (dashboard/static), at /static/<name>.
ASSETS = Blueprint("dashboard_assets", __name__, static_folder="static", static_url_path="/static")


@dataclass(frozen=True)
class VendoredFile:
    """A file served from memory: its bytes, their gzip form and an ETag."""

    body: bytes
    gzipped: bytes
    etag: str
    mimetype: str

    @classmethod
    def of(cls, body: bytes, mimetype: str) -> VendoredFile:
        digest = hashlib.sha256(body).hexdigest()[:32]
        return cls(body, gzip.compress(body, compresslevel=6, mtime=0), digest, mimetype)

    def response(self) -> Response:
        """The file for this request: gzip when the client accepts it, 304 when its copy is current."""
        if self.etag in request.if_none_match:
            response = Response(status=304)
        elif "gzip" in request.accept_encodings:
            response = Response(self.gzipped, mimetype=self.mimetype)
            response.headers["Content-Encoding"] = "gzip"
        else:
            response = Response(self.body, mimetype=self.mimetype)
        response.headers["Vary"] = "Accept-Encoding"
        response.headers["Cache-Control"] = _IMMUTABLE
        response.set_etag(self.etag)
        return response


_plotly: VendoredFile | None = None
_plotly_lock = threading.Lock()


def _vendored_basic_bundle() -> bytes | None:
    """plotly.js's basic bundle as ops/dashboard/vendor.sh left it in the package, or None."""
    bundle = resources.files(__package__) / "static" / "vendor" / "plotly-basic.min.js"
    return bundle.read_bytes() if bundle.is_file() else None


def plotly_js() -> VendoredFile:
    """The plotly.js bundle the dashboard serves, read and compressed on first use: the vendored basic
    bundle when there is one, else the installed plotly package's full plotly.min.js.

    Raises:
        FileNotFoundError: neither is here (pip install 'mlscope[farm]').
    """
    global _plotly
    with _plotly_lock:
        if _plotly is None:
            body = _vendored_basic_bundle()
            if body is None:
                try:
                    body = (resources.files("plotly") / "package_data" / "plotly.min.js").read_bytes()
                except ModuleNotFoundError:
                    raise FileNotFoundError(
                        "plotly is not installed: the dashboard's charts need pip install 'mlscope[farm]'"
                    ) from None
            _plotly = VendoredFile.of(body, "text/javascript")
        return _plotly


def plotly_js_url() -> str:
    """The script's URL, naming its content (so a cached copy is never stale); the bare URL when there
    is no plotly.js (the pages then draw no charts, and say so)."""
    try:
        return f"{PLOTLY_JS_URL}?v={plotly_js().etag[:16]}"
    except FileNotFoundError:
        return PLOTLY_JS_URL


@ASSETS.route(PLOTLY_JS_URL)
def plotly_script() -> Response:
    try:
        return plotly_js().response()
    except FileNotFoundError:
        abort(404)


@ASSETS.route("/favicon.ico")
def favicon() -> Response:
    """No icon (browsers ask for one on pages that name none, such as the Swagger page): an empty answer
    they keep for a day, rather than a 404 in their console."""
    response = Response(status=204)
    response.headers["Cache-Control"] = "public, max-age=86400"
    return response


def _swagger_ui_dir() -> Path | None:
    # swagger_ui_bundle ships no type information: its one attribute is read by name.
    try:
        bundle = importlib.import_module("swagger_ui_bundle")
    except ImportError:
        return None
    return Path(str(bundle.swagger_ui_path))


@ASSETS.route(f"{SWAGGER_UI_URL}<string:filename>")
def swagger_ui_file(filename: str) -> Response:
    """One of swagger-ui's files, from the installed swagger_ui_bundle (only the few the page loads)."""
    folder = _swagger_ui_dir()
    if folder is None or filename not in _SWAGGER_FILES:
        abort(404)
    response = send_from_directory(
        folder, filename, mimetype=mimetypes.guess_type(filename)[0], max_age=86400
    )
    return response
