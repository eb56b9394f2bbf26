"""The transformers part of the catalogue: a curated list of architectures, each described from the
installed transformers' own configuration and model classes.

The list (`ARCHITECTURES`) is chosen by hand: model types that `AutoModel` builds from a configuration
alone and that take one kind of input (token ids, pixels or audio samples). Everything else is read
from the library: the vocabulary size (the token ids' value range), the image size, the model class
and the order of its forward arguments. The model is `AutoModel` (no task head), so the output is its
`last_hidden_state`.

Where the default configuration is a large model, a small override shrinks it to run on a small CPU:
text encoders and encoder-decoders to BERT-base or T5-small scale, decoder language models to a
"tiny" 4-layer, 512-wide model (`_TINY`, `_TINY_GQA`). The overrides are part of the manifest's
source, so they are what gets built everywhere.

Left out on purpose: model types that are another one under a new name (camembert, xlm-roberta,
data2vec-text, ibert, flaubert, bert-generation, ernie, splinter, luke, vit_msn, ijepa,
dinov2_with_registers, data2vec-vision, data2vec-audio, unispeech, mvp), models needing more than one
kind of input (CLIP-style text+image, layout models needing boxes beyond layoutlm's optional ones,
roc_bert's shape and pronunciation ids), models needing kernels or packages not installed (dinat and
nat need natten, mra needs its custom kernel), and block-sparse attention that falls back to full
attention at 128 tokens (big_bird, bigbird_pegasus).

Imported by `generate` only: it imports transformers.
"""

from __future__ import annotations

import inspect
from typing import Any

__all__ = ["ARCHITECTURES", "SEQUENCE_LENGTH", "transformers_entries", "transformers_version"]

SEQUENCE_LENGTH = 128
AUDIO_SAMPLES = 16000  # one second at 16 kHz
_DEFAULT_IMAGE_SIZE = 224
OUTPUT = "last_hidden_state"

# A decoder language model shrunk to run on a laptop CPU: 4 layers, width 512, 8 heads of size 64.
# Its attention keeps the kind the default configuration has: one key/value head per query head
# (_TINY), or grouped-query attention (_TINY_GQA, 2 key/value heads); `_check_overrides` holds to it.
_TINY = {
    "hidden_size": 512,
    "intermediate_size": 1408,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 8,
}
_TINY_GQA = {**_TINY, "num_key_value_heads": 2}
_HEAD = {"head_dim": 64}  # for configurations that set the head size apart from the width
_BERT_BASE = {
    "hidden_size": 768,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "intermediate_size": 3072,
}
_BART_BASE = {
    "d_model": 768,
    "encoder_layers": 6,
    "decoder_layers": 6,
    "encoder_attention_heads": 12,
    "decoder_attention_heads": 12,
    "encoder_ffn_dim": 3072,
    "decoder_ffn_dim": 3072,
}
_MARIAN = {
    "d_model": 512,
    "encoder_layers": 6,
    "decoder_layers": 6,
    "encoder_attention_heads": 8,
    "decoder_attention_heads": 8,
    "encoder_ffn_dim": 2048,
    "decoder_ffn_dim": 2048,
}

# group: (task, what the inputs are, for descriptions)
GROUPS = {
    "encoder": ("text_embedding", "token ids"),
    "decoder": ("text_embedding", "token ids"),
    "encoder-decoder": ("text_embedding", "token ids for the encoder and the decoder"),
    "vision": ("image_classification", "images"),
    "audio": ("other", "audio samples"),
    "speech-seq2seq": ("other", "log-mel features and decoder token ids"),
}

