"""`nvbench validate`: check matrix files and report every problem at once; list what each model's registry
defaults set, and build the user's own models in a child process."""

from __future__ import annotations

import argparse

from harness.commands.common import EXIT_OK, bad_input, reach_warning
from harness.matrix.parse import MatrixError, load_matrix


def cmd_validate(args: argparse.Namespace) -> int:
    from harness.orchestrate.session.model_check import user_model_problems
    from harness.matrix.cells import expand
    from harness.matrix.model_axis import defaults_lines

    problems = []
    for path in args.matrix:
        try:
            matrix = load_matrix(path)
            cells = expand(matrix, only=args.only)
        except MatrixError as exc:
            problems += exc.problems
            continue
        models = {c.model for c in cells}
        built = user_model_problems(matrix, models)
        if built:
            problems += [f"{path}: {p}" for p in built]
            continue
        print(f"{path}: ok, {len(cells)} cells x {matrix.run.repeats} repeats")
        for line in defaults_lines(matrix, models):
            print(f"  {line}")
        reach_warning(matrix.run.repeats, smoke=False, what=f"{path}: run.repeats = {matrix.run.repeats}")
    return bad_input(problems) if problems else EXIT_OK


def add_parser(subparsers) -> None:
    v = subparsers.add_parser("validate", help="check matrix files and report every problem at once")
    v.add_argument("matrix", nargs="+", help="matrix files (TOML) to check")
    v.add_argument("--only", action="append", default=[], metavar="AXIS=VALUE",
                   help="count the cells these filters keep, as run would (default: every cell)")
    v.set_defaults(func=cmd_validate)
