"""`nvbench data make` and `nvbench data prepare`: write a generated dataset, or every one a matrix reads."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.commands.common import EXIT_OK, bad_input
from harness.matrix.parse import MatrixError, load_matrix


def cmd_data_make(args: argparse.Namespace) -> int:
    from harness.data.generate import make_dataset

    try:
        out = make_dataset(Path(args.out), image_size=args.image_size, num_classes=args.classes,
                           train_per_class=args.train_per_class, val_per_class=args.val_per_class, seed=args.seed,
                           kind=args.kind)
    except ValueError as exc:  # the parameters, checked before anything is written
        return bad_input([f"nvbench data make: {exc}"])
    print(f"dataset written to {out}")
    return EXIT_OK


def cmd_data_prepare(args: argparse.Namespace) -> int:
    """Make (or find) every generated dataset the matrix's cells read, so a timed run starts measuring at once."""
    from harness.orchestrate.session.job import generated_dataset, reads_generated_dataset
    from harness.matrix.cells import expand

    try:
        cells = expand(load_matrix(args.matrix), smoke=args.smoke, only=args.only)
    except MatrixError as exc:
        return bad_input(exc.problems)
    wanted = {(c.data.cache_dir, c.data.generate): c for c in cells if reads_generated_dataset(c)}
    for cell in wanted.values():
        try:
            print(generated_dataset(cell, notify=lambda line: print(line, file=sys.stderr)))
        except (ValueError, FileExistsError) as exc:  # parameters the generator refuses; a cache folder not its own
            return bad_input([f"nvbench data prepare: {args.matrix}: {exc}"])
    if not wanted:
        print("no cell reads a generated dataset (synthetic data, or data.path set)", file=sys.stderr)
    return EXIT_OK


def add_parser(subparsers) -> None:
    d = subparsers.add_parser("data", help="write generated image datasets: one, or every one a matrix's cells read")
    dsub = d.add_subparsers(dest="data_command", required=True, metavar="COMMAND",
                            help="make: one dataset; prepare: every dataset a matrix reads")
    m = dsub.add_parser("make", help="write a learnable JPEG ImageFolder (train/ and val/)")
    m.add_argument("--out", required=True, metavar="DIR", help="the folder to write (train/, val/, dataset.json)")
    m.add_argument("--image-size", type=int, default=64, metavar="PX", help="image side (default: %(default)s)")
    m.add_argument("--classes", type=int, default=10, metavar="N", help="classes (default: %(default)s)")
    m.add_argument("--train-per-class", type=int, default=64, metavar="N",
                   help="training images per class (default: %(default)s)")
    m.add_argument("--val-per-class", type=int, default=16, metavar="N",
                   help="validation images per class (default: %(default)s)")
    m.add_argument("--seed", type=int, default=0, help="generator seed (default: %(default)s)")
    m.add_argument("--kind", choices=("shapes", "digits"), default="shapes",
                   help="what the images show: shapes, or digits (scikit-learn's; the digits extra) "
                        "(default: %(default)s)")
    m.set_defaults(func=cmd_data_make)
    pp = dsub.add_parser("prepare", help="make every generated dataset a matrix's cells read, before a timed run")
    pp.add_argument("matrix", help="the matrix file (TOML) whose datasets to make")
    pp.add_argument("--only", action="append", default=[], metavar="AXIS=VALUE",
                    help="filter cells as in run (default: every cell)")
    pp.add_argument("--smoke", action="store_true", help="the datasets of the --smoke run")
    pp.set_defaults(func=cmd_data_prepare)