# (model type, group, config overrides, task if not the group's)
ARCHITECTURES: tuple[tuple[str, str, dict[str, Any], str | None], ...] = (
    # ---- text encoders
    ("albert", "encoder", {"hidden_size": 768, "num_attention_heads": 12, "intermediate_size": 3072}, None),
    ("bert", "encoder", {}, None),
    ("convbert", "encoder", {}, None),
    ("deberta", "encoder", {}, None),
    ("deberta-v2", "encoder", _BERT_BASE, None),
    ("distilbert", "encoder", {}, None),
    ("electra", "encoder", {}, None),
    # ESM-2's amino-acid alphabet and its padding and mask tokens: the default configuration has none.
    ("esm", "encoder", {"vocab_size": 33, "pad_token_id": 1, "mask_token_id": 32}, None),
    ("fnet", "encoder", {}, None),
    # AutoModel maps funnel to two classes and, with no `architectures`, fails to pick one.
    ("funnel", "encoder", {"architectures": ["FunnelModel"]}, None),
    ("layoutlm", "encoder", {}, None),
    ("longformer", "encoder", {}, None),
    ("megatron-bert", "encoder", _BERT_BASE, None),
    ("mobilebert", "encoder", {}, None),
    ("modernbert", "encoder", {}, None),
    ("mpnet", "encoder", {}, None),
    ("nomic_bert", "encoder", {}, None),
    ("nystromformer", "encoder", {}, None),
    ("reformer", "encoder", {}, None),
    ("rembert", "encoder", _BERT_BASE, None),
    ("roberta", "encoder", {}, None),
    ("roberta-prelayernorm", "encoder", {}, None),
    ("roformer", "encoder", {}, None),
    ("squeezebert", "encoder", {}, None),
    ("xlm", "encoder", {"emb_dim": 768, "n_layers": 12, "n_heads": 12}, None),
    ("xlnet", "encoder", {"d_model": 768, "n_layer": 12, "n_head": 12, "d_inner": 3072}, None),
    ("yoso", "encoder", {}, None),
    # ---- decoder language models
    ("biogpt", "decoder", {"hidden_size": 512, "num_hidden_layers": 4, "num_attention_heads": 8}, None),
    ("bloom", "decoder", {"hidden_size": 512, "n_layer": 4, "n_head": 8}, None),
    ("codegen", "decoder", {"n_embd": 512, "n_layer": 4, "n_head": 8, "rotary_dim": 32}, None),
    ("cohere", "decoder", _TINY, None),
    ("ctrl", "decoder", {"n_embd": 512, "dff": 2048, "n_layer": 4, "n_head": 8}, None),
    ("falcon", "decoder", {"hidden_size": 512, "num_hidden_layers": 4, "num_attention_heads": 8}, None),
    ("gemma", "decoder", {**_TINY, **_HEAD}, None),
    ("gemma2", "decoder", {**_TINY_GQA, **_HEAD}, None),
    ("glm", "decoder", {**_TINY_GQA, **_HEAD}, None),
    ("glm4", "decoder", {**_TINY_GQA, **_HEAD}, None),
    ("gpt2", "decoder", {}, None),
    ("gpt_bigcode", "decoder", {}, None),
    (
        "gpt_neo",
        "decoder",
        {
            "hidden_size": 768,
            "num_layers": 12,
            "num_heads": 12,
            "attention_types": [[["global", "local"], 6]],
        },
        None,
    ),
    (
        "gpt_neox",
        "decoder",
        {"hidden_size": 512, "intermediate_size": 2048, "num_hidden_layers": 4, "num_attention_heads": 8},
        None,
    ),
    ("gptj", "decoder", {"n_embd": 512, "n_layer": 4, "n_head": 8, "rotary_dim": 32}, None),
    ("granite", "decoder", _TINY, None),
    ("helium", "decoder", {**_TINY, **_HEAD}, None),
    (
        "jamba",
        "decoder",
        {**_TINY_GQA, "num_hidden_layers": 8, "num_experts": 4, "use_mamba_kernels": False},
        None,
    ),
    ("llama", "decoder", _TINY, None),
    ("mamba", "decoder", {"hidden_size": 512, "num_hidden_layers": 4}, None),
    (
        "mamba2",
        "decoder",
        {"hidden_size": 512, "num_hidden_layers": 4, "num_heads": 16, "head_dim": 64},
        None,
    ),
    ("mistral", "decoder", {**_TINY_GQA, **_HEAD}, None),
    ("mixtral", "decoder", {**_TINY_GQA, **_HEAD}, None),
    ("mpt", "decoder", {"d_model": 512, "n_layers": 4, "n_heads": 8}, None),
    ("nemotron", "decoder", {**_TINY, **_HEAD}, None),
    ("olmo", "decoder", _TINY, None),
    ("olmo2", "decoder", _TINY, None),
    ("olmoe", "decoder", {**_TINY, "num_experts": 8, "num_experts_per_tok": 2}, None),
    ("openai-gpt", "decoder", {}, None),
    ("opt", "decoder", {}, None),
    (
        "persimmon",
        "decoder",
        {"hidden_size": 512, "intermediate_size": 2048, "num_hidden_layers": 4, "num_attention_heads": 8},
        None,
    ),
    ("phi", "decoder", _TINY, None),
    ("phi3", "decoder", _TINY, None),
    ("qwen2", "decoder", _TINY, None),
    (
        "qwen2_moe",
        "decoder",
        {
            **_TINY,
            "moe_intermediate_size": 352,
            "shared_expert_intermediate_size": 1408,
            "num_experts": 8,
            "num_experts_per_tok": 2,
        },
        None,
    ),
    ("qwen3", "decoder", {**_TINY, **_HEAD}, None),
    ("recurrent_gemma", "decoder", {**_TINY, "intermediate_size": 1536, "lru_width": 512}, None),
    (
        "rwkv",
        "decoder",
        {"hidden_size": 512, "num_hidden_layers": 4, "attention_hidden_size": 512, "intermediate_size": 2048},
        None,
    ),
    ("smollm3", "decoder", _TINY_GQA, None),
    ("stablelm", "decoder", _TINY, None),
    ("starcoder2", "decoder", _TINY_GQA, None),
    ("xglm", "decoder", {"d_model": 512, "ffn_dim": 2048, "num_layers": 4, "attention_heads": 8}, None),
    # ---- encoder-decoders (two inputs: the encoder's token ids and the decoder's)
    ("bart", "encoder-decoder", _BART_BASE, None),
    ("blenderbot", "encoder-decoder", _MARIAN, None),
    ("blenderbot-small", "encoder-decoder", {}, None),
    ("led", "encoder-decoder", _BART_BASE, None),
    ("longt5", "encoder-decoder", {}, None),
    ("m2m_100", "encoder-decoder", _MARIAN, None),
    ("marian", "encoder-decoder", _MARIAN, None),
    ("mbart", "encoder-decoder", _BART_BASE, None),
    ("mt5", "encoder-decoder", {}, None),
    ("pegasus", "encoder-decoder", _BART_BASE, None),
    ("plbart", "encoder-decoder", {}, None),
    (
        "prophetnet",
        "encoder-decoder",
        {
            "hidden_size": 512,
            "num_encoder_layers": 6,
            "num_decoder_layers": 6,
            "num_encoder_attention_heads": 8,
            "num_decoder_attention_heads": 8,
            "encoder_ffn_dim": 2048,
            "decoder_ffn_dim": 2048,
        },
        None,
    ),
    ("switch_transformers", "encoder-decoder", {"num_layers": 6, "num_decoder_layers": 6}, None),
    ("t5", "encoder-decoder", {}, None),
    ("umt5", "encoder-decoder", {}, None),
    # ---- vision backbones
    ("beit", "vision", {}, None),
    ("bit", "vision", {}, None),
    ("convnext", "vision", {}, None),
    ("convnextv2", "vision", {}, None),
    ("cvt", "vision", {}, None),
    ("deit", "vision", {}, None),
    ("dinov2", "vision", {}, None),
    # The default is EfficientNet-B7 at 600 pixels; these are B0's coefficients and size.
    (
        "efficientnet",
        "vision",
        {"width_coefficient": 1.0, "depth_coefficient": 1.0, "image_size": 224, "hidden_dim": 1280},
        None,
    ),
    ("focalnet", "vision", {}, None),
    ("hiera", "vision", {}, None),
    ("levit", "vision", {}, None),
    ("mobilenet_v1", "vision", {}, None),
    ("mobilenet_v2", "vision", {}, None),
    ("mobilevit", "vision", {}, None),
    ("mobilevitv2", "vision", {}, None),
    ("poolformer", "vision", {}, None),
    ("pvt", "vision", {}, None),
    ("pvt_v2", "vision", {}, None),
    ("regnet", "vision", {}, None),
    ("resnet", "vision", {}, None),
    ("segformer", "vision", {}, "semantic_segmentation"),
    ("swiftformer", "vision", {}, None),
    ("swin", "vision", {}, None),
    ("swinv2", "vision", {}, None),
    ("vit", "vision", {}, None),
    ("yolos", "vision", {}, "object_detection"),
    # ---- speech
    ("hubert", "audio", {}, None),
    ("sew", "audio", {}, None),
    ("sew-d", "audio", {}, None),
    ("wav2vec2", "audio", {}, None),
    ("wav2vec2-conformer", "audio", {}, None),
    ("wavlm", "audio", {}, None),
    ("whisper", "speech-seq2seq", {}, None),
)


