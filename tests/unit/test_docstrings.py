"""The design of record is in the repository (docs/design.md), and docstrings say what and why: no
citation of a design file outside the repository, no development history (a wave, the last
round) in a docstring."""

from __future__ import annotations

import ast
import re

from tests.conftest import REPO

HISTORY = re.compile(r"\b(wave[- ]\d|last round|DESIGN\.md)\b")


def _docstrings() -> list[tuple[str, int, str]]:
    found = []
    for path in sorted((REPO / "mlscope").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                text = ast.get_docstring(node, clean=False)
                if text:
                    found.append((path.relative_to(REPO).as_posix(), getattr(node, "lineno", 1), text))
    return found


def test_no_docstring_carries_history_or_cites_a_design_outside_the_repository() -> None:
    # Given every docstring of the package
    docstrings = _docstrings()
    assert len(docstrings) > 500
    # Then none names a development wave or round, or a DESIGN.md
    offenders = [
        f"{path}:{line}: {m.group(0)}" for path, line, text in docstrings if (m := HISTORY.search(text))
    ]
    assert offenders == []


def test_the_docs_cite_the_design_of_record_inside_the_repository() -> None:
    # Given the docs and the README
    pages = [*sorted((REPO / "docs").glob("*.md")), REPO / "README.md"]
    # Then none cites DESIGN.md (the design of record is docs/design.md)
    assert [page.name for page in pages if "DESIGN.md" in page.read_text()] == []


def test_the_history_pattern_finds_what_it_is_meant_to() -> None:
    # The check above can fail: its pattern matches the forms it forbids, and not ordinary words.
    assert HISTORY.search("sections added in wave 2")
    assert HISTORY.search("see DESIGN.md")
    assert not HISTORY.search("a round trip to the store; a wavelength; this session's level")
