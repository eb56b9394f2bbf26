"""The prompts an endpoint run sends: texts of about the asked number of tokens, the same for the same
(seed, index) on every machine, from a fixed word list or from the model's own tokenizer."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

from mlscope.contract.errors import UserError

__all__ = ["PromptText", "synthetic_prompt", "tokenizer_prompt"]

# Short, frequent English words: each is one token in every common BPE vocabulary (GPT-2, Llama,
# Qwen, ...) when preceded by a space, so a prompt of n words is about n tokens.
_WORD_TEXT = (
    "the of and to in is was for that on as with by he at from his it an were are which this be or "
    "had not but first one their its new after who they have her she two been other when there all "
    "during into school time may years more most only over city some world would where later up "
    "such used many can state about national out known university united then made"
)
_WORDS = _WORD_TEXT.split()

PromptText = Callable[[int, int, int], str]


def synthetic_prompt(n_tokens: int, seed: int, index: int) -> str:
    """A prompt of about `n_tokens` tokens, the same for the same (seed, index) on every machine.

    Words are drawn from a fixed list of frequent English words, each one token in common BPE
    vocabularies; a tokenizer that splits them differently sees a longer prompt (the server's
    `usage.prompt_tokens` then records the true count).
    """
    generator = random.Random(seed * 1_000_003 + index)
    return " ".join(generator.choice(_WORDS) for _ in range(max(1, n_tokens)))


def tokenizer_prompt(directory: str | Path) -> PromptText:
    """A prompt maker for the model's own tokenizer (`tokenizer.json` in `directory`): decodes seeded
    random token ids, so a model whose vocabulary has no English words still sees about n tokens.

    Raises:
        UserError: the directory has no tokenizer.json (field "tokenizer_directory").
    """
    path = Path(directory) / "tokenizer.json"
    if not path.is_file():
        raise UserError(f"no tokenizer.json in {directory}", field="tokenizer_directory")
    from tokenizers import Tokenizer  # a model directory's own dependency, loaded when one is given

    tokenizer = Tokenizer.from_file(str(path))
    special = {token.content for token in tokenizer.get_added_tokens_decoder().values() if token.special}
    # Byte pieces that are not whole characters would decode to U+FFFD: leave them out.
    ids = sorted(
        i
        for token, i in tokenizer.get_vocab().items()
        if token not in special and "\ufffd" not in tokenizer.decode([i])
    )
    if not ids:
        raise UserError(f"the tokenizer in {directory} has no ordinary tokens", field="tokenizer_directory")

    def prompt(n_tokens: int, seed: int, index: int) -> str:
        generator = random.Random(seed * 1_000_003 + index)
        text = str(tokenizer.decode([generator.choice(ids) for _ in range(max(1, n_tokens))]))
        # Decoded ids re-encode to other, often more, tokens: keep the text of the first n of those.
        return str(tokenizer.decode(tokenizer.encode(text, add_special_tokens=False).ids[: max(1, n_tokens)]))

    return prompt
