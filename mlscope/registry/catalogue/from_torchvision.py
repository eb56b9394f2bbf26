"""The torchvision part of the catalogue, read from the installed torchvision's model builders.

Every builder `torchvision.models.list_models(module=...)` names in the groups below becomes one
entry; its input size comes from the builder's published weights (their preprocessing recipe), its
family from the module that defines it. Imported by `generate` only: it imports torchvision.

Left out, on purpose:
- optical flow (`raft_large`, `raft_small`): the model takes two frames (two input tensors) and
  returns a list of flow fields, one per refinement iteration; the catalogue's torchvision entries
  are models called with one batched tensor.
- quantization (`quantized_*`): a manifest's source names a builder, which is called with
  `weights=None` and no `quantize=True`, so these would build the float "quantizable" twin of a
  classification model already in the catalogue: a duplicate, not an int8 model.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["GROUPS", "torchvision_entries", "torchvision_version"]

# group: (torchvision.models sub-module, task, layout)
GROUPS: dict[str, tuple[str, str, str]] = {
    "classification": ("", "image_classification", "NCHW"),
    "segmentation": ("segmentation", "semantic_segmentation", "NCHW"),
    "detection": ("detection", "object_detection", "NCHW"),
    # The manifest has no video task: "other" is the closest.
    "video": ("video", "other", "NCTHW"),
}

# What each detection head returns per image (eval mode), in the order of its dict.
_DETECTION_OUTPUTS = {
    "faster_rcnn": ("boxes", "labels", "scores"),
    "mask_rcnn": ("boxes", "labels", "scores", "masks"),
    "keypoint_rcnn": ("boxes", "labels", "scores", "keypoints", "keypoints_scores"),
    "retinanet": ("boxes", "scores", "labels"),
    "fcos": ("boxes", "scores", "labels"),
    "ssd": ("boxes", "scores", "labels"),
    "ssdlite": ("boxes", "scores", "labels"),
}
# Detection weights publish no input size: the model resizes every image itself, to 800 pixels on the
# shorter side unless its builder says otherwise (these three do).
_DETECTION_SIZE = 800
_DETECTION_SIZES = {
    "fasterrcnn_mobilenet_v3_large_320_fpn": 320,
    "ssd300_vgg16": 300,
    "ssdlite320_mobilenet_v3_large": 320,
}
_VIDEO_FRAMES = 16
_DEFAULT_SIZE = 224

# Module names that are not what people call the family.
_FAMILY_NAMES = {
    "vision_transformer": "vit",
    "swin_transformer": "swin",
    "mobilenetv2": "mobilenet_v2",
    "mobilenetv3": "mobilenet_v3",
    "shufflenetv2": "shufflenet_v2",
}


def torchvision_version() -> str:
    import torchvision

    return str(torchvision.__version__).split("+")[0]


def _recipe(name: str) -> Any | None:
    """The builder's weights whose preprocessing matches `weights=None`: the smallest crop.

    Some builders also publish weights for a larger input (ViT's and RegNet's SWAG weights, at 384
    or 518 pixels) that set the architecture's image size when they are loaded; built without
    weights, the model takes the smallest published size. Ties go to the first listed (V1).
    """
    from torchvision.models import get_model_weights

    try:
        weights = list(get_model_weights(name))
    except (ValueError, KeyError):
        return None
    sized = [w for w in weights if getattr(w.transforms(), "crop_size", None)]
    return min(sized, key=lambda w: w.transforms().crop_size[0]) if sized else (weights or [None])[0]


def _interpolation(transform: Any) -> str:
    return str(getattr(transform.interpolation, "value", transform.interpolation)).lower()


def _classification_io(name: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    weights = _recipe(name)
    if weights is None:
        shape, steps = [3, _DEFAULT_SIZE, _DEFAULT_SIZE], []
    else:
        transform = weights.transforms()
        crop, resize = int(transform.crop_size[0]), int(transform.resize_size[0])
        shape = [3, crop, crop]
        steps = [
            {"decode": {"color_mode": "rgb"}},
            {"resize": {"size": resize, "interpolation": _interpolation(transform)}},
            {"center_crop": {"size": crop}},
            {"normalize": {"mean": list(transform.mean), "std": list(transform.std)}},
            {"to_layout": {"layout": "NCHW"}},
        ]
    image: dict[str, Any] = {"name": "input", "shape": shape, "dtype": "float32", "layout": "NCHW"}
    if steps:
        image["steps"] = steps
    return [image], [{"name": "logits", "steps": ["softmax", {"topk": {"k": 5}}]}]


def _segmentation_shape(name: str) -> list[int]:
    weights = _recipe(name)
    size = _DEFAULT_SIZE
    if weights is not None and getattr(weights.transforms(), "resize_size", None):
        size = int(weights.transforms().resize_size[0])
    return [3, size, size]


def _video_shape(name: str) -> list[int]:
    weights = _recipe(name)
    size, frames = _DEFAULT_SIZE, _VIDEO_FRAMES
    if weights is not None:
        size = int(weights.transforms().crop_size[0])
        frames = max(frames, int(weights.meta.get("min_temporal_size", 0)))
    return [3, frames, size, size]


def _family(name: str, group: str, classification_families: set[str]) -> str:
    from torchvision.models import get_model_builder

    module = get_model_builder(name).__module__.rsplit(".", 1)[-1]
    family = _FAMILY_NAMES.get(module, module)
    if group != "classification" and family in classification_families:
        return f"{group}_{family}"  # video's resnet and swin are not the image ones
    return family


def _io(name: str, group: str, family: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    layout = GROUPS[group][2]
    if group == "classification":
        return _classification_io(name)
    if group == "segmentation":
        # Built without weights there is no auxiliary classifier: one output, "out".
        inputs = [{"name": "input", "shape": _segmentation_shape(name), "dtype": "float32", "layout": layout}]
        return inputs, [{"name": "out"}]
    if group == "detection":
        size = _DETECTION_SIZES.get(name, _DETECTION_SIZE)
        inputs = [{"name": "input", "shape": [3, size, size], "dtype": "float32", "layout": layout}]
        return inputs, [{"name": output} for output in _DETECTION_OUTPUTS[family]]
    inputs = [{"name": "input", "shape": _video_shape(name), "dtype": "float32", "layout": layout}]
    return inputs, [{"name": "logits"}]


def _description(name: str, group: str, shape: list[int]) -> str:
    size = "x".join(str(n) for n in shape)
    return (
        f"torchvision.models.{name} ({group}, {size} input) from torchvision's model builder; "
        "random weights, so latency is representative but outputs are not meaningful."
    )


def torchvision_entries() -> list[dict[str, Any]]:
    """One entry document per builder of the groups, sorted by name (frameworks are added later)."""
    import torchvision.models

    entries = []
    families: set[str] = set()
    for group, (module_name, task, _layout) in GROUPS.items():
        module = getattr(torchvision.models, module_name) if module_name else torchvision.models
        for name in sorted(torchvision.models.list_models(module=module)):
            family = _family(name, group, families)
            if group == "classification":
                families.add(family)
            inputs, outputs = _io(name, group, family)
            entries.append(
                {
                    "ref": f"torchvision:{name}",
                    "name": name,
                    "library": "torchvision",
                    "family": family,
                    "group": group,
                    "task": task,
                    "description": _description(name, group, inputs[0]["shape"]),
                    "source": {"torchvision": name},
                    "inputs": inputs,
                    "outputs": outputs,
                }
            )
    if not all(re.fullmatch(r"[a-z0-9_]+", entry["name"]) for entry in entries):
        raise ValueError("a torchvision builder name is not a valid catalogue name")
    return sorted(entries, key=lambda entry: entry["ref"])
