"""A JAX definition made from a PyTorch module (docs/jax.md): the structure read from the module
(depths, widths, heads, each MobileNetV3 block's layers), so every size of a family is one definition,
and the module's `state_dict` copied into it by name (`load_torch_state`), a weight left over or
missing failing the copy.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

import jax.numpy as jnp
import numpy as np
from flax import nnx

from mlscope.runtime.predictors.base import PredictorError
from mlscope.runtime.predictors.jax.models import (
    ACTIVATIONS,
    Bert,
    Decoder,
    MobileNetV3,
    ResNet,
    VisionTransformer,
)

__all__ = ["from_torch", "load_torch_state", "parameters"]


def _abstract(make: Any) -> Any:
    """The module `make(rngs)` returns, with shapes and no weights (nothing is initialised: the
    PyTorch weights fill it)."""
    return nnx.eval_shape(lambda: make(nnx.Rngs(0)))


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
    if activation not in ACTIVATIONS:
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
                if not activations <= set(ACTIVATIONS):
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
    if kinds != ["Linear", kinds[1], "Dropout", "Linear"] or kinds[1] not in ACTIVATIONS:
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
