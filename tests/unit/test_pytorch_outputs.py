"""The PyTorch predictor hands every output shape a torchvision or transformers model returns to
postprocessing by the manifest's output names (no model is built: the outputs are made by hand)."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import torch

from mlscope.registry.catalogue import Catalogue
from mlscope.runtime.predictors.pytorch.predictor import PyTorchPredictor

CATALOGUE = Catalogue.load()


def predictor(ref: str) -> PyTorchPredictor:
    return PyTorchPredictor(manifest=CATALOGUE.manifest(ref, "pytorch"))


def test_a_tensor_or_a_tuple_is_named_in_order() -> None:
    logits = torch.ones(2, 1000)
    assert list(predictor("torchvision:resnet18").outputs_to_numpy(logits)) == ["logits"]
    assert predictor("torchvision:resnet18").outputs_to_numpy((logits,))["logits"].shape == (2, 1000)


def test_a_mapping_is_taken_by_name() -> None:
    # torchvision segmentation models return {"out": ..., "aux": ...}
    out = OrderedDict(out=torch.zeros(1, 21, 8, 8), aux=torch.ones(1, 21, 8, 8))
    arrays = predictor("torchvision:fcn_resnet50").outputs_to_numpy(out)
    assert list(arrays) == ["out"] and not arrays["out"].any()


def test_one_mapping_per_image_is_concatenated_in_image_order() -> None:
    # torchvision detection models return one dict per image, each with its own number of detections
    images = [
        {
            "boxes": torch.zeros(n, 4),
            "scores": torch.full((n,), float(i)),
            "labels": torch.zeros(n, dtype=torch.int64),
        }
        for i, n in enumerate((2, 3))
    ]
    arrays = predictor("torchvision:ssd300_vgg16").outputs_to_numpy(images)
    assert list(arrays) == ["boxes", "scores", "labels"]
    assert arrays["boxes"].shape == (5, 4)
    np.testing.assert_array_equal(arrays["scores"], [0, 0, 1, 1, 1])
