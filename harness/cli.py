"""`nvbench` command line: argument parsing and dispatch only."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from harness import __version__
from harness.config import MatrixError, load_matrix

EXIT_OK, EXIT_FAILURES, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130


def _bad_input(problems: list[str]) -> int:
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    return EXIT_BAD_INPUT


def cmd_validate(args: argparse.Namespace) -> int:
    problems = []
    for path in args.matrix:
        try:
            matrix = load_matrix(path)
            from harness.matrix import expand

            cells = expand(matrix, only=args.only)
            print(f"{path}: ok, {len(cells)} cells x {matrix.run.repeats} repeats")
        except MatrixError as exc:
            problems += exc.problems
    return _bad_input(problems) if problems else EXIT_OK


def _env_and_caps(device: str):
    from harness.env import collect_env, env_key
    from harness.runner import probe_capabilities

    env = collect_env()
    return env, env_key(env), probe_capabilities(device, env)


def cmd_run(args: argparse.Namespace) -> int:
    from harness import runner, store
    from harness.matrix import expand

    if args.resume and (args.matrix or args.only or args.smoke or args.out or args.dry_run):
        return _bad_input(["--resume takes the run folder alone (its plan fixes matrix, filters and --smoke)"])
    if args.resume:
        run_dir = Path(args.resume)
        if not (run_dir / runner.PLAN).is_file():
            return _bad_input([f"{run_dir}: not an nvbench run folder (no {runner.PLAN})"])
        _, _, cells = runner.load_plan(run_dir)
        device = next(iter(cells.values())).run.device
    else:
        if not args.matrix:
            return _bad_input(["nvbench run needs a MATRIX file or --resume RUN_DIR"])
        try:
            matrix = load_matrix(args.matrix)
            cell_list = expand(matrix, smoke=args.smoke, only=args.only)
        except MatrixError as exc:
            return _bad_input(exc.problems)
        if args.out and (Path(args.out) / runner.PLAN).exists():
            return _bad_input([f"--out {args.out}: already holds a run; use --resume {args.out}"])
        device = matrix.run.device
    env, key, caps = _env_and_caps(device)
    if args.dry_run:
        for cell in cell_list:
            reason = runner.skip_reason(cell, caps)
            print(f"{cell.cell_id}  x{matrix.run.repeats}  " + (f"skip: {reason}" if reason else "run"))
        print(f"{len(cell_list)} cells, {len(cell_list) * matrix.run.repeats} jobs; nothing was run or written")
        return EXIT_OK
    if not args.resume:
        run_dir = runner.create_run(matrix, cell_list, run_dir=Path(args.out) if args.out else None,
                                    reports_root=Path(args.reports), smoke=args.smoke, only=args.only, env=env)
    return _execute(run_dir, caps, env, key, progress=not args.no_progress)


def _execute(run_dir: Path, caps, env, key, *, progress: bool) -> int:
    from rich.console import Console

    from harness import runner, store
    from harness.console import RunProgress, counts_line, summary_table

    console = Console(stderr=True)
    _, jobs, _ = runner.load_plan(run_dir)
    todo = runner.pending(run_dir, jobs)
    console.print(f"run folder: {run_dir}  ({len(todo)} of {len(jobs)} jobs to run)")
    try:
        with RunProgress(console, len(todo)) as bar:
            runner.execute(run_dir, caps=caps, env=env, env_key=key, on_start=bar.start if progress else None,
                           on_done=bar.done, notify=console.print)
    except KeyboardInterrupt:
        console.print(f"interrupted; finish with: nvbench run --resume {run_dir}")
        return EXIT_INTERRUPTED
    rows = store.read_cells(run_dir).to_pylist()
    Console().print(summary_table(rows))
    console.print(counts_line(rows, run_dir))
    return runner.exit_code(rows)


def cmd_env(args: argparse.Namespace) -> int:
    from harness.env import collect_env, env_key, format_env

    env = collect_env()
    if args.json:
        print(json.dumps(env | {"env_key": env_key(env)}, indent=2, sort_keys=True, default=str))
    else:
        print(format_env(env))
        print(f"{'env_key':<20} {env_key(env)}")
    return EXIT_OK


def cmd_data_make(args: argparse.Namespace) -> int:
    from harness.data.generate import make_dataset

    out = make_dataset(Path(args.out), image_size=args.image_size, num_classes=args.classes,
                       train_per_class=args.train_per_class, val_per_class=args.val_per_class, seed=args.seed,
                       kind=args.kind)
    print(f"dataset written to {out}")
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="nvbench", description="Benchmark deep-learning training recipes.")
    p.add_argument("--version", action="version", version=f"nvbench {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    v = sub.add_parser("validate", help="check matrix files and report every problem at once")
    v.add_argument("matrix", nargs="+")
    v.add_argument("--only", action="append", default=[], metavar="AXIS=VALUE")
    v.set_defaults(func=cmd_validate)

    r = sub.add_parser("run", help="run a matrix, one isolated process per cell")
    r.add_argument("matrix", nargs="?")
    r.add_argument("--smoke", action="store_true", help="shrink every cell to run anywhere in minutes")
    r.add_argument("--only", action="append", default=[], metavar="AXIS=VALUE",
                   help="keep cells with this axis value (repeat: same axis widens, other axes narrow)")
    r.add_argument("--dry-run", action="store_true", help="list the cells and what would be skipped")
    r.add_argument("--resume", metavar="RUN_DIR", help="finish an interrupted run")
    r.add_argument("--out", metavar="DIR", help="run folder (default: REPORTS/<run_id>)")
    r.add_argument("--reports", default="reports", metavar="DIR", help="where run folders go (default: reports)")
    r.add_argument("--no-progress", action="store_true", help="no progress bar (a line per cell is still printed)")
    r.set_defaults(func=cmd_run)

    e = sub.add_parser("env", help="print the environment fingerprint")
    e.add_argument("--json", action="store_true")
    e.set_defaults(func=cmd_env)

    d = sub.add_parser("data", help="datasets")
    dsub = d.add_subparsers(dest="data_command", required=True)
    m = dsub.add_parser("make", help="write a learnable JPEG ImageFolder (train/ and val/)")
    m.add_argument("--out", required=True)
    m.add_argument("--image-size", type=int, default=64)
    m.add_argument("--classes", type=int, default=10)
    m.add_argument("--train-per-class", type=int, default=64)
    m.add_argument("--val-per-class", type=int, default=16)
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--kind", choices=("shapes", "digits"), default="shapes")
    m.set_defaults(func=cmd_data_make)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
