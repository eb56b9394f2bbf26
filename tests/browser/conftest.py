"""Fixtures of the browser tests: Debian's chromium driven by Playwright (a missing one fails the
test, never skips it), launched once per module."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import playwright.sync_api as playwright_api
import pytest

from tests.fixtures.browser import CHROMIUM_ARGS, require_chromium


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    executable = require_chromium()
    with playwright_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()
