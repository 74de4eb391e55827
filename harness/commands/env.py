"""`nvbench env`: print the environment fingerprint."""

from __future__ import annotations

import argparse
import json

from harness.commands.common import EXIT_OK
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


def add_parser(subparsers) -> None:
    e = subparsers.add_parser("env", help="print the environment fingerprint")
    e.add_argument("--json", action="store_true", help="one JSON object with its env_key, instead of lines")
    e.set_defaults(func=cmd_env)
