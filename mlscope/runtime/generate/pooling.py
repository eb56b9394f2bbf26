"""What the endpoint engine sends to and checks in a pooling API's answer: embeddings (OpenAI's
POST /embeddings) and rerank (the Jina/Cohere-style POST /rerank that vLLM, SGLang and TEI serve).

Such a request is answered once, as one JSON body: no tokens stream, so the engine times it end to
end. The answer is checked before the request counts as served (docs/generate.md, "Embeddings and
rerank"): an embedding per input, all of one dimension, each a list of numbers; a rerank result per
document, each index in range and named once, each with a numeric score. What fails the check is the
request's error (`MalformedAnswer`), never the run's.
"""

from __future__ import annotations

import json
import math
from typing import Any

from mlscope.contract.errors import MlscopeError

__all__ = ["MalformedAnswer", "check_answer", "pooling_body"]


class MalformedAnswer(MlscopeError):
    """An answer that is not what the API promises; its message is the request's error."""


def pooling_body(api: str, model: str, texts: list[str]) -> dict[str, Any]:
    """The JSON body of one request: for "embeddings" every text as an input; for "rerank" the first
    text as the query and the others as the documents, all of them asked back (top_n)."""
    if api == "embeddings":
        return {"model": model, "input": texts, "encoding_format": "float"}
    return {"model": model, "query": texts[0], "documents": texts[1:], "top_n": len(texts) - 1}


def check_answer(api: str, body: bytes, texts: int) -> int | None:
    """Check one answer to a request of `texts` texts (rerank: the query and the documents).

    Returns:
        The input tokens the server counted (its usage's prompt_tokens, else total_tokens), None when
        it says none.

    Raises:
        MalformedAnswer: the body is not JSON, or not the API's answer for that many texts, saying
            what is wrong.
    """
    try:
        answer = json.loads(body)
    except ValueError:
        shown = body[:80].decode("utf-8", "replace")
        raise MalformedAnswer(f"malformed answer: not JSON: {shown!r}") from None
    if not isinstance(answer, dict):
        raise MalformedAnswer(f"malformed answer: a JSON {type(answer).__name__}, not an object")
    if api == "embeddings":
        _check_embeddings(answer, texts)
    else:
        _check_ranking(answer, texts - 1)
    usage = answer.get("usage")
    if isinstance(usage, dict):
        for key in ("prompt_tokens", "total_tokens"):
            value = usage.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return None


def _check_embeddings(answer: dict[str, Any], inputs: int) -> None:
    data = answer.get("data")
    if not isinstance(data, list):
        raise MalformedAnswer("malformed answer: no data list of embeddings")
    if len(data) != inputs:
        raise MalformedAnswer(f"malformed answer: {len(data)} embeddings for {inputs} inputs")
    dimensions: set[int] = set()
    for position, item in enumerate(data):
        vector = item.get("embedding") if isinstance(item, dict) else None
        if not isinstance(vector, list) or not vector or not all(_number(v) for v in vector):
            raise MalformedAnswer(f"malformed answer: embedding {position} is not a list of numbers")
        dimensions.add(len(vector))
    if len(dimensions) > 1:
        shown = ", ".join(str(d) for d in sorted(dimensions))
        raise MalformedAnswer(f"malformed answer: embeddings of different dimensions ({shown})")
    indices = [item.get("index") for item in data]
    if all(index is not None for index in indices) and sorted(indices) != list(range(inputs)):
        raise MalformedAnswer(f"malformed answer: embedding indices {indices[:8]} are not 0 to {inputs - 1}")


def _check_ranking(answer: dict[str, Any], documents: int) -> None:
    results = answer.get("results")
    if not isinstance(results, list):
        raise MalformedAnswer("malformed answer: no results list")
    if len(results) != documents:
        raise MalformedAnswer(f"malformed answer: {len(results)} results for {documents} documents")
    seen: set[int] = set()
    for item in results:
        index = item.get("index") if isinstance(item, dict) else None
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < documents:
            raise MalformedAnswer(
                f"malformed answer: result index {index!r} out of range for {documents} documents"
            )
        if index in seen:
            raise MalformedAnswer(f"malformed answer: document {index} ranked twice")
        seen.add(index)
        if not _number(item.get("relevance_score")):
            raise MalformedAnswer(f"malformed answer: document {index} has no numeric relevance_score")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
