"""/api/v1/datasets: upload a dataset once, as a zip of its folder (ImageFolder layout, or images and a
labels file), then name it by the `sha256:<hex>` reference the answer gives as a request's `dataset`;
describe it (GET /datasets/sha256:<hex>) and download it (GET /datasets/sha256:<hex>/file: a farm's
workers do, with a token). The routes are the ones every upload has (`upload_routes`).

The zip is capped at MLSCOPE_MAX_DATASET_BYTES (its members too, uncompressed), opened, and every
image decoded before it is kept as `<sha256>.zip` in `<cache_dir>/dataset-uploads`; a bad one is a
422 naming the member and keeps nothing.
"""

from __future__ import annotations

from marshmallow import fields

from mlscope.api.blueprint import ApiBlueprint
from mlscope.api.upload_routes import UploadDocs, UploadedFileSchema, UploadKind, add_upload_routes
from mlscope.registry.datasets.uploads import DatasetFiles

__all__ = ["UploadedDatasetSchema", "blp"]

blp = ApiBlueprint(
    "datasets",
    __name__,
    url_prefix="/api/v1",
    description="Upload a dataset (a zip of its folder) once, then name it sha256:<hex> as a dataset.",
)


class UploadedDatasetSchema(UploadedFileSchema):
    count = fields.Integer(metadata={"description": "how many images"})
    classes = fields.List(fields.String(), metadata={"description": "class names by label index"})
    layout = fields.String(metadata={"description": "imagefolder, or the labels file's name"})


DATASET_UPLOADS = UploadKind(
    what="the zip of the dataset's folder",
    setting="MLSCOPE_MAX_DATASET_BYTES",
    advice="evaluate on fewer images, or raise the setting on the API",
    cap_key="max_dataset_bytes",
    resource="datasets",
    noun="dataset",
    files=lambda settings: DatasetFiles(settings.dataset_upload_dir),
)

add_upload_routes(
    blp,
    DATASET_UPLOADS,
    UploadedDatasetSchema,
    UploadDocs(
        upload="""Upload a dataset

        The body is a zip of a dataset folder: one sub-folder of images per class, or images with a
        labels.txt/labels.csv (`filename,label` lines). Every image must decode; a zip that is not
        one, a member outside the folder, or an image that does not decode is a 422 naming the field
        `file` and the member. The answer's `ref`, `sha256:<hex>`, names it as a request's `dataset`.
        The same bytes uploaded again answer 200 with the first upload's description.
        """,
        describe="Describe an uploaded dataset",
        download="""Download an uploaded dataset

        Needs a token, whatever MLSCOPE_API_READS says: a farm's workers fetch the datasets they are
        asked to evaluate on with it. The ETag is the SHA-256.
        """,
        file="The zip",
    ),
    endpoints=("DatasetUpload", "UploadedDatasetByRef", "UploadedDatasetFile"),
)
