"""The registered pre/post-processing steps: their numbers, and the registry that manifests check."""

from __future__ import annotations

import io
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
import yaml
from marshmallow import Schema, ValidationError, fields
from PIL import Image

from mlscope.contract.errors import UserError
from mlscope.contract.manifest import ManifestError, Step, load_manifest, parse_manifest
from mlscope.contract.steps import (
    STEPS,
    apply_steps,
    argmax,
    cast,
    center_crop,
    crop,
    decode,
    get_step,
    normalize,
    register_step,
    resize,
    softmax,
    steps_for,
    to_layout,
    topk,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "manifests"


def png_bytes(pixels: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.fixture
def pixels() -> np.ndarray:
    # 2x3 RGB with a distinct value in every channel of every pixel
    return np.arange(18, dtype=np.uint8).reshape(2, 3, 3) * 10


# ---- decode -----------------------------------------------------------------------------------


def test_decode_png_to_hwc_uint8_rgb(pixels: np.ndarray) -> None:
    # Given a PNG made from known pixels
    data = png_bytes(pixels)
    # When it is decoded
    image = decode(data)
    # Then the pixels come back exactly, HWC uint8
    assert image.dtype == np.uint8
    np.testing.assert_array_equal(image, pixels)


def test_decode_bgr_reverses_channels(pixels: np.ndarray) -> None:
    np.testing.assert_array_equal(decode(png_bytes(pixels), color_mode="bgr"), pixels[:, :, ::-1])


def test_decode_grayscale_keeps_a_channel_axis(pixels: np.ndarray) -> None:
    image = decode(png_bytes(pixels), color_mode="grayscale")
    assert image.shape == (2, 3, 1)
    # Pillow's luma: L = R*299/1000 + G*587/1000 + B*114/1000
    r, g, b = (pixels[0, 0].astype(float)).tolist()
    assert abs(int(image[0, 0, 0]) - (r * 0.299 + g * 0.587 + b * 0.114)) <= 1


@pytest.mark.parametrize("fmt", ["PNG", "JPEG"])
def test_decode_colour_order_on_an_encoded_photo(fmt: str) -> None:
    # Given a red-dominant image encoded as PNG or JPEG
    pixels = np.zeros((16, 16, 3), dtype=np.uint8)
    pixels[..., 0], pixels[..., 1], pixels[..., 2] = 200, 90, 10
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format=fmt)
    # When decoded as rgb and as bgr
    rgb, bgr = decode(buffer.getvalue(), "rgb"), decode(buffer.getvalue(), "bgr")
    # Then rgb keeps red first, bgr puts it last, and they are each other's reversal
    assert rgb[..., 0].mean() > 190 and bgr[..., 2].mean() > 190 and bgr[..., 0].mean() < 20
    np.testing.assert_array_equal(bgr, rgb[..., ::-1])
    assert bgr.flags["C_CONTIGUOUS"]


def test_decode_a_grayscale_png_as_rgb_repeats_the_channel() -> None:
    gray = np.arange(64, dtype=np.uint8).reshape(8, 8) * 4
    image = decode(png_bytes(gray), "rgb")
    assert image.shape == (8, 8, 3)
    for channel in range(3):
        np.testing.assert_array_equal(image[..., channel], gray)


@pytest.mark.parametrize("color_mode", ["rgb", "bgr", "grayscale"])
@pytest.mark.parametrize("interpolation", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("fmt", ["PNG", "JPEG"])
def test_decode_then_resize_in_a_pipeline_equals_the_two_steps(
    color_mode: str, interpolation: str, fmt: str
) -> None:
    # Given a photo-like RGB image (apply_steps keeps the Pillow image between decode and resize)
    rng = np.random.default_rng(3)
    pixels = rng.integers(0, 256, size=(37, 53, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format=fmt)
    steps = [
        Step("decode", {"color_mode": color_mode}),
        Step("resize", {"size": 24, "interpolation": interpolation}),
    ]
    # When the pipeline runs, and the steps one by one
    piped = apply_steps(steps, buffer.getvalue())
    separate = resize(decode(buffer.getvalue(), color_mode), 24, interpolation)
    # Then the pixels are the same, to the bit
    assert piped.shape == separate.shape == (24, 34, 1 if color_mode == "grayscale" else 3)
    np.testing.assert_array_equal(piped, separate)


# ---- resize -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("height", "width", "size", "expected"),
    [
        (100, 200, 50, (50, 100)),
        (300, 100, 50, (150, 50)),
        (375, 500, 256, (256, 341)),
        (100, 200, [20, 30], (20, 30)),
    ],
)
def test_resize_shape(height: int, width: int, size: int | list[int], expected: tuple[int, int]) -> None:
    # Given an image of some size
    image = np.zeros((height, width, 3), dtype=np.uint8)
    # When it is resized: an int sets the shorter side and keeps the aspect ratio (torchvision's rounding)
    out = resize(image, size)
    # Then the shape is as expected, channels and dtype kept
    assert out.shape == (*expected, 3)
    assert out.dtype == np.uint8


@pytest.mark.parametrize("interpolation", ["bilinear", "nearest", "bicubic"])
def test_resize_keeps_a_uniform_colour(interpolation: str) -> None:
    image = np.full((40, 60, 3), (10, 120, 250), dtype=np.uint8)
    out = resize(image, 20, interpolation=interpolation)
    assert np.all(out == np.array([10, 120, 250], dtype=np.uint8))


def test_resize_nearest_upscale_repeats_pixels() -> None:
    image = np.array([[[0], [200]]], dtype=np.uint8)  # 1x2, one channel
    out = resize(image, [2, 4], interpolation="nearest")
    np.testing.assert_array_equal(out[:, :, 0], [[0, 0, 200, 200], [0, 0, 200, 200]])


def test_resize_float_image_channel_by_channel() -> None:
    image = np.stack([np.full((8, 8), 0.25), np.full((8, 8), -3.0)], axis=2).astype(np.float32)
    out = resize(image, 4)
    assert out.shape == (4, 4, 2) and out.dtype == np.float32
    np.testing.assert_allclose(out[:, :, 0], 0.25)
    np.testing.assert_allclose(out[:, :, 1], -3.0)


# ---- center_crop ------------------------------------------------------------------------------


def test_center_crop_takes_the_centre() -> None:
    # Given a 10x12 image whose values are their positions
    image = np.arange(10 * 12).reshape(10, 12, 1)
    # When the centre 4x4 is cut
    out = center_crop(image, 4)
    # Then it is rows 3..6 and columns 4..7
    np.testing.assert_array_equal(out, image[3:7, 4:8])


def test_center_crop_rectangle_uses_torchvision_rounding() -> None:
    image = np.arange(5 * 5).reshape(5, 5, 1)
    # (5 - 2) / 2 = 1.5 rounds to 2 (banker's rounding, as torchvision's round)
    np.testing.assert_array_equal(center_crop(image, [2, 3]), image[2:4, 1:4])


def test_center_crop_pads_an_image_smaller_than_the_crop() -> None:
    image = np.ones((2, 2, 3), dtype=np.uint8)
    out = center_crop(image, 4)
    assert out.shape == (4, 4, 3)
    assert out.sum() == 2 * 2 * 3  # the original pixels, surrounded by zeros
    np.testing.assert_array_equal(out[1:3, 1:3], image)


def test_center_crop_by_ratio_takes_a_square_of_the_shorter_side() -> None:
    # Given a 10x12 image whose values are their positions
    image = np.arange(10 * 12).reshape(10, 12, 1)
    # When the centre is cut at ratio 0.5 (of the shorter side, 10)
    out = center_crop(image, ratio=0.5)
    # Then it is the centre 5x5: rows round(2.5)=2..6, columns round(3.5)=4..8
    np.testing.assert_array_equal(out, image[2:7, 4:9])


def test_center_crop_ratio_matches_the_same_size_given_in_pixels() -> None:
    image = np.random.default_rng(1).integers(0, 256, size=(256, 341, 3), dtype=np.uint8)
    # 0.875 x 256 = 224: the usual ImageNet evaluation crop
    np.testing.assert_array_equal(center_crop(image, ratio=0.875), center_crop(image, 224))


def test_crop_top_left_by_size_and_by_ratio() -> None:
    image = np.arange(10 * 12).reshape(10, 12, 1)
    np.testing.assert_array_equal(crop(image, [3, 4], position="top_left"), image[:3, :4])
    np.testing.assert_array_equal(crop(image, ratio=0.3, position="top_left"), image[:3, :3])
    np.testing.assert_array_equal(crop(image, 4), center_crop(image, 4))


def test_crop_top_left_pads_below_and_to_the_right() -> None:
    image = np.ones((2, 3, 1), dtype=np.uint8)
    out = crop(image, 4, position="top_left")
    assert out.shape == (4, 4, 1)
    np.testing.assert_array_equal(out[:2, :3], image)
    assert out.sum() == 6


def test_crop_with_neither_size_nor_ratio_is_an_error() -> None:
    with pytest.raises(ValueError, match="needs a size or a ratio"):
        crop(np.zeros((4, 4, 1)))
    with pytest.raises(ValueError, match="position must be one of center, top_left"):
        crop(np.zeros((4, 4, 1)), 2, position="bottom")


@pytest.mark.parametrize(
    ("step", "params", "field", "message"),
    [
        ("center_crop", {}, "size", "neither is set"),
        ("center_crop", {"size": 4, "ratio": 0.5}, "size", "both are set"),
        ("center_crop", {"ratio": 0}, "ratio", "must be > 0 and ≤ 1"),
        ("crop", {"ratio": "0.5"}, "ratio", "must be a number"),
        ("crop", {"size": 4, "position": "middle"}, "position", "must be one of center, top_left"),
    ],
)
def test_crop_parameters_are_validated_naming_the_field(
    step: str, params: dict[str, object], field: str, message: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        get_step(step).schema.load(params)
    assert message in caught.value.messages[field][0]  # type: ignore[index,call-overload]


def test_crop_params_load_without_unset_keys() -> None:
    # A manifest naming only `size` loads as before (its digest is unchanged)
    assert get_step("center_crop").schema.load({"size": 224}) == {"size": 224}
    assert get_step("crop").schema.load({"ratio": 0.5}) == {"ratio": 0.5, "position": "center"}


# ---- normalize, to_layout, cast -----------------------------------------------------------------


def test_normalize_numbers() -> None:
    # Given one pixel per channel value 0, 51, 255
    image = np.array([[[0, 51, 255]]], dtype=np.uint8)
    # When normalised with per-channel mean/std after the default 1/255 scale
    out = normalize(image, mean=[0.5, 0.2, 1.0], std=[0.5, 0.1, 2.0])
    # Then each channel is (x/255 - mean) / std
    np.testing.assert_allclose(out[0, 0], [(0 - 0.5) / 0.5, (0.2 - 0.2) / 0.1, (1.0 - 1.0) / 2.0], atol=1e-6)
    assert out.dtype == np.float32


def test_normalize_with_explicit_scale_and_shared_mean() -> None:
    out = normalize(np.array([[[2.0, 4.0]]]), mean=[1.0], std=[2.0], scale=1.0)
    np.testing.assert_allclose(out[0, 0], [0.5, 1.5])


def test_normalize_rejects_mean_of_the_wrong_length() -> None:
    with pytest.raises(ValueError, match="2 mean values for an image with 3 channels"):
        normalize(np.zeros((1, 1, 3)), mean=[0.1, 0.2], std=[1.0, 1.0])


def test_to_layout_nchw_transposes_hwc_to_chw() -> None:
    image = np.arange(2 * 3 * 4).reshape(2, 3, 4)  # H=2, W=3, C=4
    out = to_layout(image, "NCHW")
    assert out.shape == (4, 2, 3)
    assert out[3, 1, 2] == image[1, 2, 3]
    np.testing.assert_array_equal(to_layout(image, "NHWC"), image)


def test_to_layout_on_a_batch() -> None:
    batch = np.arange(2 * 2 * 3 * 4).reshape(2, 2, 3, 4)
    out = to_layout(batch, "NCHW")
    assert out.shape == (2, 4, 2, 3)
    assert out[1, 3, 1, 2] == batch[1, 1, 2, 3]


def test_cast() -> None:
    out = cast(np.array([1.7, -2.2]), "int64")
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out, [1, -2])


# ---- postprocessing ---------------------------------------------------------------------------


def test_softmax_sums_to_one_and_keeps_order() -> None:
    logits = np.array([[1.0, 2.0, 3.0], [1000.0, 1000.0, -1000.0]], dtype=np.float32)
    probabilities = softmax(logits)
    np.testing.assert_allclose(probabilities.sum(axis=-1), 1.0, rtol=1e-6)
    assert np.all(np.isfinite(probabilities))  # large logits do not overflow
    assert probabilities[0, 0] < probabilities[0, 1] < probabilities[0, 2]
    np.testing.assert_allclose(probabilities[1], [0.5, 0.5, 0.0], atol=1e-6)


def test_softmax_along_another_axis() -> None:
    np.testing.assert_allclose(softmax(np.ones((3, 2)), axis=0).sum(axis=0), [1.0, 1.0])


def test_topk_returns_largest_first_with_indices() -> None:
    scores = np.array([[0.1, 0.5, 0.2, 0.5, 0.05]])
    indices, values = topk(scores, k=3)
    # ties keep the lower index first
    np.testing.assert_array_equal(indices, [[1, 3, 2]])
    np.testing.assert_allclose(values, [[0.5, 0.5, 0.2]])


def test_topk_larger_than_the_scores_is_an_error() -> None:
    with pytest.raises(ValueError, match="k=6 is larger than the 5 scores"):
        topk(np.zeros(5), k=6)


def test_argmax() -> None:
    np.testing.assert_array_equal(argmax(np.array([[0.1, 0.9], [0.7, 0.3]])), [1, 0])


# ---- the registry and pipelines ----------------------------------------------------------------


def test_stages_list_exactly_the_implemented_steps() -> None:
    assert steps_for("pre") == [
        "cast", "center_crop", "crop", "decode", "normalize", "resize", "to_layout", "tokenize",
    ]  # fmt: skip
    assert steps_for("post") == ["argmax", "softmax", "topk"]


def test_get_unknown_step_lists_the_known_ones() -> None:
    with pytest.raises(UserError, match="unknown step 'detokenize'; known steps: argmax, cast, center_crop"):
        get_step("detokenize")


def test_registering_a_name_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="'softmax' is already registered"):
        register_step("softmax", Schema.from_dict({}), lambda x: x, stage="post")


def test_a_registered_step_becomes_valid_in_manifests() -> None:
    # Given a manifest using a postprocessing step that does not exist yet
    document = yaml.safe_load((DATA / "valid.yaml").read_text())
    document["outputs"][0]["steps"] = [{"threshold": {"at": 0.5}}]
    with pytest.raises(ManifestError, match="unknown postprocessing step 'threshold'"):
        parse_manifest(document, "doc")
    # When the step is registered with a schema for its parameters
    params = Schema.from_dict({"at": fields.Float(required=True)})
    register_step("threshold", params, lambda x, at: np.asarray(x) > at, stage="post")
    try:
        manifest = parse_manifest(document, "doc")
        # Then the manifest validates and the step runs
        assert manifest.outputs[0].steps == (Step("threshold", {"at": 0.5}),)
        np.testing.assert_array_equal(apply_steps(manifest.outputs[0].steps, [0.2, 0.7]), [False, True])
    finally:
        del STEPS["threshold"]


def test_resnet_preprocessing_pipeline_end_to_end() -> None:
    # Given the shipped ResNet-18 manifest and a 300x400 photo-sized PNG
    path = Path(str(resources.files("mlscope.manifests"))) / "pytorch" / "resnet18.yaml"
    manifest = load_manifest(path)
    rng = np.random.default_rng(0)
    data = png_bytes(rng.integers(0, 256, size=(300, 400, 3), dtype=np.uint8))
    # When its input steps run on the bytes
    tensor = apply_steps(manifest.inputs[0].steps, data)
    # Then the result has the declared per-sample shape and dtype, and ImageNet-normalised values
    assert tensor.shape == manifest.inputs[0].shape
    assert tensor.dtype == np.dtype(manifest.inputs[0].dtype)
    assert tensor.min() > -2.2 and tensor.max() < 2.7
    # And its output steps turn logits into the 5 best classes
    indices, values = apply_steps(manifest.outputs[0].steps, rng.normal(size=(2, 1000)))
    assert indices.shape == values.shape == (2, 5)
    assert np.all(np.diff(values, axis=-1) <= 0)
