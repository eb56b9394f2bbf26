"""The CLI's two consoles and markup escaping, with Rich imported on first use: every verb's module
imports them, and `mlscope VERB --help` prints nothing through Rich, so importing Rich at its start
would cost each verb's help a visible part of its time (tests/unit/test_cli_imports.py holds `--help`
free of Rich).

`console` (stdout) and `err_console` (stderr) stand for Rich consoles made when first used: every
attribute read, set or deleted, and `with`, goes to the console. The width is decided then, as it was
at import before: None (the terminal's) on a terminal, else 160 columns, so piped output (logs, files,
CI) is not cut to 80 columns and a results table stays readable.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, TextIO, cast

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["console", "err_console", "escape"]


def escape(markup: str) -> str:
    """Rich's `rich.markup.escape`: `markup` with what Rich would read as markup escaped."""
    from rich.markup import escape as rich_escape

    return rich_escape(markup)


class _LazyConsole:
    """A Rich Console made on first use (see the module), writing to stdout or stderr."""

    def __init__(self, *, stderr: bool) -> None:
        object.__setattr__(self, "_stderr", stderr)
        object.__setattr__(self, "_console", None)

    def _made(self) -> Console:
        made = self.__dict__["_console"]
        if made is None:
            from rich.console import Console

            stream: TextIO = sys.stderr if self.__dict__["_stderr"] else sys.stdout
            # No emoji codes: a model reference such as `hf:llama:` is text, not a llama.
            made = Console(
                stderr=self.__dict__["_stderr"], width=None if stream.isatty() else 160, emoji=False
            )
            object.__setattr__(self, "_console", made)
        return cast("Console", made)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._made(), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._made(), name, value)

    def __delattr__(self, name: str) -> None:
        delattr(self._made(), name)

    def __enter__(self) -> Console:
        return self._made().__enter__()

    def __exit__(self, *exc: Any) -> None:
        self._made().__exit__(*exc)

    def __repr__(self) -> str:
        return repr(self._made())


def _forwarded(name: str) -> property:
    """The console's property `name` as a property of the stand-in too: what reads an attribute's
    descriptor on the type (pytest's monkeypatch, to set it back) then finds it as on a Console."""
    return property(
        lambda self: getattr(self._made(), name),
        lambda self, value: setattr(self._made(), name, value),
    )


# Console's settable properties.
for _name in ("width", "height", "file"):
    setattr(_LazyConsole, _name, _forwarded(_name))


console = cast("Console", _LazyConsole(stderr=False))
err_console = cast("Console", _LazyConsole(stderr=True))
