"""`python -m harness.models.check --num-classes N --out FILE [--search-dir DIR ...] IMPORT_PATH ...`: build each of
the user's models as a cell would, in a process of its own (nvbench validate's own process imports no torch), and
write {import path: its one-line problem, or null} to FILE as JSON."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from harness.models.user import UserModelError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.models.check")
    parser.add_argument("--num-classes", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--search-dir", action="append", default=[])
    parser.add_argument("model", nargs="+")
    args = parser.parse_args(argv)
    from harness.models.build import build_user_model  # torch: after the arguments are known to be right

    found: dict[str, str | None] = {}
    for model in args.model:
        try:
            build_user_model(model, num_classes=args.num_classes, search_dirs=args.search_dir)
            found[model] = None
        except UserModelError as exc:
            found[model] = str(exc)
    # Written, not printed: the user's module may print to stdout as it imports.
    args.out.write_text(json.dumps(found))
    return 0


if __name__ == "__main__":
    sys.exit(main())
