"""The module size report (`make lint`): every module of mlscope/ longer than the soft limit, one
warning a line. A long module is a hint that it holds more than one concept, not an error: the report
exits 0 whatever it finds, and whoever touches the module judges whether to split it.

Standard library only.

    python ops/module_sizes.py [ROOT] [--limit 600]

ROOT is the repository (default: the one this script is in); the report reads ROOT/mlscope/**/*.py.
"""

from __future__ import annotations

import argparse
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOFT_LIMIT = 600


def oversized(root: Path, limit: int) -> list[tuple[str, int]]:
    """The modules of root/mlscope/ with more than `limit` lines, as (path relative to root, lines),
    in path order."""
    found = []
    for path in sorted((root / "mlscope").rglob("*.py")):
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > limit:
            found.append((path.relative_to(root).as_posix(), lines))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?", type=Path, default=REPO, help="the repository (default: this one)")
    parser.add_argument(
        "--limit", type=int, default=SOFT_LIMIT, help=f"the soft limit (default {SOFT_LIMIT})"
    )
    args = parser.parse_args(argv)
    if not (args.root / "mlscope").is_dir():
        parser.error(f"{args.root} has no mlscope/ folder")
    for name, lines in oversized(args.root, args.limit):
        print(f"warning: {name} has {lines} lines (soft limit {args.limit})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