def transformers_version() -> str:
    import transformers

    return str(transformers.__version__)


def _model_class(config: Any) -> Any:
    """The class `AutoModel.from_config(config)` builds (where a type maps to several, the first)."""
    import transformers
    from transformers.models.auto.auto_factory import _get_model_class

    return _get_model_class(config, transformers.AutoModel._model_mapping)


def _grouped(config: Any) -> bool:
    """Whether the attention is grouped-query: fewer key/value heads than query heads."""
    heads = config.num_attention_heads
    return (getattr(config, "num_key_value_heads", None) or heads) < heads


def _check_overrides(model_type: str, config: Any, overrides: dict[str, Any], default: Any) -> None:
    """Every override names a parameter of the configuration and took effect (a misspelt one would
    be kept as a stray attribute and silently build the large default model), the heads tile the
    width, and a shrunk model keeps the default's kind of attention (grouped-query or not)."""
    known = set(inspect.signature(type(config).__init__).parameters) | set(config.attribute_map)
    for key, value in overrides.items():
        if key not in known:
            raise ValueError(f"{model_type}: {type(config).__name__} takes no parameter {key!r}")
        if getattr(config, key) != value and not isinstance(value, list):
            raise ValueError(f"{model_type}: {key}={value!r} did not take ({getattr(config, key)!r})")
    head_dim = getattr(config, "head_dim", None)
    heads, hidden = getattr(config, "num_attention_heads", None), getattr(config, "hidden_size", None)
    if overrides and isinstance(head_dim, int) and heads and hidden and head_dim * heads != hidden:
        raise ValueError(f"{model_type}: head_dim {head_dim} x {heads} heads is not the width {hidden}")
    if "num_key_value_heads" in overrides and _grouped(config) != _grouped(default):
        kind = "grouped-query" if _grouped(default) else "one key/value head per query head"
        raise ValueError(f"{model_type}: the default configuration has {kind} attention; keep it")


