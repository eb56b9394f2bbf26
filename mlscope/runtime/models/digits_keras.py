"""`mlscope.runtime.models.digits_keras:make_model`: mlscope's trained digits CNN
(`digits_cnn.DigitsCNN`) as a Keras model holding the very same weights, so that frameworks that
convert Keras models (LiteRT, docs/litert.md) run the model the `digits` dataset scores.

The Keras graph takes the same NCHW input (N, 1, 8, 8) as the PyTorch one: it transposes to NHWC
(Keras's convolutions' layout), runs the two convolutions and the pooling, transposes back to NCHW
so that flattening orders the features as PyTorch's `flatten` does, and ends in the same linear
layer. Imports torch (to train or read the cached model) and TensorFlow.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["make_model"]


def make_model() -> Any:
    """The trained digits CNN as a `tf.keras.Model` with PyTorch's weights copied in."""
    from mlscope.runtime.models.digits_cnn import trained_digits_cnn

    # The weights first, TensorFlow after: training imports parts of torch (torch._inductor) that
    # crash the process once TensorFlow is loaded.
    state = {
        name: value.detach().cpu().numpy() for name, value in trained_digits_cnn().model.state_dict().items()
    }
    import tensorflow as tf

    layers = tf.keras.layers
    inputs = tf.keras.Input(shape=(1, 8, 8), name="input")
    nhwc = layers.Permute((2, 3, 1))(inputs)
    first = layers.Conv2D(16, 3, padding="same", activation="relu")
    second = layers.Conv2D(32, 3, padding="same", activation="relu")
    pooled = layers.MaxPooling2D(2)(second(first(nhwc)))
    nchw = layers.Permute((3, 1, 2))(pooled)
    classifier = layers.Dense(10)
    outputs = classifier(layers.Flatten()(nchw))
    model = tf.keras.Model(inputs, outputs, name="digits_cnn")
    # PyTorch's convolution kernels are (out, in, h, w), Keras's (h, w, in, out); its linear weight
    # is (out, in), Keras's (in, out).
    first.set_weights([np.transpose(state["features.0.weight"], (2, 3, 1, 0)), state["features.0.bias"]])
    second.set_weights([np.transpose(state["features.2.weight"], (2, 3, 1, 0)), state["features.2.bias"]])
    classifier.set_weights([state["classifier.weight"].T, state["classifier.bias"]])
    return model
