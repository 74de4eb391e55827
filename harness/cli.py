"""`nvbench` command line: the top-level parser built from the command modules (harness.commands), and dispatch."""

from __future__ import annotations

import argparse
import sys

from harness import __version__
from harness.exits import EXIT_FAILURES
from harness.commands import (ab, baseline, bisect, calibrate, data, env, history, nightly, profile, report, run,
                               validate)

_COMMANDS = (validate, run, calibrate, profile, report, ab, bisect, env, data, history, baseline, nightly)
"""The command modules in the order `nvbench --help` lists them (env also adds columns, history adds export,
baseline adds ack)."""


def build_parser() -> argparse.ArgumentParser:
    from harness.commands.common import EXIT_CODES_TEXT

    p = argparse.ArgumentParser(prog="nvbench", description="Benchmark deep-learning training recipes.",
                                epilog=EXIT_CODES_TEXT, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"nvbench {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND",
                           help="one of these; `nvbench COMMAND --help` says what it takes")
    for command in _COMMANDS:
        command.add_parser(sub)
    _describe(sub)
    return p


def _describe(sub: argparse._SubParsersAction) -> None:
    """Open each command's --help with the line `nvbench --help` lists it by (one declaration, two places),
    its subcommands' too."""
    for choice in sub._choices_actions:
        parser = sub.choices[choice.dest]
        if parser.description is None and choice.help:
            parser.description = choice.help[0].upper() + choice.help[1:] + "."
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                _describe(action)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    from harness.orchestrate.session import stopping
    from harness.results.store import CannotWrite

    try:
        return stopping.run(lambda: args.func(args))  # SIGTERM and SIGHUP stop a command as Ctrl-C does
    except CannotWrite as exc:  # one line, never a traceback: where, how much, and the command that goes on
        import shlex

        again = getattr(exc, "resume", None) or "nvbench " + shlex.join(argv)
        print(f"error: {exc.line()}; {exc.when}: {again}", file=sys.stderr)
        return EXIT_FAILURES


if __name__ == "__main__":
    sys.exit(main())
