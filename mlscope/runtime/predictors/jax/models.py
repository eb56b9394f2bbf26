"""Flax NNX definitions of the architectures the JAX predictor runs, and the copy of a PyTorch module's
weights into them (docs/jax.md).

Each definition mirrors its PyTorch original layer by layer and names its layers as that module's
`state_dict` does, so `load_torch_state` copies the weights by name: torchvision's ResNet (basic and
bottleneck blocks), MobileNetV3 and VisionTransformer, and transformers' Llama decoder (`LlamaModel`)
and BERT encoder (`BertModel`), both returning their last hidden state. Images enter in the manifest's
NCHW layout and are transposed to NHWC, the layout XLA's convolutions take, inside the jitted function.

The structure (depths, widths, heads, each MobileNetV3 block's layers) is read from the PyTorch module
itself (`from_torch`), so every size of a family (resnet18 to resnet152, mobilenet_v3_small and
mobilenet_v3_large, vit_b_16 to vit_h_14) is one definition.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from mlscope.runtime.predictors.base import PredictorError

__all__ = [
    "Bert",
    "Decoder",
    "MobileNetV3",
    "ResNet",
    "VisionTransformer",
    "from_torch",
    "load_torch_state",
]


def _abstract(make: Any) -> Any:
    """The module `make(rngs)` returns, with shapes and no weights (nothing is initialised: the
    PyTorch weights fill it)."""
    return nnx.eval_shape(lambda: make(nnx.Rngs(0)))


def _conv(
    cin: int,
    cout: int,
    kernel: int,
    stride: int,
    padding: int,
    rngs: nnx.Rngs,
    bias: bool,
    groups: int = 1,
    dilation: int = 1,
) -> nnx.Conv:
    return nnx.Conv(
        cin,
        cout,
        (kernel, kernel),
        strides=(stride, stride),
        padding=((padding, padding), (padding, padding)),
        kernel_dilation=(dilation, dilation),
        feature_group_count=groups,
        use_bias=bias,
        rngs=rngs,
    )


def _bn(features: int, rngs: nnx.Rngs, epsilon: float = 1e-5) -> nnx.BatchNorm:
    # torch.nn.BatchNorm2d's default epsilon unless the module set its own; evaluation mode: the
    # running statistics.
    return nnx.BatchNorm(features, use_running_average=True, epsilon=epsilon, rngs=rngs)


class BasicBlock(nnx.Module):
    """torchvision's BasicBlock: two 3x3 convolutions and a shortcut."""

    expansion = 1

    def __init__(self, cin: int, width: int, stride: int, rngs: nnx.Rngs) -> None:
        self.conv1 = _conv(cin, width, 3, stride, 1, rngs, False)
        self.bn1 = _bn(width, rngs)
        self.conv2 = _conv(width, width, 3, 1, 1, rngs, False)
        self.bn2 = _bn(width, rngs)
        self.downsample = _downsample(cin, width, stride, rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        out = jax.nn.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return jax.nn.relu(out + _shortcut(self.downsample, x))


class Bottleneck(nnx.Module):
    """torchvision's Bottleneck (ResNet v1.5: the stride on the 3x3 convolution)."""

    expansion = 4

    def __init__(self, cin: int, width: int, stride: int, rngs: nnx.Rngs) -> None:
        self.conv1 = _conv(cin, width, 1, 1, 0, rngs, False)
        self.bn1 = _bn(width, rngs)
        self.conv2 = _conv(width, width, 3, stride, 1, rngs, False)
        self.bn2 = _bn(width, rngs)
        self.conv3 = _conv(width, width * 4, 1, 1, 0, rngs, False)
        self.bn3 = _bn(width * 4, rngs)
        self.downsample = _downsample(cin, width * 4, stride, rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        out = jax.nn.relu(self.bn1(self.conv1(x)))
        out = jax.nn.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return jax.nn.relu(out + _shortcut(self.downsample, x))


def _downsample(cin: int, cout: int, stride: int, rngs: nnx.Rngs) -> nnx.List | None:
    """The shortcut's 1x1 convolution and batch norm (torch's `downsample.0`, `downsample.1`) where
    the block changes the shape, else None."""
    if stride == 1 and cin == cout:
        return None
    return nnx.List([_conv(cin, cout, 1, stride, 0, rngs, False), _bn(cout, rngs)])


def _shortcut(downsample: nnx.List | None, x: jax.Array) -> jax.Array:
    if downsample is None:
        return x
    conv, bn = downsample
    return bn(conv(x))


class ResNet(nnx.Module):
    """torchvision's ResNet: `block` is BasicBlock or Bottleneck, `depths` the blocks per stage."""

    def __init__(self, block: str, depths: tuple[int, ...], num_classes: int, rngs: nnx.Rngs) -> None:
        kind: type[BasicBlock | Bottleneck] = BasicBlock if block == "BasicBlock" else Bottleneck
        self.conv1 = _conv(3, 64, 7, 2, 3, rngs, False)
        self.bn1 = _bn(64, rngs)
        cin = 64
        for stage, depth in enumerate(depths):
            width = 64 * 2**stage
            blocks = []
            for index in range(depth):
                stride = 2 if stage > 0 and index == 0 else 1
                blocks.append(kind(cin, width, stride, rngs))
                cin = width * kind.expansion
            setattr(self, f"layer{stage + 1}", nnx.List(blocks))
        self.depths = depths
        self.fc = nnx.Linear(cin, num_classes, rngs=rngs)

    def __call__(self, images: jax.Array) -> jax.Array:
        x = jnp.transpose(images, (0, 2, 3, 1))  # NCHW (the manifest's) to NHWC
        x = jax.nn.relu(self.bn1(self.conv1(x)))
        x = nnx.max_pool(x, (3, 3), strides=(2, 2), padding=((1, 1), (1, 1)))
        for stage in range(len(self.depths)):
            for block in getattr(self, f"layer{stage + 1}"):
                x = block(x)
        return self.fc(jnp.mean(x, axis=(1, 2)))


# An activation of torchvision's layers by its PyTorch class name (None: the layer has none).
_ACTIVATIONS: dict[str | None, Any] = {
    None: lambda x: x,
    "ReLU": jax.nn.relu,
    "Hardswish": jax.nn.hard_swish,  # x * relu6(x + 3) / 6, as torch.nn.Hardswish
    "Hardsigmoid": jax.nn.hard_sigmoid,  # relu6(x + 3) / 6, as torch.nn.Hardsigmoid
}


def _conv_norm(spec: Mapping[str, Any], rngs: nnx.Rngs) -> nnx.List:
    """torchvision's Conv2dNormActivation without its activation (torch's `<i>.0`, `<i>.1`): a
    convolution without bias, grouped for a depthwise one, then a batch norm."""
    conv = _conv(
        spec["in"], spec["out"], spec["kernel"], spec["stride"], spec["padding"], rngs, False,
        groups=spec["groups"], dilation=spec["dilation"],
    )  # fmt: skip
    return nnx.List([conv, _bn(spec["out"], rngs, spec["eps"])])


class SqueezeExcitation(nnx.Module):
    """torchvision's SqueezeExcitation: the channels' mean through two 1x1 convolutions (with bias),
    the first's activation and the second's scale activation, multiplied into the input."""

    def __init__(self, spec: Mapping[str, Any], rngs: nnx.Rngs) -> None:
        self.fc1 = _conv(spec["channels"], spec["squeeze"], 1, 1, 0, rngs, True)
        self.fc2 = _conv(spec["squeeze"], spec["channels"], 1, 1, 0, rngs, True)
        self.activation, self.scale_activation = spec["activation"], spec["scale_activation"]

    def __call__(self, x: jax.Array) -> jax.Array:
        scale = _ACTIVATIONS[self.activation](self.fc1(jnp.mean(x, axis=(1, 2), keepdims=True)))
        return _ACTIVATIONS[self.scale_activation](self.fc2(scale)) * x


class InvertedResidual(nnx.Module):
    """torchvision's MobileNetV3 InvertedResidual: its `block` (an expanding 1x1 convolution where
    the width changes, the depthwise convolution, squeeze-excitation where the block has it, the
    projecting 1x1 convolution without activation) and the shortcut where stride and width allow."""

    def __init__(self, spec: Mapping[str, Any], rngs: nnx.Rngs) -> None:
        layers = spec["layers"]
        self.block = nnx.List(
            [
                SqueezeExcitation(layer, rngs) if layer["kind"] == "se" else _conv_norm(layer, rngs)
                for layer in layers
            ]
        )
        self.activations = tuple(layer.get("activation") for layer in layers)
        self.residual = spec["residual"]

    def __call__(self, x: jax.Array) -> jax.Array:
        out = x
        for layer, activation in zip(self.block, self.activations, strict=True):
            if isinstance(layer, SqueezeExcitation):
                out = layer(out)
            else:
                conv, norm = layer
                out = _ACTIVATIONS[activation](norm(conv(out)))
        return out + x if self.residual else out


class MobileNetV3(nnx.Module):
    """torchvision's MobileNetV3 (small and large): `features` (the stem convolution, the inverted
    residual blocks, the last 1x1 convolution), the mean over the image, and the classifier (torch's
    `classifier.0` and `classifier.3`: a linear layer, hardswish, the dropout evaluation skips, a
    linear layer)."""

    def __init__(self, config: Mapping[str, Any], rngs: nnx.Rngs) -> None:
        features: list[Any] = []
        for spec in config["features"]:
            features.append(
                InvertedResidual(spec, rngs) if spec["kind"] == "block" else _conv_norm(spec, rngs)
            )
        self.features = nnx.List(features)
        self.activations = tuple(spec.get("activation") for spec in config["features"])
        self.classifier_fc1 = nnx.Linear(config["pooled"], config["hidden"], rngs=rngs)
        self.classifier_fc2 = nnx.Linear(config["hidden"], config["num_classes"], rngs=rngs)
        self.classifier_activation = config["classifier_activation"]

    def __call__(self, images: jax.Array) -> jax.Array:
        x = jnp.transpose(images, (0, 2, 3, 1))  # NCHW (the manifest's) to NHWC
        for layer, activation in zip(self.features, self.activations, strict=True):
            if isinstance(layer, InvertedResidual):
                x = layer(x)
            else:
                conv, norm = layer
                x = _ACTIVATIONS[activation](norm(conv(x)))
        x = _ACTIVATIONS[self.classifier_activation](self.classifier_fc1(jnp.mean(x, axis=(1, 2))))
        return self.classifier_fc2(x)


class SelfAttention(nnx.Module):
    """torch.nn.MultiheadAttention as torchvision's ViT uses it: one packed input projection
    (`in_proj_weight`, queries then keys then values), heads of equal width, no mask."""

    def __init__(self, dim: int, heads: int, rngs: nnx.Rngs) -> None:
        self.heads = heads
        self.in_proj = nnx.Linear(dim, 3 * dim, rngs=rngs)
        self.out_proj = nnx.Linear(dim, dim, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        batch, length, dim = x.shape
        q, k, v = jnp.split(self.in_proj(x), 3, axis=-1)
        split = lambda t: t.reshape(batch, length, self.heads, dim // self.heads)  # noqa: E731
        out = jax.nn.dot_product_attention(split(q), split(k), split(v))
        return self.out_proj(out.reshape(batch, length, dim))


class EncoderBlock(nnx.Module):
    """torchvision's EncoderBlock: pre-norm attention and MLP (exact GELU), LayerNorm epsilon 1e-6."""

    def __init__(self, dim: int, heads: int, mlp_dim: int, rngs: nnx.Rngs) -> None:
        self.ln_1 = nnx.LayerNorm(dim, epsilon=1e-6, rngs=rngs)
        self.self_attention = SelfAttention(dim, heads, rngs)
        self.ln_2 = nnx.LayerNorm(dim, epsilon=1e-6, rngs=rngs)
        self.mlp_fc1 = nnx.Linear(dim, mlp_dim, rngs=rngs)
        self.mlp_fc2 = nnx.Linear(mlp_dim, dim, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = x + self.self_attention(self.ln_1(x))
        y = self.mlp_fc2(jax.nn.gelu(self.mlp_fc1(self.ln_2(x)), approximate=False))
        return x + y


class Encoder(nnx.Module):
    """torchvision's ViT encoder: position embedding, the blocks (`layers.encoder_layer_<i>`), a norm."""

    def __init__(self, length: int, dim: int, depth: int, heads: int, mlp_dim: int, rngs: nnx.Rngs) -> None:
        self.pos_embedding = nnx.Param(jnp.zeros((1, length, dim), jnp.float32))
        self.layers = nnx.List([EncoderBlock(dim, heads, mlp_dim, rngs) for _ in range(depth)])
        self.ln = nnx.LayerNorm(dim, epsilon=1e-6, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = x + self.pos_embedding[...]
        for block in self.layers:
            x = block(x)
        return self.ln(x)


class VisionTransformer(nnx.Module):
    """torchvision's VisionTransformer (no representation layer): patches by a strided convolution,
    a class token, the encoder, and the head on the class token."""

    def __init__(self, config: Mapping[str, int], rngs: nnx.Rngs) -> None:
        patch, dim = config["patch_size"], config["hidden_dim"]
        self.patch = patch
        self.conv_proj = _conv(3, dim, patch, patch, 0, rngs, True)
        self.class_token = nnx.Param(jnp.zeros((1, 1, dim), jnp.float32))
        length = (config["image_size"] // patch) ** 2 + 1
        self.encoder = Encoder(
            length, dim, config["num_layers"], config["num_heads"], config["mlp_dim"], rngs
        )
        self.heads_head = nnx.Linear(dim, config["num_classes"], rngs=rngs)

    def __call__(self, images: jax.Array) -> jax.Array:
        x = self.conv_proj(jnp.transpose(images, (0, 2, 3, 1)))  # NHWC patches
        batch, height, width, dim = x.shape
        x = x.reshape(batch, height * width, dim)  # row-major patches, as torch's flatten(2)
        token = jnp.broadcast_to(self.class_token[...], (batch, 1, dim))
        x = self.encoder(jnp.concatenate([token, x], axis=1))
        return self.heads_head(x[:, 0])


class DecoderLayer(nnx.Module):
    """transformers' LlamaDecoderLayer: RMS norms, causal self-attention with rotary positions and
    grouped key/value heads, a gated SiLU MLP."""

    def __init__(self, config: Mapping[str, Any], rngs: nnx.Rngs) -> None:
        dim, heads, kv = config["hidden_size"], config["num_attention_heads"], config["num_key_value_heads"]
        head_dim, width = config["head_dim"], config["intermediate_size"]
        bias, mlp_bias, eps = config["attention_bias"], config["mlp_bias"], config["rms_norm_eps"]
        self.heads, self.kv_heads, self.head_dim = heads, kv, head_dim
        self.input_layernorm = nnx.RMSNorm(dim, epsilon=eps, rngs=rngs)
        self.q_proj = nnx.Linear(dim, heads * head_dim, use_bias=bias, rngs=rngs)
        self.k_proj = nnx.Linear(dim, kv * head_dim, use_bias=bias, rngs=rngs)
        self.v_proj = nnx.Linear(dim, kv * head_dim, use_bias=bias, rngs=rngs)
        self.o_proj = nnx.Linear(heads * head_dim, dim, use_bias=bias, rngs=rngs)
        self.post_attention_layernorm = nnx.RMSNorm(dim, epsilon=eps, rngs=rngs)
        self.gate_proj = nnx.Linear(dim, width, use_bias=mlp_bias, rngs=rngs)
        self.up_proj = nnx.Linear(dim, width, use_bias=mlp_bias, rngs=rngs)
        self.down_proj = nnx.Linear(width, dim, use_bias=mlp_bias, rngs=rngs)

    def __call__(self, x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
        batch, length, _ = x.shape
        h = self.input_layernorm(x)
        q = self.q_proj(h).reshape(batch, length, self.heads, self.head_dim)
        k = self.k_proj(h).reshape(batch, length, self.kv_heads, self.head_dim)
        v = self.v_proj(h).reshape(batch, length, self.kv_heads, self.head_dim)
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        out = jax.nn.dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o_proj(out.reshape(batch, length, self.heads * self.head_dim))
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(jax.nn.silu(self.gate_proj(h)) * self.up_proj(h))


def _rotate(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """Rotary position embedding as transformers applies it (halves, not interleaved pairs)."""
    half = x.shape[-1] // 2
    rotated = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos[None, :, None, :] + rotated * sin[None, :, None, :]


class Decoder(nnx.Module):
    """transformers' LlamaModel (no head): token embedding, the decoder layers, a final RMS norm; the
    output is its last hidden state."""

    def __init__(self, config: Mapping[str, Any], rngs: nnx.Rngs) -> None:
        self.embed_tokens = nnx.Embed(config["vocab_size"], config["hidden_size"], rngs=rngs)
        self.layers = nnx.List([DecoderLayer(config, rngs) for _ in range(config["num_hidden_layers"])])
        self.norm = nnx.RMSNorm(config["hidden_size"], epsilon=config["rms_norm_eps"], rngs=rngs)
        self.head_dim, self.rope_theta = config["head_dim"], config["rope_theta"]

    def __call__(self, input_ids: jax.Array) -> jax.Array:
        x = self.embed_tokens(input_ids)
        positions = jnp.arange(input_ids.shape[1], dtype=jnp.float32)
        dim = self.head_dim
        inv_freq = 1.0 / self.rope_theta ** (np.arange(0, dim, 2, dtype=np.float32) / dim)
        freqs = positions[:, None] * jnp.asarray(inv_freq)[None, :]
        angles = jnp.concatenate([freqs, freqs], axis=-1)
        cos, sin = jnp.cos(angles), jnp.sin(angles)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.norm(x)


class BertEmbeddings(nnx.Module):
    """transformers' BertEmbeddings: word, absolute position and token type embeddings summed, then a
    LayerNorm. Only token ids enter, so positions count from 0 and every token is of type 0, as
    transformers takes them when it is given no position or token type ids."""

    def __init__(self, config: Mapping[str, Any], rngs: nnx.Rngs) -> None:
        dim = config["hidden_size"]
        self.word_embeddings = nnx.Embed(config["vocab_size"], dim, rngs=rngs)
        self.position_embeddings = nnx.Embed(config["max_position_embeddings"], dim, rngs=rngs)
        self.token_type_embeddings = nnx.Embed(config["type_vocab_size"], dim, rngs=rngs)
        self.LayerNorm = nnx.LayerNorm(dim, epsilon=config["layer_norm_eps"], rngs=rngs)

    def __call__(self, input_ids: jax.Array) -> jax.Array:
        positions = jnp.arange(input_ids.shape[1])[None, :]
        x = self.word_embeddings(input_ids) + self.token_type_embeddings(jnp.zeros_like(input_ids))
        return self.LayerNorm(x + self.position_embeddings(positions))


class BertLayer(nnx.Module):
    """transformers' BertLayer: bidirectional self-attention (no mask: every token is real), its output
    projection added to the input and normed (post-norm), then the intermediate layer with exact (erf)
    GELU, transformers' "gelu", and the output projection, added and normed."""

    def __init__(self, config: Mapping[str, Any], rngs: nnx.Rngs) -> None:
        dim, width, eps = config["hidden_size"], config["intermediate_size"], config["layer_norm_eps"]
        self.heads = config["num_attention_heads"]
        self.query = nnx.Linear(dim, dim, rngs=rngs)
        self.key = nnx.Linear(dim, dim, rngs=rngs)
        self.value = nnx.Linear(dim, dim, rngs=rngs)
        self.attention_dense = nnx.Linear(dim, dim, rngs=rngs)
        self.attention_norm = nnx.LayerNorm(dim, epsilon=eps, rngs=rngs)
        self.intermediate_dense = nnx.Linear(dim, width, rngs=rngs)
        self.output_dense = nnx.Linear(width, dim, rngs=rngs)
        self.output_norm = nnx.LayerNorm(dim, epsilon=eps, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        batch, length, dim = x.shape
        split = lambda t: t.reshape(batch, length, self.heads, dim // self.heads)  # noqa: E731
        out = jax.nn.dot_product_attention(split(self.query(x)), split(self.key(x)), split(self.value(x)))
        x = self.attention_norm(x + self.attention_dense(out.reshape(batch, length, dim)))
        hidden = jax.nn.gelu(self.intermediate_dense(x), approximate=False)
        return self.output_norm(x + self.output_dense(hidden))


class BertEncoder(nnx.Module):
    """transformers' BertEncoder: its layers (`layer.<i>`)."""

    def __init__(self, config: Mapping[str, Any], rngs: nnx.Rngs) -> None:
        self.layer = nnx.List([BertLayer(config, rngs) for _ in range(config["num_hidden_layers"])])

    def __call__(self, x: jax.Array) -> jax.Array:
        for layer in self.layer:
            x = layer(x)
        return x


class Bert(nnx.Module):
    """transformers' BertModel: the embeddings and the encoder; the output is the last hidden state.
    The pooler's weights are held, so that every PyTorch weight has its place, but the pooler is not
    run: the last hidden state does not depend on it."""

    def __init__(self, config: Mapping[str, Any], rngs: nnx.Rngs) -> None:
        self.embeddings = BertEmbeddings(config, rngs)
        self.encoder = BertEncoder(config, rngs)
        dim = config["hidden_size"]
        self.pooler_dense = nnx.Linear(dim, dim, rngs=rngs) if config["pooler"] else None

    def __call__(self, input_ids: jax.Array) -> jax.Array:
        return self.encoder(self.embeddings(input_ids))


# Where a definition's names differ from the PyTorch module's `state_dict` keys: (Flax, PyTorch).
_RENAMES = (
    (".mlp_fc1.", ".mlp.0."),
    (".mlp_fc2.", ".mlp.3."),
    ("in_proj.weight", "in_proj_weight"),
    ("in_proj.bias", "in_proj_bias"),
    ("heads_head.", "heads.head."),
    (".gate_proj.", ".mlp.gate_proj."),
    (".up_proj.", ".mlp.up_proj."),
    (".down_proj.", ".mlp.down_proj."),
    (".q_proj.", ".self_attn.q_proj."),
    (".k_proj.", ".self_attn.k_proj."),
    (".v_proj.", ".self_attn.v_proj."),
    (".o_proj.", ".self_attn.o_proj."),
    ("classifier_fc1.", "classifier.0."),
    ("classifier_fc2.", "classifier.3."),
    (".query.", ".attention.self.query."),
    (".key.", ".attention.self.key."),
    (".value.", ".attention.self.value."),
    (".attention_dense.", ".attention.output.dense."),
    (".attention_norm.", ".attention.output.LayerNorm."),
    (".intermediate_dense.", ".intermediate.dense."),
    (".output_dense.", ".output.dense."),
    (".output_norm.", ".output.LayerNorm."),
    ("pooler_dense.", "pooler.dense."),
)

# A Flax variable's name by the PyTorch one of its layer kind, and how the array is laid out.
_LEAVES: dict[type, dict[str, str]] = {
    nnx.Conv: {"kernel": "weight", "bias": "bias"},
    nnx.Linear: {"kernel": "weight", "bias": "bias"},
    nnx.BatchNorm: {"scale": "weight", "bias": "bias", "mean": "running_mean", "var": "running_var"},
    nnx.LayerNorm: {"scale": "weight", "bias": "bias"},
    nnx.RMSNorm: {"scale": "weight"},
    nnx.Embed: {"embedding": "weight"},
}


def _torch_key(path: tuple[Any, ...], owner: Any) -> str:
    """The PyTorch state_dict key of the Flax variable at `path` (module path + variable name)."""
    *modules, leaf = (str(part) for part in path)
    name = _LEAVES.get(type(owner), {}).get(leaf, leaf)
    key = ".".join([*modules, name])
    key = key.replace("layers.", "layers.encoder_layer_") if "encoder.layers." in key else key
    for flax, torch_name in _RENAMES:
        key = key.replace(flax, torch_name)
    return key


def _layout(owner: Any, leaf: str, array: np.ndarray) -> np.ndarray:
    """A PyTorch weight in the layout the Flax layer holds it."""
    if isinstance(owner, nnx.Conv) and leaf == "kernel":
        return array.transpose(2, 3, 1, 0)  # (out, in, h, w) to (h, w, in, out)
    if isinstance(owner, nnx.Linear) and leaf == "kernel":
        return array.T  # (out, in) to (in, out)
    return array


def _variables(module: nnx.Module) -> Iterator[tuple[tuple[Any, ...], Any, nnx.Variable]]:
    """(path, owning module, variable) of every variable of `module`'s graph."""
    for path, node in nnx.iter_graph(module):
        if isinstance(node, nnx.Variable):
            parent: Any = module
            for part in path[:-1]:
                parent = parent[part] if isinstance(part, int) else getattr(parent, str(part))
            yield tuple(path), parent, node


def load_torch_state(module: nnx.Module, state: Mapping[str, Any]) -> None:
    """Copy a PyTorch `state_dict` into `module`, every variable by its PyTorch name.

    Raises:
        PredictorError: a variable has no PyTorch weight of its shape, or a PyTorch weight was left
            over (the definitions do not match: nothing would compare).
    """
    used = set()
    for path, owner, variable in _variables(module):
        key = _torch_key(path, owner)
        if key not in state:
            where = ".".join(map(str, path))
            raise PredictorError(f"the Flax definition's {where} has no PyTorch weight {key}")
        array = _layout(owner, str(path[-1]), state[key].detach().cpu().numpy())
        if array.shape != variable.shape:
            raise PredictorError(f"PyTorch's {key} is {array.shape}, the Flax definition's {variable.shape}")
        variable.set_value(jnp.asarray(array))
        used.add(key)
    left = sorted(k for k in state if k not in used and not k.endswith("num_batches_tracked"))
    if left:
        raise PredictorError(f"PyTorch weights with no place in the Flax definition: {', '.join(left[:5])}")


def _resnet(torch_module: Any) -> ResNet:
    block = type(torch_module.layer1[0]).__name__
    if block not in ("BasicBlock", "Bottleneck") or torch_module.layer1[0].conv2.groups != 1:
        raise PredictorError(f"the JAX ResNet has basic and bottleneck blocks, not {block} with groups")
    depths = tuple(len(getattr(torch_module, f"layer{i}")) for i in range(1, 5))
    if block == "Bottleneck" and torch_module.layer1[0].conv1.out_channels != 64:
        raise PredictorError("the JAX ResNet has the standard widths (not a wide ResNet)")
    return _abstract(lambda rngs: ResNet(block, depths, torch_module.fc.out_features, rngs))


def _conv_norm_spec(layer: Any) -> dict[str, Any]:
    """What a torchvision Conv2dNormActivation (convolution, batch norm, optional activation) is made of.

    Raises:
        PredictorError: it is not such a sequence (a convolution with bias, another norm, padding
            other than the symmetric one of one number).
    """
    conv, norm, *rest = layer
    if type(conv).__name__ != "Conv2d" or type(norm).__name__ != "BatchNorm2d" or conv.bias is not None:
        raise PredictorError("the JAX MobileNetV3 has convolutions without bias, each with a batch norm")
    sizes = (conv.kernel_size, conv.stride, conv.padding, conv.dilation)
    if isinstance(conv.padding, str) or any(len(set(pair)) > 1 for pair in sizes):
        raise PredictorError("the JAX MobileNetV3 has square kernels, strides, paddings and dilations")
    activation = type(rest[0]).__name__ if rest else None
    if activation not in _ACTIVATIONS:
        raise PredictorError(f"the JAX MobileNetV3 has no activation {activation}")
    return {
        "kind": "conv",
        "in": conv.in_channels,
        "out": conv.out_channels,
        "kernel": conv.kernel_size[0],
        "stride": conv.stride[0],
        "padding": conv.padding[0],
        "dilation": conv.dilation[0],
        "groups": conv.groups,
        "eps": norm.eps,
        "activation": activation,
    }


def _mobilenet_v3(torch_module: Any) -> MobileNetV3:
    features: list[dict[str, Any]] = []
    for layer in torch_module.features:
        if type(layer).__name__ != "InvertedResidual":
            features.append(_conv_norm_spec(layer))
            continue
        specs = []
        for part in layer.block:
            if type(part).__name__ == "SqueezeExcitation":
                activations = {type(part.activation).__name__, type(part.scale_activation).__name__}
                if not activations <= set(_ACTIVATIONS):
                    raise PredictorError(f"the JAX squeeze-excitation has no activation among {activations}")
                specs.append({
                    "kind": "se",
                    "channels": part.fc1.in_channels,
                    "squeeze": part.fc1.out_channels,
                    "activation": type(part.activation).__name__,
                    "scale_activation": type(part.scale_activation).__name__,
                })  # fmt: skip
            else:
                specs.append(_conv_norm_spec(part))
        features.append({"kind": "block", "layers": specs, "residual": bool(layer.use_res_connect)})
    kinds = [type(part).__name__ for part in torch_module.classifier]
    if kinds != ["Linear", kinds[1], "Dropout", "Linear"] or kinds[1] not in _ACTIVATIONS:
        raise PredictorError(
            f"the JAX MobileNetV3's classifier is linear, activation, dropout, linear, not {kinds}"
        )
    first, _, _, last = torch_module.classifier
    config = {
        "features": features,
        "pooled": first.in_features,
        "hidden": first.out_features,
        "num_classes": last.out_features,
        "classifier_activation": type(torch_module.classifier[1]).__name__,
    }
    return _abstract(lambda rngs: MobileNetV3(config, rngs))


def _vit(torch_module: Any) -> VisionTransformer:
    if hasattr(torch_module.heads, "pre_logits"):
        raise PredictorError("the JAX ViT has no representation layer (representation_size)")
    config = {
        "image_size": torch_module.image_size,
        "patch_size": torch_module.patch_size,
        "hidden_dim": torch_module.hidden_dim,
        "mlp_dim": torch_module.mlp_dim,
        "num_classes": torch_module.num_classes,
        "num_layers": len(torch_module.encoder.layers),
        "num_heads": torch_module.encoder.layers[0].self_attention.num_heads,
    }
    return _abstract(lambda rngs: VisionTransformer(config, rngs))


def _llama(torch_config: Any) -> Decoder:
    rope = dict(getattr(torch_config, "rope_parameters", None) or {})
    theta = rope.get("rope_theta", getattr(torch_config, "rope_theta", None))
    if rope.get("rope_type", "default") != "default" or theta is None:
        raise PredictorError(f"the JAX decoder has default rotary positions, not {rope}")
    if torch_config.hidden_act != "silu":
        raise PredictorError(f"the JAX decoder's MLP is SiLU-gated, not {torch_config.hidden_act}")
    heads = torch_config.num_attention_heads
    config = {
        "vocab_size": torch_config.vocab_size,
        "hidden_size": torch_config.hidden_size,
        "intermediate_size": torch_config.intermediate_size,
        "num_hidden_layers": torch_config.num_hidden_layers,
        "num_attention_heads": heads,
        "num_key_value_heads": torch_config.num_key_value_heads or heads,
        "head_dim": getattr(torch_config, "head_dim", None) or torch_config.hidden_size // heads,
        "rms_norm_eps": torch_config.rms_norm_eps,
        "attention_bias": bool(torch_config.attention_bias),
        "mlp_bias": bool(getattr(torch_config, "mlp_bias", False)),
        "rope_theta": float(theta),
    }
    return _abstract(lambda rngs: Decoder(config, rngs))


def _bert(torch_module: Any) -> Bert:
    torch_config = torch_module.config
    # transformers 5 has absolute positions only (no such setting: None).
    position = getattr(torch_config, "position_embedding_type", None) or "absolute"
    if position != "absolute" or getattr(torch_config, "is_decoder", False):
        raise PredictorError(f"the JAX BERT is an encoder with absolute positions, not {position}")
    if torch_config.hidden_act != "gelu":
        raise PredictorError(f"the JAX BERT's MLP is exact GELU ('gelu'), not {torch_config.hidden_act}")
    config = {
        "vocab_size": torch_config.vocab_size,
        "hidden_size": torch_config.hidden_size,
        "intermediate_size": torch_config.intermediate_size,
        "num_hidden_layers": torch_config.num_hidden_layers,
        "num_attention_heads": torch_config.num_attention_heads,
        "max_position_embeddings": torch_config.max_position_embeddings,
        "type_vocab_size": torch_config.type_vocab_size,
        "layer_norm_eps": torch_config.layer_norm_eps,
        "pooler": getattr(torch_module, "pooler", None) is not None,
    }
    return _abstract(lambda rngs: Bert(config, rngs))


def from_torch(torch_module: Any) -> nnx.Module:
    """The Flax definition of a PyTorch module mlscope built (`pytorch.models.build_module`), holding
    that module's weights.

    Raises:
        PredictorError: no Flax definition has this module's architecture.
    """
    kind = type(torch_module).__name__
    inner = getattr(torch_module, "model", None)  # transformers' models come wrapped to select an output
    flax_module: nnx.Module
    if kind == "ResNet":
        flax_module, state = _resnet(torch_module), torch_module.state_dict()
    elif kind == "MobileNetV3":
        flax_module, state = _mobilenet_v3(torch_module), torch_module.state_dict()
    elif kind == "VisionTransformer":
        flax_module, state = _vit(torch_module), torch_module.state_dict()
    elif inner is not None and type(inner).__name__ in ("LlamaModel", "BertModel"):
        if torch_module.output != "last_hidden_state":
            raise PredictorError(
                f"JAX's transformers models return last_hidden_state, not {torch_module.output}"
            )
        if type(inner).__name__ == "LlamaModel":
            flax_module, state = _llama(inner.config), inner.state_dict()
        else:
            flax_module, state = _bert(inner), inner.state_dict()
    else:
        raise PredictorError(f"JAX has no Flax definition of {type(inner or torch_module).__name__}")
    load_torch_state(flax_module, state)
    return flax_module


def parameters(module: nnx.Module) -> int:
    """How many numbers the module's parameters hold."""
    return sum(math.prod(v.shape) for _, v in nnx.iter_graph(module) if isinstance(v, nnx.Param))
