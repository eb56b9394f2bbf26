"""Print the N slowest tests of one or more pytest JUnit XML reports, slowest first.

`make test` runs its tests in more than one pytest run (ops/ci/test.sh), so pytest's own
`--durations` would print one list per run; this prints one list for all of them. A test's time is
the report's: its setup, call and teardown together.

Usage: python ops/ci/slowest.py N REPORT.xml [REPORT.xml ...]
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET


def slowest(count: int, reports: list[str]) -> list[tuple[float, str]]:
    """The `count` longest test cases of `reports` as (seconds, test id), longest first."""
    cases: list[tuple[float, str]] = []
    for report in reports:
        for case in ET.parse(report).iter("testcase"):
            # The report names a test by its dotted module (and class) and its name.
            test_id = f"{case.get('classname', '?')}::{case.get('name', '?')}"
            cases.append((float(case.get("time") or 0.0), test_id))
    return sorted(cases, reverse=True)[:count]


def main(argv: list[str]) -> int:
    if len(argv) < 2 or not argv[0].isdigit():
        print("usage: python ops/ci/slowest.py N REPORT.xml [REPORT.xml ...]", file=sys.stderr)
        return 2
    count, reports = int(argv[0]), argv[1:]
    print(f"slowest {count} tests (setup, call and teardown):")
    for seconds, test_id in slowest(count, reports):
        print(f"{seconds:8.2f}s {test_id}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
