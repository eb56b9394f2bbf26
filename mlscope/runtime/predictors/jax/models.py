"""Flax NNX definitions of the architectures the JAX predictor runs (docs/jax.md); `from_torch` builds
them from a PyTorch module and copies its weights in.

Each definition mirrors its PyTorch original layer by layer and names its layers as that module's
`state_dict` does, so `from_torch.load_torch_state` copies the weights by name: torchvision's ResNet
(basic and bottleneck blocks), MobileNetV3 and VisionTransformer, and transformers' Llama decoder
(`LlamaModel`) and BERT encoder (`BertModel`), both returning their last hidden state. Images enter in the
manifest's NCHW layout and are transposed to NHWC, the layout XLA's convolutions take, inside the jitted
function.

The structure (depths, widths, heads, each MobileNetV3 block's layers) is read from the PyTorch module
itself (`from_torch.from_torch`), so every size of a family (resnet18 to resnet152, mobilenet_v3_small and
mobilenet_v3_large, vit_b_16 to vit_h_14) is one definition.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

__all__ = [
    "ACTIVATIONS",
    "Bert",
    "Decoder",
    "MobileNetV3",
    "ResNet",
    "VisionTransformer",
]


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
ACTIVATIONS: dict[str | None, Any] = {
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
        scale = ACTIVATIONS[self.activation](self.fc1(jnp.mean(x, axis=(1, 2), keepdims=True)))
        return ACTIVATIONS[self.scale_activation](self.fc2(scale)) * x


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
                out = ACTIVATIONS[activation](norm(conv(out)))
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
                x = ACTIVATIONS[activation](norm(conv(x)))
        x = ACTIVATIONS[self.classifier_activation](self.classifier_fc1(jnp.mean(x, axis=(1, 2))))
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
