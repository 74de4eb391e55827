"""`nvbench` command line: the top-level parser built from the command modules (harness.commands), and dispatch."""

from __future__ import annotations

import argparse
import sys

from harness import __version__
from harness.commands import ab, baseline, bisect, calibrate, data, env, history, profile, report, run, validate

_COMMANDS = (validate, run, calibrate, profile, report, ab, bisect, env, data, history, baseline)
"""The command modules in the order `nvbench --help` lists them (history also adds export, baseline adds ack)."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="nvbench", description="Benchmark deep-learning training recipes.")
    p.add_argument("--version", action="version", version=f"nvbench {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    for command in _COMMANDS:
        command.add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from harness.orchestrate import stopping

    return stopping.run(lambda: args.func(args))  # SIGTERM and SIGHUP stop a command as Ctrl-C does


if __name__ == "__main__":
    sys.exit(main())
