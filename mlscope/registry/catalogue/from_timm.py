"""The timm part of the catalogue: a curated list of image classifiers from pytorch-image-models, each
described from the installed timm's own default pretrained configuration.

timm registers over a thousand model names, most of them sizes of one architecture; the list
(`MODELS`) picks one or a few per family, the small variants, so each runs in seconds on a small CPU.
Everything else is read from the library: the input size, the eval preprocessing (resize, centre crop,
mean and std, as `timm.data.create_transform` makes it from the model's default `pretrained_cfg`) and
the family (the timm module that defines the model). Entries are built with `pretrained=False`: random
weights, nothing downloaded; the default configuration only describes the input they were trained on.

Left out on purpose: the larger sizes of a family (every entry here is under about 33 M parameters)
and families whose smallest model is base-sized (BEiT). A curated name the installed timm does not
register stops the generator. Every entry builds and runs on PyTorch; with timm 1.0.31 and torch 2.14
two do not export to ONNX at opset 17 (eva02_tiny_patch14_224: its attention passes a tensor as
`is_causal`; volo_d1_224: `aten::col2im` needs opset 18), which `benchmarks/catalogue.py` reports.

Imported by `generate` only: it imports timm (and with it torch).
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["MODELS", "timm_entries", "timm_version"]

# One or a few per family, small sizes first; sorted within a family for easy reading.
MODELS: tuple[str, ...] = (
    # convolutional networks
    "convnext_atto",
    "convnext_tiny",
    "cspresnet50",
    "densenet121",
    "dla34",
    "dpn68",
    "eca_nfnet_l0",
    "efficientnet_b0",
    "efficientnetv2_rw_t",
    "ese_vovnet19b_dw",
    "fastvit_t8",
    "ghostnet_100",
    "hgnetv2_b0",
    "hrnet_w18_small",
    "inception_v3",
    "lcnet_050",
    "mixnet_s",
    "mobilenetv3_small_100",
    "mobilenetv4_conv_small",
    "mobileone_s0",
    "regnetx_002",
    "regnety_002",
    "repvit_m1",
    "resnest14d",
    "resnet18",
    "resnet26d",
    "resnet50d",
    "resnext26ts",
    "rexnet_100",
    "selecsls42b",
    "tf_mobilenetv3_small_100",
    "tinynet_a",
    "xception41",
    # convolution and attention or MLP hybrids
    "coat_lite_tiny",
    "convmixer_1024_20_ks9_p14",
    "edgenext_xx_small",
    "efficientformer_l1",
    "efficientvit_b0",
    "efficientvit_m0",
    "inception_next_tiny",
    "levit_128s",
    "maxvit_rmlp_nano_rw_256",
    "mobilevit_xxs",
    "poolformer_s12",
    "tiny_vit_5m_224",
    # transformers and MLP models
    "cait_xxs24_224",
    "convit_tiny",
    "crossvit_tiny_240",
    "deit_tiny_patch16_224",
    "eva02_tiny_patch14_224",
    "gcvit_xxtiny",
    "mixer_s16_224",
    "pit_ti_224",
    "pvt_v2_b0",
    "swin_tiny_patch4_window7_224",
    "tnt_s_patch16_224",
    "twins_pcpvt_small",
    "vit_tiny_patch16_224",
    "volo_d1_224",
    "xcit_nano_12_p16_224",
)

# Module names that are not what people call the family (the same names as torchvision's families).
_FAMILY_NAMES = {
    "vision_transformer": "vit",
    "swin_transformer": "swin",
    "mobilenetv3": "mobilenet_v3",
    "inception_v3": "inception",
}


def timm_version() -> str:
    import timm

    return str(timm.__version__).split("+")[0]


def _families() -> dict[str, str]:
    """Each registered model name's family: the timm module that defines it, renamed as above."""
    import timm

    family = {}
    for module in timm.list_modules():
        for name in timm.list_models(module=module):
            family[name] = _FAMILY_NAMES.get(module, module)
    return family


def _eval_steps(name: str) -> tuple[list[int], list[dict[str, Any]]]:
    """The input shape and the preprocessing steps of timm's eval transform for `name`.

    Read from the transform `timm.data.create_transform` makes from the default pretrained
    configuration, so the resize side is timm's own (crop size / crop_pct, rounded down).

    Raises:
        ValueError: the transform is not a square resize, centre crop, to-tensor and normalize.
    """
    import timm.data
    from timm.models import get_pretrained_cfg

    cfg = get_pretrained_cfg(name)
    if cfg is None:
        raise ValueError(f"timm has no default pretrained configuration for {name!r}")
    config = timm.data.resolve_data_config(pretrained_cfg=cfg.to_dict())
    _channels, height, width = (int(n) for n in config["input_size"])
    transform = timm.data.create_transform(**config)
    kinds = [type(step).__name__ for step in transform.transforms]
    if kinds != ["Resize", "CenterCrop", "MaybeToTensor", "Normalize"] or height != width:
        raise ValueError(f"timm's eval transform for {name!r} is {kinds} at {height}x{width}, not supported")
    resize, crop = transform.transforms[0], transform.transforms[1]
    if not isinstance(resize.size, int) or list(crop.size) != [height, width]:
        raise ValueError(f"timm's eval transform for {name!r} resizes to {resize.size}, crops {crop.size}")
    steps: list[dict[str, Any]] = [
        {"decode": {"color_mode": "rgb"}},
        {"resize": {"size": resize.size, "interpolation": str(config["interpolation"])}},
        {"center_crop": {"size": height}},
        {"normalize": {"mean": [float(v) for v in config["mean"]], "std": [float(v) for v in config["std"]]}},
        {"to_layout": {"layout": "NCHW"}},
    ]
    return [3, height, width], steps


def _description(name: str, family: str, shape: list[int]) -> str:
    size = "x".join(str(n) for n in shape)
    return (
        f"timm.create_model('{name}') (timm family {family}, classification, {size} input), "
        "pretrained=False; random weights, so latency is representative but outputs are not meaningful."
    )


def timm_entries() -> list[dict[str, Any]]:
    """One entry document per curated model, sorted by ref (frameworks are added later).

    Raises:
        ValueError: a curated name is not registered by the installed timm, or is listed twice.
    """
    families = _families()
    missing = [name for name in MODELS if name not in families]
    if missing or len(set(MODELS)) != len(MODELS):
        raise ValueError(f"timm {timm_version()} does not register {missing}, or a name is listed twice")
    entries: list[dict[str, Any]] = []
    for name in MODELS:
        shape, steps = _eval_steps(name)
        family = families[name]
        entries.append(
            {
                "ref": f"timm:{name}",
                "name": name,
                "library": "timm",
                "family": family,
                "group": "classification",
                "task": "image_classification",
                "description": _description(name, family, shape),
                "source": {"timm": name},
                "inputs": [
                    {"name": "input", "shape": shape, "dtype": "float32", "layout": "NCHW", "steps": steps}
                ],
                "outputs": [{"name": "logits", "steps": ["softmax", {"topk": {"k": 5}}]}],
            }
        )
    if not all(re.fullmatch(r"[a-z0-9_]+", entry["name"]) for entry in entries):
        raise ValueError("a timm model name is not a valid catalogue name")
    return sorted(entries, key=lambda entry: entry["ref"])
