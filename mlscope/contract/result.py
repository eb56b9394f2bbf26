"""What a result as a whole says about itself beyond its figures: the verdicts a parity section may
hold, the validity reason a "different" parity gives, and whether a succeeded result may be taken as
valid at all. One rule, read by the store's comparison rows, the CLI's tables, the Python API and the
HTTP API alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["PARITY_VERDICTS", "parity_failure", "result_validity"]

# A parity section's verdict: its outputs agree with the reference framework's within the tolerance,
# or they do not; "unavailable" when the reference could not run (its error is kept), which claims
# nothing either way.
PARITY_VERDICTS = ("same", "different", "unavailable")


def parity_failure(parity: Mapping[str, Any] | None) -> str | None:
    """The validity reason a parity section gives, "parity different from <against>"; None when it
    passed or there is none."""
    if not parity or parity.get("verdict") != "different":
        return None
    return f"parity different from {parity.get('against') or 'the reference'}"


def result_validity(result: Mapping[str, Any]) -> dict[str, Any]:
    """Whether a succeeded result as a whole may be taken as valid, in the shape of a measurement's
    validity: {"valid": bool, "reasons": [...]}. It is not when every measurement is invalid or its
    parity was "different"; some measurements invalid leave it valid with a reason, as a measurement's
    warnings do. A result that did not succeed is not valid, with no reason: its status and error say
    why.
    """
    if result.get("status") != "succeeded":
        return {"valid": False, "reasons": []}
    valid, reasons = True, []
    measurements = result.get("measurements") or []
    invalid = sum(1 for m in measurements if (m.get("validity") or {}).get("valid") is not True)
    if not measurements:
        valid = False
        reasons.append("no measurements")
    elif invalid == len(measurements):
        valid = False
        reasons.append("every measurement invalid" if invalid > 1 else "its measurement is invalid")
    elif invalid:
        reasons.append(f"{invalid} of {len(measurements)} measurements invalid")
    failure = parity_failure(result.get("parity"))
    if failure is not None:
        valid = False
        reasons.append(failure)
    return {"valid": valid, "reasons": reasons}
