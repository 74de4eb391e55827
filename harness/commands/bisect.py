"""`nvbench bisect`: find the first commit (or interpreter) that made a matrix slower, by A/B."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from harness.commands.common import EXIT_INCONCLUSIVE, EXIT_INTERRUPTED, add_slots_flag, bad_input
from harness.matrix.parse import MatrixError, load_matrix


def cmd_bisect(args: argparse.Namespace) -> int:
    from datetime import datetime, timezone

    from harness.orchestrate.bisect import by_time as bisect
    from harness.orchestrate.session import runfolder

    try:
        if args.resume:
            out = Path(args.resume)
            if not (out / bisect.STATE).is_file():
                raise bisect.BisectInputError(f"--resume {out}: no {bisect.STATE} there")
            state = json.loads((out / bisect.STATE).read_text())
            matrix, points, labels, kind = state["matrix"], state["points"], state["labels"], state["kind"]
            ab_args = state["ab_args"]
            repo = Path(bisect.git(Path.cwd(), "rev-parse", "--show-toplevel")) if kind == "commits" else None
        else:
            if not args.matrix:
                raise bisect.BisectInputError("nvbench bisect needs a MATRIX file (or --resume DIR)")
            load_matrix(args.matrix)  # bad input is said now, not by the first A/B
            if args.pythons:
                points, labels, kind, repo = bisect.python_points(Path(args.pythons)), {}, "pythons", None
            else:
                if not args.good:
                    raise bisect.BisectInputError("nvbench bisect needs --good REV (or --pythons FILE)")
                points, labels = bisect.commit_points(Path.cwd(), args.good, args.bad or "HEAD")
                kind = "commits"
                repo = Path(bisect.git(Path.cwd(), "rev-parse", "--show-toplevel"))
            if args.repeats < 1 or args.max_repeats < args.repeats:
                raise bisect.BisectInputError(f"--repeats {args.repeats} --max-repeats {args.max_repeats}: need "
                                              "1 <= repeats <= max-repeats")
            matrix = str(Path(args.matrix).absolute())
            if args.kernel_repeats < 0 or args.kernel_steps < 1:
                raise bisect.BisectInputError(f"--kernel-repeats {args.kernel_repeats} --kernel-steps "
                                              f"{args.kernel_steps}: need repeats >= 0 and steps >= 1")
            ab_args = ["--repeats", str(args.repeats), "--max-repeats", str(args.max_repeats),
                       *[f"--only={o}" for o in args.only], *([f"--slots={args.slots}"] if args.slots else []),
                       "--kernel-repeats", str(args.kernel_repeats), "--kernel-steps", str(args.kernel_steps)]
            out = Path(args.out) if args.out else Path(args.reports) / runfolder.new_run_id(
                "bisect", datetime.now(timezone.utc))
            if out.exists() and any(out.iterdir()):
                raise bisect.BisectInputError(f"--out {out}: not empty (continue one with --resume {out})")
            out.mkdir(parents=True, exist_ok=True)
    except MatrixError as exc:
        return bad_input(exc.problems)
    except bisect.BisectInputError as exc:
        return bad_input([str(exc)])
    out = out.absolute()
    bisector = bisect.Bisector(matrix=matrix, points=points, labels=labels, kind=kind, out=out, ab_args=ab_args,
                               repo=repo, notify=lambda m: print(m, file=sys.stderr), by=args.by,
                               work_steps=args.work_steps)
    if args.resume:
        bisector.load()
    print(f"bisect folder: {out} ({len(points)} {kind}, good {bisector.name(0)}, bad {bisector.name(len(points) - 1)}; "
          f"by {bisector.by})", file=sys.stderr)
    if bisector.by != "time":
        steps = bisector.search.steps_left()
        print(f"by work: the ends counted first, then about {steps} counted commit(s) for each commit the work changed "
              f"at (one counted process a cell each, never timed, never waiting for a quiet machine)"
              + ("; where the ends' work is the same: " if bisector.by == "auto" else ""), file=sys.stderr,
              end="" if bisector.by == "auto" else "\n")
    if bisector.by != "work":
        print(_estimate_line(matrix, ab_args, bisector, [Path(args.reports), out]), file=sys.stderr)
    try:
        code, _ = bisector.run()
    except KeyboardInterrupt:
        bisector.save()
        print(f"interrupted; continue with: nvbench bisect --resume {out}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except bisect.MachineBusy as exc:  # undecided, and no point blamed for it
        bisector.save()
        print(f"{exc}", file=sys.stderr)
        print(f"the bisect is undecided; on a quiet machine continue with: nvbench bisect --resume {out}",
              file=sys.stderr)
        return EXIT_INCONCLUSIVE
    finally:
        bisector.cleanup()
    print(out / bisect.LOG)
    return code


def _estimate_line(matrix_path: str, ab_args: list[str], bisector, roots: list[Path]) -> str:
    """The bisect's estimated wall time: the A/Bs it has left (the confirmation, then about one per step of the
    bisection), each estimated as `nvbench ab` estimates itself, from past rows under `roots`."""
    from harness.analysis.judge.verdict import Thresholds
    from harness.orchestrate.session.opening import this_machine
    from harness.orchestrate.workflows.looks import decisive_looks, look_schedule
    from harness.orchestrate.cost import pricing as cost
    from harness.orchestrate.cost.estimate import duration_text
    from harness.matrix.cells import expand
    from harness.matrix.parse import with_repeats

    value = {flag: int(ab_args[ab_args.index(flag) + 1]) for flag in ("--repeats", "--max-repeats")}
    only = [arg.removeprefix("--only=") for arg in ab_args if arg.startswith("--only=")]
    looks = decisive_looks(look_schedule(value["--repeats"], value["--max-repeats"]), Thresholds().fdr_q)
    matrix = load_matrix(matrix_path)
    cells = expand(with_repeats(matrix, looks[0]), only=only)
    here = this_machine(matrix.run.device)
    key, caps = here.key, here.caps
    first, last = (cost.ab_estimate(cells, n, caps, roots=roots, keys=[key, key]) for n in (looks[0], looks[-1]))
    left = (0 if bisector.comparisons else 1) + bisector.search.steps_left()
    kernel = int(ab_args[ab_args.index("--kernel-repeats") + 1]) if "--kernel-repeats" in ab_args else 0
    # a profiled process is priced as a timed repeat of its cell: an upper bound when its window is the shorter
    profiled = (f"; each A/B against GOOD that finds a slower point adds {kernel} profiled processes a side, "
                f"about {duration_text(cost.ab_estimate(cells, kernel, caps, roots=roots, keys=[key, key]).wall_s)}"
                if kernel else "")
    return (f"estimated {duration_text(left * first.wall_s)} for ~{left} A/B(s) left at {looks[0]} pairs a side "
            f"(up to {duration_text(left * last.wall_s)} at {looks[-1]}), {duration_text(first.wall_s)} each"
            f"{profiled}: {first.source_text()}")


def add_parser(subparsers) -> None:
    bi = subparsers.add_parser(
        "bisect", help="find the first commit (or interpreter) that made a matrix slower, by A/B")
    bi.add_argument("matrix", nargs="?", help="the matrix file (TOML) each A/B runs "
                    "(default: none; not with --resume)")
    bi.add_argument("--good", metavar="REV", help="a commit known fast (bisect runs in the repository under test; "
                    "default: none, needed unless --pythons or --resume)")
    bi.add_argument("--bad", metavar="REV", help="a later commit known slower (default: HEAD)")
    bi.add_argument("--pythons", metavar="FILE", help="bisect interpreters instead: one per line, good first, bad last "
                    "(default: bisect commits)")
    bi.add_argument("--only", action="append", default=[], metavar="AXIS=VALUE",
                    help="filter cells as in run (default: every cell)")
    bi.add_argument("--repeats", type=int, default=5, metavar="N",
                    help="first pairs of each A/B (default: %(default)s)")
    bi.add_argument("--max-repeats", type=int, default=10, metavar="M",
                    help="pairs an inconclusive cell may grow to in each A/B (default: %(default)s)")
    bi.add_argument("--out", metavar="DIR", help="bisect folder (default: REPORTS/<id>): bisect.md, bisect.json")
    bi.add_argument("--resume", metavar="DIR", help="continue an interrupted bisect without redoing its comparisons "
                    "(default: start a new one)")
    bi.add_argument("--reports", default="reports", metavar="DIR",
                    help="where bisect folders go (default: %(default)s)")
    from harness.catalogue.kernels import DEFAULT_KERNEL_REPEATS, DEFAULT_KERNEL_STEPS

    bi.add_argument("--kernel-repeats", type=int, default=DEFAULT_KERNEL_REPEATS, metavar="N",
                    help="profiled processes per side when an A/B against GOOD finds a slower point: the answer "
                         "names the first bad point's operators (default: %(default)s; 0: none, the phase only)")
    bi.add_argument("--kernel-steps", type=int, default=DEFAULT_KERNEL_STEPS, metavar="N",
                    help="steps each profiled process records (default: %(default)s)")
    bi.add_argument("--by", choices=("work", "time", "auto"), default="auto",
                    help="work: count one process a cell of each end, then of each probed commit, and name the first "
                         "commit whose counted work is the bad end's, item by item (exact: no repeats, no waiting for "
                         "a quiet machine); time: interleaved timed A/Bs; auto: by work where the ends' work differs, "
                         "else by time, said (default: %(default)s)")
    from harness.catalogue.work import DEFAULT_WORK_STEPS

    bi.add_argument("--work-steps", type=int, default=DEFAULT_WORK_STEPS, metavar="N",
                    help="steps each counted process counts (default: %(default)s)")
    add_slots_flag(bi)  # each A/B's: its pairs side by side, one per slot
    bi.set_defaults(func=cmd_bisect)
