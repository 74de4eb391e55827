"""`nvbench env` (the environment fingerprint) and `nvbench columns` (the data dictionary of any table nvbench
writes: each column's type, unit and meaning): what a machine is, and what a result holds."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from harness.commands.common import EXIT_OK, bad_input
from harness.catalogue import col


def cmd_env(args: argparse.Namespace) -> int:
    from harness.results.env import collect_env, env_key, format_env

    env = collect_env()
    if args.json:
        print(json.dumps(env | {col.env_key: env_key(env)}, indent=2, sort_keys=True, default=str))
    else:
        print(format_env(env))
        print(f"{col.env_key:<20} {env_key(env)}")
    return EXIT_OK


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
    e = subparsers.add_parser("env", help="print the environment fingerprint")
    e.add_argument("--json", action="store_true", help="one JSON object with its env_key, instead of lines")
    e.set_defaults(func=cmd_env)
    c = subparsers.add_parser(
        "columns", help="print a result table's columns with their unit and meaning (cells, steps, verdicts, "
                        "changes): the data dictionary for DuckDB or pandas")
    c.add_argument("file", nargs="+", metavar="FILE",
                   help="a Parquet file nvbench wrote, or a folder of them (RUN/cells, RUN/steps)")
    c.set_defaults(func=cmd_columns)
