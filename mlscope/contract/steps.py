"""The named pre- and post-processing steps a manifest may list, and their numpy implementations.

Each step is a name, a marshmallow schema for its parameters, and a pure function
`fn(value, **params) -> value`. Manifests can name only registered steps, which is what lets a
manifest travel over HTTP without carrying code. Preprocessing steps work on one sample: `decode`
turns encoded image bytes into an HWC uint8 array and the others keep that layout until
`to_layout`. Postprocessing steps work on a model output (any leading batch axes).
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from marshmallow import Schema, ValidationError, fields, post_load, validate, validates_schema

from mlscope.contract.errors import UserError
from mlscope.contract.step_registry import (
    STAGES,
    STEPS,
    StepDefinition,
    get_step,
    numpy_on_first_use,
    register_step,
    steps_for,
)

if TYPE_CHECKING:
    import numpy as np
else:
    np = numpy_on_first_use(globals())

__all__ = [
    "DTYPES",
    "STAGES",
    "STEPS",
    "StepDefinition",
    "apply_steps",
    "get_step",
    "register_step",
    "steps_for",
]

# One list for tensor dtypes and `cast`, so a manifest can cast to anything it can declare.
DTYPES = ("float32", "float16", "bfloat16", "float64", "int64", "int32", "int8", "uint8", "bool")


class NamedStep(Protocol):
    """What `apply_steps` needs of a step: `mlscope.contract.manifest.Step` satisfies it."""

    @property
    def name(self) -> str: ...

    @property
    def params(self) -> Mapping[str, Any]: ...


def apply_steps(steps: Iterable[NamedStep], value: Any) -> Any:
    """Run validated steps in order, each on the previous one's result.

    Args:
        steps: steps whose params were validated by their schema (as a loaded manifest's are).
        value: the first step's input (for example encoded image bytes).

    Returns:
        The last step's result (`value` itself when there are no steps).

    Raises:
        UserError: a step is not registered.
    """
    steps = list(steps)
    if [step.name for step in steps[:2]] == ["decode", "resize"]:
        value, steps = _decode_then_resize(value, steps[0].params, steps[1].params), steps[2:]
    for step in steps:
        value = get_step(step.name).fn(value, **step.params)
    return value


# ---- parameter fields -------------------------------------------------------------------------


class _Size(fields.Field):
    """An int (the shorter side, or a square) or [height, width], each at least 1."""

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> int | list[int]:
        if _is_int(value) and value >= 1:
            return int(value)
        if isinstance(value, list) and len(value) == 2 and all(_is_int(v) and v >= 1 for v in value):
            return [int(v) for v in value]
        raise ValidationError("must be an integer ≥ 1 or a list [height, width] of integers ≥ 1")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class _Number(fields.Float):
    """A finite YAML number; unlike fields.Float it refuses numeric strings such as "0.5"."""

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> float:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise ValidationError("must be a number")
        return float(super()._deserialize(value, attr, data, **kwargs))


def _floats(**kwargs: Any) -> fields.List:
    return fields.List(_Number(), validate=validate.Length(min=1, error="must not be empty"), **kwargs)


def _one_of(choices: Iterable[str]) -> validate.OneOf:
    return validate.OneOf(tuple(choices), error="must be one of {choices}")


# ---- preprocessing ---------------------------------------------------------------------------


def _pil() -> Any:
    try:
        from PIL import Image
    except ImportError as exc:  # pragma: no cover - Pillow ships with torchvision
        raise UserError("image steps need Pillow: pip install pillow") from exc
    return Image


class DecodeParams(Schema):
    color_mode = fields.String(load_default="rgb", validate=_one_of(("rgb", "bgr", "grayscale")))


def _open_image(data: Any, color_mode: str) -> Any:
    image = _pil().open(io.BytesIO(data))
    mode = "L" if color_mode == "grayscale" else "RGB"
    return image if image.mode == mode else image.convert(mode)


def _hwc(image: Any, color_mode: str) -> np.ndarray:
    array = np.asarray(image, dtype=np.uint8)
    if color_mode == "grayscale":
        return array[:, :, np.newaxis]
    return np.ascontiguousarray(array[:, :, ::-1]) if color_mode == "bgr" else array


def decode(data: bytes, color_mode: str = "rgb") -> np.ndarray:
    """Decode encoded image bytes (PNG, JPEG, ...) into an HWC uint8 array.

    Args:
        data: the encoded image.
        color_mode: rgb or bgr (3 channels) or grayscale (1 channel; the array keeps a C axis).

    Returns:
        An array of shape (height, width, channels) and dtype uint8.
    """
    return _hwc(_open_image(data, color_mode), color_mode)


def _decode_then_resize(data: bytes, decoded: Mapping[str, Any], resized: Mapping[str, Any]) -> np.ndarray:
    """`resize(decode(data, ...), ...)` with the Pillow image kept between the two: the same pixels
    (Pillow resizes each channel alone, so channel order commutes), two full-size copies fewer."""
    color_mode = decoded.get("color_mode", "rgb")
    image = _open_image(data, color_mode)
    height, width = _target_size(image.height, image.width, resized["size"])
    method = getattr(_pil().Resampling, resized.get("interpolation", "bilinear").upper())
    return _hwc(image.resize((width, height), method), color_mode)


_INTERPOLATIONS = ("bilinear", "nearest", "bicubic")


class ResizeParams(Schema):
    size = _Size(required=True)
    interpolation = fields.String(load_default="bilinear", validate=_one_of(_INTERPOLATIONS))


def _target_size(height: int, width: int, size: int | list[int]) -> tuple[int, int]:
    if isinstance(size, list):
        return size[0], size[1]
    # Same rounding as torchvision's Resize, so preprocessing matches published accuracy figures.
    if height <= width:
        return size, int(size * width / height)
    return int(size * height / width), size


def resize(image: np.ndarray, size: int | list[int], interpolation: str = "bilinear") -> np.ndarray:
    """Resize an HWC image with Pillow.

    Args:
        image: HWC array; uint8 with 1, 3 or 4 channels is resized as one image, anything else
            channel by channel in 32-bit float and cast back.
        size: an int resizes the shorter side to it and keeps the aspect ratio; [h, w] is exact.
        interpolation: bilinear, nearest or bicubic.

    Returns:
        The resized HWC array, same dtype and channel count.

    Raises:
        ValueError: the image is not a 3-D HWC array.
    """
    if image.ndim != 3:
        raise ValueError(f"resize expects an HWC image; got an array of shape {image.shape}")
    pil = _pil()
    height, width = _target_size(image.shape[0], image.shape[1], size)
    method = getattr(pil.Resampling, interpolation.upper())
    channels = image.shape[2]
    if image.dtype == np.uint8 and channels in (1, 3, 4):
        plane = image[:, :, 0] if channels == 1 else image
        out = np.asarray(pil.fromarray(plane).resize((width, height), method))
        return out[:, :, np.newaxis] if channels == 1 else out
    planes = [
        np.asarray(pil.fromarray(image[:, :, c].astype(np.float32), mode="F").resize((width, height), method))
        for c in range(channels)
    ]
    return np.stack(planes, axis=2).astype(image.dtype)


_POSITIONS = ("center", "top_left")
_RATIO = validate.Range(0, 1, min_inclusive=False, error="must be > 0 and ≤ 1")


class CenterCropParams(Schema):
    """`size` (an int or [h, w]) or `ratio` (of the shorter side, 0 < ratio ≤ 1): exactly one."""

    size = _Size(load_default=None)
    ratio = _Number(load_default=None, validate=_RATIO)

    @validates_schema(skip_on_field_errors=True)
    def _check_size_or_ratio(self, data: dict[str, Any], **kwargs: Any) -> None:
        if (data["size"] is None) == (data["ratio"] is None):
            which = "both are" if data["size"] is not None else "neither is"
            raise ValidationError(
                f"give exactly one of size (pixels) or ratio (of the shorter side); {which} set", "size"
            )

    @post_load
    def _drop_unset(self, data: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        # A manifest's loaded steps are part of its digest: one that names only `size` stays as it was.
        return {key: value for key, value in data.items() if value is not None}


class CropParams(CenterCropParams):
    position = fields.String(load_default="center", validate=_one_of(_POSITIONS))


def _crop_size(image: np.ndarray, size: int | list[int] | None, ratio: float | None) -> tuple[int, int]:
    if ratio is not None:
        side = max(1, round(ratio * min(image.shape[0], image.shape[1])))
        return side, side
    if size is None:
        raise ValueError("a crop needs a size or a ratio")
    return (size, size) if isinstance(size, int) else (size[0], size[1])


def crop(
    image: np.ndarray,
    size: int | list[int] | None = None,
    ratio: float | None = None,
    position: str = "center",
) -> np.ndarray:
    """Cut a window of an HWC image; a side smaller than the window is zero-padded, as torchvision does.

    Args:
        image: HWC array.
        size: an int for a square window, or [h, w]; or None when `ratio` is given.
        ratio: the window is a square of ratio × the shorter side (rounded, at least 1 pixel).
        position: "center" (torchvision's rounding) or "top_left".

    Returns:
        A view of the image (a padded copy when the image is smaller) of shape (h, w, channels).

    Raises:
        ValueError: neither size nor ratio is given, or the position is unknown.
    """
    if position not in _POSITIONS:
        raise ValueError(f"crop position must be one of {', '.join(_POSITIONS)}; got {position!r}")
    crop_h, crop_w = _crop_size(image, size, ratio)
    pad_h, pad_w = max(crop_h - image.shape[0], 0), max(crop_w - image.shape[1], 0)
    if pad_h or pad_w:
        before = (pad_h // 2, pad_w // 2) if position == "center" else (0, 0)
        pads = [(before[0], pad_h - before[0]), (before[1], pad_w - before[1])]
        image = np.pad(image, pads + [(0, 0)] * (image.ndim - 2))
    if position == "top_left":
        return image[:crop_h, :crop_w]
    top, left = round((image.shape[0] - crop_h) / 2.0), round((image.shape[1] - crop_w) / 2.0)
    return image[top : top + crop_h, left : left + crop_w]


def center_crop(
    image: np.ndarray, size: int | list[int] | None = None, ratio: float | None = None
) -> np.ndarray:
    """Cut the centre of an HWC image: `crop` at position "center" (its args, result and padding)."""
    return crop(image, size, ratio, "center")


class NormalizeParams(Schema):
    mean = _floats(required=True)
    std = _floats(required=True)
    scale = _Number(load_default=1.0 / 255.0)

    @validates_schema(skip_on_field_errors=True)
    def _check_lengths_and_zeros(self, data: dict[str, Any], **kwargs: Any) -> None:
        if any(s == 0 for s in data["std"]):
            raise ValidationError("must be non-zero (it divides)", "std")
        if len(data["mean"]) != len(data["std"]):
            raise ValidationError(
                f"must have one value per channel, as mean does ({len(data['mean'])} values)",
                "std",
            )


_PER_CHANNEL_MAX = 8


def normalize(
    image: np.ndarray, mean: list[float], std: list[float], scale: float = 1.0 / 255.0
) -> np.ndarray:
    """Scale, subtract the per-channel mean and divide by the per-channel std: (x·scale − mean) / std.

    Args:
        image: array whose last axis is the channel axis (HWC).
        mean: one value per channel (or one for all).
        std: one non-zero value per channel (or one for all).
        scale: applied first; the default maps uint8 pixels to [0, 1].

    Returns:
        A float32 array of the same shape.

    Raises:
        ValueError: mean/std have neither one value nor one per channel.
    """
    if len(mean) not in (1, image.shape[-1]):
        raise ValueError(
            f"normalize has {len(mean)} mean values for an image with {image.shape[-1]} channels"
        )
    channels = image.shape[-1]
    # x·scale/std − mean/std, one channel at a time into one float32 array: numpy broadcasting a
    # 3-value mean over the last axis runs inner loops of length 3, four times slower.
    factors = np.broadcast_to(np.float64(scale) / np.asarray(std, dtype=np.float64), (channels,))
    offsets = np.broadcast_to(
        np.asarray(mean, dtype=np.float64) / np.asarray(std, dtype=np.float64), (channels,)
    )
    if channels > _PER_CHANNEL_MAX:
        return (image * factors.astype(np.float32) - offsets.astype(np.float32)).astype(np.float32)
    out = np.empty(image.shape, dtype=np.float32)
    for channel in range(channels):
        plane = out[..., channel]
        np.multiply(image[..., channel], np.float32(factors[channel]), out=plane, casting="unsafe")
        plane -= np.float32(offsets[channel])
    return out


# Per-sample axis orders: the batch axis N is added when samples are stacked.
_LAYOUT_AXES = {"NCHW": (2, 0, 1), "NHWC": (0, 1, 2)}


class ToLayoutParams(Schema):
    layout = fields.String(required=True, validate=_one_of(_LAYOUT_AXES))


def to_layout(image: np.ndarray, layout: str) -> np.ndarray:
    """Reorder an HWC sample (or an NHWC batch) into `layout`.

    Returns:
        CHW (or NCHW) for NCHW, the input unchanged for NHWC.

    Raises:
        ValueError: the array is neither 3-D nor 4-D.
    """
    axes = _LAYOUT_AXES[layout]
    if image.ndim == 3:
        return np.ascontiguousarray(np.transpose(image, axes))
    if image.ndim == 4:
        return np.ascontiguousarray(np.transpose(image, (0, *(a + 1 for a in axes))))
    raise ValueError(f"to_layout expects an HWC sample or NHWC batch; got an array of shape {image.shape}")


class CastParams(Schema):
    dtype = fields.String(required=True, validate=_one_of(DTYPES))


def _numpy_dtype(name: str) -> Any:
    if name != "bfloat16":
        return np.dtype(name)
    try:
        import ml_dtypes
    except ImportError as exc:
        raise UserError("casting to bfloat16 needs ml_dtypes: pip install ml_dtypes") from exc
    return ml_dtypes.bfloat16


def cast(array: np.ndarray, dtype: str) -> np.ndarray:
    """Convert to `dtype` (one of DTYPES); bfloat16 needs the ml_dtypes package."""
    return np.asarray(array).astype(_numpy_dtype(dtype))


# ---- postprocessing --------------------------------------------------------------------------


class AxisParams(Schema):
    axis = fields.Integer(load_default=-1, strict=True)


def softmax(logits: np.ndarray, axis: int = -1) -> np.ndarray:
    """Probabilities along `axis`; the max is subtracted first so large logits do not overflow."""
    values = np.asarray(logits, dtype=np.float64 if np.asarray(logits).dtype == np.float64 else np.float32)
    shifted = np.exp(values - values.max(axis=axis, keepdims=True))
    return shifted / shifted.sum(axis=axis, keepdims=True)


class TopKParams(Schema):
    k = fields.Integer(required=True, strict=True, validate=validate.Range(min=1, error="must be ≥ {min}"))


def topk(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k largest scores along the last axis, largest first; ties keep the lower index first.

    Returns:
        (indices, values), each of shape scores.shape[:-1] + (k,).

    Raises:
        ValueError: k is larger than the last axis.
    """
    scores = np.asarray(scores)
    if k > scores.shape[-1]:
        raise ValueError(f"topk k={k} is larger than the {scores.shape[-1]} scores along the last axis")
    indices = np.argsort(-scores, axis=-1, kind="stable")[..., :k]
    return indices, np.take_along_axis(scores, indices, axis=-1)


def argmax(scores: np.ndarray, axis: int = -1) -> np.ndarray:
    """The index of the largest score along `axis`."""
    return np.argmax(np.asarray(scores), axis=axis)


register_step("decode", DecodeParams, decode)
register_step("resize", ResizeParams, resize)
register_step("center_crop", CenterCropParams, center_crop)
register_step("crop", CropParams, crop)
register_step("normalize", NormalizeParams, normalize)
register_step("to_layout", ToLayoutParams, to_layout)
register_step("cast", CastParams, cast)
register_step("softmax", AxisParams, softmax, stage="post")
register_step("topk", TopKParams, topk, stage="post")
register_step("argmax", AxisParams, argmax, stage="post")

# Text steps live in a module of their own (they need the tokenizers package; it registers through
# step_registry, not this module); importing it here registers them wherever steps are, so a
# manifest naming `tokenize` validates everywhere.
from mlscope.contract import text_steps  # noqa: E402, F401 - registers `tokenize`
