"""The store writes a worker makes at an evaluation's start and end, named: what the pipeline hands
to its `Writes` and what the spool keeps on disk (workers.spool) to replay later.

The set is closed: `StoreWrite` names each write by the Store method it calls, and `apply` calls
that method itself, so a name read back from a spool file can only ever become one of these calls
(an unknown name is refused before the store is touched). The values are the method names the spool
has always written, so a spool written by an earlier worker still replays.
"""

from __future__ import annotations

import enum
from typing import Any

from mlscope.contract.errors import UserError
from mlscope.store import Store

__all__ = ["StoreWrite", "apply"]


class StoreWrite(str, enum.Enum):
    """A store write by the Store method it calls; each is idempotent once the evaluation has ended.
    A member is a string, its method name, wherever it is written (a spool file's name and body, a
    log line)."""

    START = "start_evaluation"
    FINISH = "finish_evaluation"
    FAIL = "fail_evaluation"
    SAVE_SPANS = "save_spans"
    CANCEL = "cancel_evaluation"

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)

    @classmethod
    def parse(cls, name: str) -> StoreWrite:
        """The write `name` names (a member, or its method name as a spool file spells it).

        Raises:
            UserError: `name` is no store write (field "op"), naming the ones there are.
        """
        try:
            return cls(name)
        except ValueError:
            known = ", ".join(sorted(op.value for op in cls))
            raise UserError(f"op {name!r} is not a spooled store write: one of {known}", field="op") from None


def apply(store: Store, op: StoreWrite, evaluation_id: str, kwargs: dict[str, Any]) -> None:
    """Make the write `op` for `evaluation_id` with its keyword arguments.

    Raises:
        UserError: `op` is no store write; otherwise whatever the store's method raises.
    """
    op = StoreWrite.parse(op)
    if op is StoreWrite.START:
        store.start_evaluation(evaluation_id, **kwargs)
    elif op is StoreWrite.FINISH:
        store.finish_evaluation(evaluation_id, **kwargs)
    elif op is StoreWrite.FAIL:
        store.fail_evaluation(evaluation_id, **kwargs)
    elif op is StoreWrite.SAVE_SPANS:
        store.save_spans(evaluation_id, **kwargs)
    else:
        store.cancel_evaluation(evaluation_id, **kwargs)
