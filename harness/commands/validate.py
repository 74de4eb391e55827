"""`nvbench validate`: check matrix files and report every problem at once."""

from __future__ import annotations

import argparse

from harness.commands.common import EXIT_OK, bad_input, reach_warning
from harness.spec.parse import MatrixError, load_matrix


def cmd_validate(args: argparse.Namespace) -> int:
    problems = []
    for path in args.matrix:
        try:
            matrix = load_matrix(path)
            from harness.spec.cells import expand

            cells = expand(matrix, only=args.only)
            print(f"{path}: ok, {len(cells)} cells x {matrix.run.repeats} repeats")
            reach_warning(matrix.run.repeats, smoke=False, what=f"{path}: run.repeats = {matrix.run.repeats}")
        except MatrixError as exc:
            problems += exc.problems
    return bad_input(problems) if problems else EXIT_OK


def add_parser(subparsers) -> None:
    v = subparsers.add_parser("validate", help="check matrix files and report every problem at once")
    v.add_argument("matrix", nargs="+")
    v.add_argument("--only", action="append", default=[], metavar="AXIS=VALUE")
    v.set_defaults(func=cmd_validate)