def _tokens(name: str, config: Any) -> dict[str, Any]:
    vocabulary = getattr(config, "vocab_size", None)
    if not isinstance(vocabulary, int) or vocabulary < 2:
        raise ValueError(f"{config.model_type}: no vocabulary size to draw token ids from")
    return {
        "name": name,
        "shape": [SEQUENCE_LENGTH],
        "dtype": "int64",
        "layout": "NT",
        "value_range": [0, vocabulary],
    }


def _image_size(config: Any) -> list[int]:
    size = getattr(config, "image_size", None) or _DEFAULT_IMAGE_SIZE
    return [int(size), int(size)] if isinstance(size, int) else [int(side) for side in size]


def _inputs(group: str, config: Any) -> list[dict[str, Any]]:
    if group in ("encoder", "decoder"):
        return [_tokens("input_ids", config)]
    if group == "encoder-decoder":
        return [_tokens("input_ids", config), _tokens("decoder_input_ids", config)]
    if group == "vision":
        channels = int(getattr(config, "num_channels", 3))
        return [
            {
                "name": "pixel_values",
                "shape": [channels, *_image_size(config)],
                "dtype": "float32",
                "layout": "NCHW",
            }
        ]
    if group == "audio":
        return [
            {
                "name": "input_values",
                "shape": [AUDIO_SAMPLES],
                "dtype": "float32",
                "layout": "NT",
                "value_range": [-1.0, 1.0],
            }
        ]
    # Whisper: 30 s of log-mel frames (twice the encoder's positions, halved by its convolutions).
    features = [int(config.num_mel_bins), 2 * int(config.max_source_positions)]
    return [
        {"name": "input_features", "shape": features, "dtype": "float32", "layout": "NCT"},
        _tokens("decoder_input_ids", config),
    ]


def _ordered(model_type: str, model_class: Any, inputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The inputs in the order of the model's forward arguments (a predictor passes them in order)."""
    parameters = list(inspect.signature(model_class.forward).parameters)
    missing = [spec["name"] for spec in inputs if spec["name"] not in parameters]
    if missing:
        raise ValueError(f"{model_type}: {model_class.__name__}.forward takes no {', '.join(missing)}")
    return sorted(inputs, key=lambda spec: parameters.index(spec["name"]))


def _description(model_type: str, group: str, model_class: Any, overrides: dict[str, Any]) -> str:
    shrunk = ""
    if overrides:
        shown = ", ".join(f"{key}={value}" for key, value in overrides.items() if not isinstance(value, list))
        shrunk = f" with {shown}"
    return (
        f"transformers' {model_class.__name__} (model type '{model_type}', no task head) built from its "
        f"default configuration{shrunk}; random weights, synthetic {GROUPS[group][1]} "
        f"(no tokenizer or feature extractor); the output is its {OUTPUT}."
    )


def transformers_entries() -> list[dict[str, Any]]:
    """One entry document per curated architecture, sorted by ref (frameworks are added later)."""
    import transformers

    transformers.logging.set_verbosity_error()
    entries = []
    for model_type, group, overrides, task in ARCHITECTURES:
        config = transformers.AutoConfig.for_model(model_type, **overrides)
        _check_overrides(model_type, config, overrides, transformers.AutoConfig.for_model(model_type))
        model_class = _model_class(config)
        inputs = _ordered(model_type, model_class, _inputs(group, config))
        entries.append(
            {
                "ref": f"hf:{model_type}",
                "name": model_type,
                "library": "transformers",
                "family": model_type.replace("-", "_"),
                "group": group,
                "task": task or GROUPS[group][0],
                "description": _description(model_type, group, model_class, overrides),
                "source": {
                    "transformers": {"model_type": model_type, "config": dict(overrides), "output": OUTPUT}
                },
                "inputs": inputs,
                "outputs": [{"name": OUTPUT}],
            }
        )
    return sorted(entries, key=lambda entry: entry["ref"])
