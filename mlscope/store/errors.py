"""What the store raises. Each but one is a `UserError` (the caller named something that is not
there, or asked for a change the lifecycle forbids), so the CLI exits with code 2 and the API answers
4xx. `StoreUnavailable` is the store's own trouble (its server unreachable, a connection lost
mid-transaction, a full disk, a locked database): the call was rolled back, and trying again later
may succeed; the API answers 503."""

from __future__ import annotations

from collections.abc import Sequence

from mlscope.contract.errors import StoreUnavailable, UserError

__all__ = [
    "CANDIDATES_SHOWN",
    "AmbiguousEvaluationId",
    "AmbiguousSystemId",
    "EvaluationNotFound",
    "InvalidTransition",
    "StoreUnavailable",
    "SystemNotFound",
]

# How many candidates an ambiguous-prefix error lists before eliding the rest.
CANDIDATES_SHOWN = 10


class EvaluationNotFound(UserError):
    """No evaluation has this id (or id prefix)."""

    def __init__(self, id: str, hint: str = "") -> None:
        super().__init__(f"no evaluation with id {id!r}{hint}", field="id")
        self.id = id


class _AmbiguousId(UserError):
    """An id prefix that matches more than one record of a kind; `candidates` lists (some of) them."""

    def __init__(self, kind: str, field: str, prefix: str, candidates: Sequence[str]) -> None:
        shown = ", ".join(candidates[:CANDIDATES_SHOWN])
        more = ", ..." if len(candidates) > CANDIDATES_SHOWN else ""
        super().__init__(
            f"{kind} id prefix {prefix!r} is ambiguous: it matches {shown}{more}; give more characters",
            field=field,
        )
        self.prefix = prefix
        self.candidates = list(candidates)


class AmbiguousEvaluationId(_AmbiguousId):
    """An id prefix matches more than one evaluation; `candidates` lists (some of) them."""

    def __init__(self, prefix: str, candidates: Sequence[str]) -> None:
        super().__init__("evaluation", "id", prefix, candidates)


class InvalidTransition(UserError):
    """The evaluation's current status does not allow the requested change."""

    def __init__(self, id: str, current: str, target: str) -> None:
        super().__init__(f"evaluation {id} is {current}: it cannot become {target}", field="status")
        self.id = id
        self.current = current
        self.target = target


class SystemNotFound(UserError):
    """No system has this id (or id prefix)."""

    def __init__(self, id: str, hint: str = "") -> None:
        super().__init__(f"no system with id {id!r}{hint}", field="system_id")
        self.id = id


class AmbiguousSystemId(_AmbiguousId):
    """A system id prefix matches more than one system; `candidates` lists (some of) them."""

    def __init__(self, prefix: str, candidates: Sequence[str]) -> None:
        super().__init__("system", "system_id", prefix, candidates)
