"""Output parity: do two frameworks give the same answers on the same inputs?

For each output the two arrays are compared element-wise and per sample: maximum and mean absolute
difference, maximum relative difference (against the reference's scale, so a near-zero element does
not make a harmless difference look huge), the lowest per-sample cosine similarity and, for score
vectors, how often the top-1 class agrees. The verdict is "same" when every output's largest
difference is within `atol + rtol · max|reference|`, with tolerances chosen by the outputs' dtype
unless given. What is compared are the raw outputs before postprocessing: a difference there is the
framework's, since the pre- and postprocessing are the same code on both sides.
"""

from __future__ import annotations

import base64
from typing import Any

import numpy as np

from mlscope.contract.errors import UserError
from mlscope.contract.manifest import Manifest

__all__ = [
    "DEFAULT_TOLERANCES",
    "compare_outputs",
    "decode_outputs",
    "encode_outputs",
    "score_outputs",
    "tolerance_for",
]

# Postprocessing that makes an output a score per class: top-1 agreement means something for it.
_SCORING_STEPS = frozenset({"softmax", "topk", "argmax"})

# (rtol, atol) by dtype: reduced precisions round at about 1e-3 (float16) and 1e-2 (bfloat16);
# float32 kernels that differ in summation order or fused instructions drift by ~1e-6 relative per
# layer, so 1e-3 of the output's scale leaves room for deep networks while a changed weight or a
# wrong operator (differences of whole percents) still fails.
DEFAULT_TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-7, 1e-9),
    "float32": (1e-3, 1e-5),
    "float16": (1e-2, 1e-3),
    "bfloat16": (5e-2, 1e-2),
}


def tolerance_for(dtype: np.dtype, rtol: float | None = None) -> tuple[float, float]:
    """(rtol, atol) for outputs of `dtype`; integer and boolean outputs must match exactly."""
    name = np.dtype(dtype).name
    if np.dtype(dtype).kind in "biu":
        default = (0.0, 0.0)
    else:
        default = DEFAULT_TOLERANCES.get(name, DEFAULT_TOLERANCES["float32"])
    return (default[0] if rtol is None else rtol), default[1]


def score_outputs(manifest: Manifest) -> frozenset[str]:
    """The outputs a manifest treats as class scores (postprocessed by softmax, topk or argmax)."""
    return frozenset(o.name for o in manifest.outputs if any(step.name in _SCORING_STEPS for step in o.steps))


def encode_outputs(outputs: dict[str, np.ndarray]) -> dict[str, dict[str, Any]]:
    """Arrays as JSON-safe documents (dtype, shape, base64 of the bytes), to cross a pipe."""
    encoded = {}
    for name, array in outputs.items():
        contiguous = np.ascontiguousarray(array)
        dtype = contiguous.dtype if contiguous.dtype.kind != "V" else np.dtype("float32")
        encoded[name] = {
            "dtype": dtype.str,
            "shape": list(contiguous.shape),
            "data": base64.b64encode(contiguous.astype(dtype, copy=False).tobytes()).decode("ascii"),
        }
    return encoded


def decode_outputs(encoded: dict[str, dict[str, Any]]) -> dict[str, np.ndarray]:
    """The arrays `encode_outputs` encoded."""
    return {
        name: np.frombuffer(base64.b64decode(doc["data"]), dtype=np.dtype(doc["dtype"])).reshape(doc["shape"])
        for name, doc in encoded.items()
    }


def _compare_one(
    reference: np.ndarray, candidate: np.ndarray, rtol: float, atol: float, scores: bool
) -> dict[str, Any]:
    ref = reference.astype(np.float64).reshape(len(reference), -1)
    cand = candidate.astype(np.float64).reshape(len(candidate), -1)
    difference = np.abs(ref - cand)
    scale = float(np.abs(ref).max()) if ref.size else 0.0
    max_abs = float(difference.max()) if difference.size else 0.0
    norms = np.linalg.norm(ref, axis=1) * np.linalg.norm(cand, axis=1)
    dots = np.einsum("ij,ij->i", ref, cand)
    # Two all-zero samples are the same (cosine 1); one zero against a non-zero one is not.
    cosines = np.where(norms > 0, dots / np.where(norms > 0, norms, 1.0), np.where(dots == 0, 1.0, 0.0))
    both_zero = (np.linalg.norm(ref, axis=1) == 0) & (np.linalg.norm(cand, axis=1) == 0)
    cosines = np.where(both_zero, 1.0, cosines)
    top1 = None
    if scores and reference.ndim == 2 and reference.shape[1] > 1 and reference.dtype.kind == "f":
        top1 = round(float(np.mean(np.argmax(ref, axis=1) == np.argmax(cand, axis=1))), 6)
    same = max_abs <= atol + rtol * scale
    return {
        "verdict": "same" if same else "different",
        "max_abs": max_abs,
        "mean_abs": float(difference.mean()) if difference.size else 0.0,
        # An all-zero reference has no scale: a difference is then relative to 1.
        "max_rel": max_abs / scale if scale > 0 else max_abs,
        "cosine": round(float(cosines.min()), 9) if cosines.size else 1.0,
        "top1_agreement": top1,
        "tolerance": {"rtol": rtol, "atol": atol},
    }


def compare_outputs(
    reference: dict[str, np.ndarray],
    candidate: dict[str, np.ndarray],
    *,
    against: str,
    rtol: float | None = None,
    scores: frozenset[str] | None = None,
) -> dict[str, Any]:
    """Compare a candidate's outputs with a reference's, output by output, sample by sample.

    Args:
        reference: the reference framework's outputs by name, samples on the first axis.
        candidate: the same outputs from the framework under test.
        against: the reference framework's name (recorded).
        rtol: the relative tolerance; None for the outputs' dtype's default (DEFAULT_TOLERANCES).
        scores: the outputs that are class scores, whose top-1 agreement is reported (None: every
            2-D float output; an embedding's "top-1" means nothing, so callers pass
            `score_outputs(manifest)`).

    Returns:
        The result's `parity` section: the worst output's figures at the top, each output's under
        "outputs", and the verdict ("same" only if every output is).

    Raises:
        UserError: the two have no output in common, or an output's shapes differ.
    """
    names = [name for name in reference if name in candidate]
    if not names:
        raise UserError(
            f"no output in common: the reference ({against}) has {', '.join(reference) or 'none'}, "
            f"the candidate {', '.join(candidate) or 'none'}"
        )
    per_output = {}
    for name in names:
        ref, cand = np.asarray(reference[name]), np.asarray(candidate[name])
        if ref.shape != cand.shape:
            raise UserError(f"output {name!r}: shape {cand.shape} against the reference's {ref.shape}")
        rtol_used, atol = tolerance_for(ref.dtype, rtol)
        per_output[name] = _compare_one(ref, cand, rtol_used, atol, scores is None or name in scores)
    worst = max(per_output.values(), key=lambda o: (o["verdict"] == "different", o["max_rel"]))
    agreements = [o["top1_agreement"] for o in per_output.values() if o["top1_agreement"] is not None]
    return {
        "against": against,
        "count": len(np.asarray(reference[names[0]])),
        "verdict": "same" if all(o["verdict"] == "same" for o in per_output.values()) else "different",
        "max_abs": max(o["max_abs"] for o in per_output.values()),
        "mean_abs": float(np.mean([o["mean_abs"] for o in per_output.values()])),
        "max_rel": worst["max_rel"],
        "cosine": min(o["cosine"] for o in per_output.values()),
        "top1_agreement": min(agreements) if agreements else None,
        "tolerance": worst["tolerance"],
        "outputs": per_output,
    }
