"""`nvbench columns`: the data dictionary of any table nvbench writes: each column's type, unit and meaning."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.commands.common import EXIT_OK, bad_input


def cmd_columns(args: argparse.Namespace) -> int:
    from harness.analysis.load.columns import dictionary, dictionary_lines

    problems, pages = [], []
    for name in args.file:
        path = Path(name)
        if path.is_dir():  # a table folder (cells/, steps/): its first file speaks for all of them
            path = next(iter(sorted(path.glob("*.parquet"))), path / "(no .parquet file)")
        try:
            kind, columns = dictionary(path)
        except ValueError as exc:
            problems.append(str(exc))
            continue
        pages.append(dictionary_lines(path, columns, kind))
    if problems:
        return bad_input(problems)
    print("\n\n".join("\n".join(page) for page in pages))
    return EXIT_OK


def add_parser(subparsers) -> None:
    c = subparsers.add_parser(
        "columns", help="print a result table's columns with their unit and meaning (cells, steps, verdicts, "
                        "changes): the data dictionary for DuckDB or pandas")
    c.add_argument("file", nargs="+", metavar="FILE",
                   help="a Parquet file nvbench wrote, or a folder of them (RUN/cells, RUN/steps)")
    c.set_defaults(func=cmd_columns)
