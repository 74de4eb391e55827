"""`nvbench run`: plan or resume a run folder, execute its jobs, print the summary."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.commands.common import (
    EXIT_BAD_INPUT,
    EXIT_INTERRUPTED,
    EXIT_OK,
    add_slots_flag,
    bad_input,
    fire_drill_problem,
    knob_default,
    own_default,
    reach_warning,
    slot_packing,
)
from harness.commands.work_flags import add_work_flags
from harness.matrix.executor import ExecutorConfig
from harness.matrix.sections import RunConfig


def cmd_run(args: argparse.Namespace) -> int:
    # the library, loaded when the command runs: its pyarrow and numpy would add ~1 s to every nvbench start
    from harness.orchestrate.placement.executors import ExecutorUnavailable
    from harness.orchestrate.placement.packing import CalibrationError
    from harness.orchestrate.placement.slots import SlotError
    from harness.orchestrate.session import capabilities, opening, runfolder
    from harness.orchestrate.session.model_check import user_model_problems
    from harness.orchestrate.session.runner import executor_for
    from harness.results import store

    from harness.orchestrate.workflows import work_repeats

    if args.resume and (args.matrix or args.only or args.smoke or args.out or args.dry_run or args.fire_drill
                        or args.repeats is not None or args.executor or args.work_repeats):
        return bad_input(["--resume takes the run folder alone (its plan fixes matrix, filters, --smoke, "
                          "--repeats, --fire-drill, --executor and --work-repeats)"])
    try:
        work_plan = work_repeats.WorkPlan(repeats=args.work_repeats, steps=args.work_steps)
    except ValueError as exc:
        return bad_input([str(exc)])
    if problem := fire_drill_problem(args.fire_drill):
        return bad_input([problem])
    run_dir: Path | None = None
    if args.resume:
        run_dir = Path(args.resume)
        try:
            _, _, cells = runfolder.load_plan(run_dir)
            store.read_cells(run_dir)  # a finished job's row must read back, or the summary fails at the end
        except runfolder.RunFolderError as exc:
            return bad_input([str(exc)])
        except store.UnreadableFile as exc:
            which = "every job it holds" if exc.path.name == store.FOLDED else "that job"
            return bad_input([f"{exc}; delete it to run {which} again"])
        device = next(iter(cells.values())).run.device
        slots = next(iter(cells.values())).run.slots
        cell_list = list(cells.values())
        executor = runfolder.plan_executor(run_dir)
    else:
        if not args.matrix:
            return bad_input(["nvbench run needs a MATRIX file or --resume RUN_DIR"])
        try:
            opened = opening.open_matrix(args.matrix, repeats=args.repeats, smoke=args.smoke, only=args.only)
        except opening.OpeningError as exc:
            return bad_input(exc.problems)
        matrix, cell_list = opened.matrix, opened.cells
        # as validate does, before anything is written
        if built := user_model_problems(matrix, {c.model for c in cell_list}):
            return bad_input([f"{args.matrix}: {problem}" for problem in built])
        if args.out and (Path(args.out) / runfolder.PLAN).exists():
            return bad_input([f"--out {args.out}: already holds a run; use --resume {args.out}"])
        device = matrix.run.device
        slots = matrix.run.slots
        knob = f"--repeats {args.repeats}" if args.repeats is not None else f"run.repeats = {matrix.run.repeats}"
        reach_warning(matrix.run.repeats, smoke=args.smoke, what=knob)
        executor = _executor_config(matrix, args.executor)
    here = opening.this_machine(device)
    env, key, caps = here.env, here.key, here.caps

    where = executor_for(executor)
    try:
        packing = slot_packing(args.slots or slots, device=caps.device, env=env, key=key,
                               backends={c.backend for c in cell_list}, executor_kind=where.kind,
                               source=None if args.slots else args.resume or args.matrix)
    except (SlotError, CalibrationError) as exc:
        return bad_input([str(exc)])
    at_once = len(packing.slots) if packing is not None else where.max_parallel
    cost = _estimate(args, run_dir if args.resume else None, cells if args.resume else
                     {c.cell_id: c for c in cell_list}, None if args.resume else matrix, caps, key, at_once)
    if args.resume:
        work_plan = work_repeats.load_plan(run_dir) or work_plan
    counted = _counted_line(args, work_plan, {c.cell_id: c for c in cell_list}, caps, key)
    if args.dry_run:
        for cell in cell_list:
            reason = capabilities.skip_reason(cell, caps)
            print(f"{cell.cell_id}  x{matrix.run.repeats}  " + (f"skip: {reason}" if reason else "run"))
        print(cost.text() + counted)
        more = f" (and {len(cell_list) * work_plan.repeats} counted processes)" if work_plan.repeats else ""
        print(f"{len(cell_list)} cells, {len(cell_list) * matrix.run.repeats} jobs{more}; nothing was run or written")
        return EXIT_OK
    try:
        where.check()  # before anything is written: sbatch missing or the controller down is one line, exit 2
    except ExecutorUnavailable as exc:
        return bad_input([str(exc)])
    try:
        if not args.resume:
            run_dir = runfolder.create_run(matrix, cell_list, run_dir=Path(args.out) if args.out else None,
                                           reports_root=Path(args.reports), smoke=args.smoke, only=args.only,
                                           env=env, fire_drill_pct=args.fire_drill or 0.0, executor=executor)
            if work_plan.repeats:
                work_repeats.save_plan(run_dir, work_plan)
        if counted and not args.quiet:
            print(counted.removeprefix("; "), file=sys.stderr)
        return _execute(run_dir, caps, env, key, progress=not args.no_progress, verbose=args.verbose,
                        executor=where, packing=packing, estimate=cost, quiet=args.quiet)
    except store.CannotWrite as exc:  # the rows written stand; the run goes on from its folder once there is room
        if run_dir is not None and (run_dir / runfolder.PLAN).exists():
            exc.resume = f"nvbench run --resume {run_dir}"
        raise


def _estimate(args, run_dir: Path | None, cells: dict, matrix, caps, key: str, slots: int):
    """The run's estimate (its pending jobs on a resume) from past runs in --reports (and the run folder itself)."""
    from harness.orchestrate.cost import pricing as cost
    from harness.orchestrate.session import runfolder
    from harness.matrix.cells import schedule

    if run_dir is not None:
        _, jobs, _ = runfolder.load_plan(run_dir)
        jobs = runfolder.pending(run_dir, jobs)
    else:
        jobs = schedule(list(cells), matrix.run.repeats, matrix.run.order, matrix.run.shuffle_seed)
    roots = [Path(args.reports)] + ([run_dir] if run_dir is not None else [])
    return cost.estimate_jobs(cells, jobs, caps, roots=roots, key=key, slots=slots)


def _counted_line(args, plan, cells: dict, caps, key: str) -> str:
    """'; then N counted process(es) per cell, at most X' (empty without counted processes): priced as timed repeats
    of their cells, an upper bound, their window being the shorter."""
    from harness.orchestrate.cost import pricing as cost
    from harness.orchestrate.cost.estimate import duration_text

    if not plan.repeats:
        return ""
    jobs = [(cid, p) for p in range(plan.repeats) for cid in cells]
    wall_s = cost.estimate_jobs(cells, jobs, caps, roots=[Path(args.reports)], key=key).wall_s
    return f"; then {plan.repeats} counted process(es) per cell, one at a time, at most {duration_text(wall_s)}"


def _count(run_dir: Path, caps, env, key: str, notify) -> None:
    """The counted processes the run planned (RUN/counted/work-plan.json), after its timed jobs; those done are kept."""
    from harness.catalogue import col
    from harness.orchestrate.session import runfolder
    from harness.orchestrate.workflows import work_repeats

    plan = work_repeats.load_plan(run_dir)
    if plan is None or not plan.repeats:
        return
    from harness.orchestrate.session.runner import executor_for

    _, _, cells = runfolder.load_plan(run_dir)
    executor = executor_for(runfolder.plan_executor(run_dir), notify=notify)  # where the timed jobs ran
    work_repeats.run_work_repeats({"run": run_dir}, list(cells), plan, caps=caps, envs={"run": env | {col.env_key: key}},
                                  executors={"run": executor}, notify=notify)


def _executor_config(matrix, flag: str | None):
    """The matrix's [executor], its kind replaced by `--executor` when given (the flag wins over the file)."""
    import dataclasses

    return dataclasses.replace(matrix.executor, kind=flag) if flag else matrix.executor


def _execute(run_dir: Path, caps, env, key, *, progress: bool, verbose: bool, executor=None, packing=None,
             estimate=None, quiet: bool = False) -> int:
    """Progress (the bar, a line per job, the runner's notes) on stderr, silent under --quiet; the summary, the
    run's result, on stdout, where `> out.txt` keeps it, as report and ab keep their verdicts."""
    from rich.console import Console

    from harness.console import RunProgress, detail_table, print_summary
    from harness.orchestrate.session import derive, runfolder, runner
    from harness.results import store

    console, errors = Console(stderr=True, quiet=quiet), Console(stderr=True)
    _, jobs, _ = runfolder.load_plan(run_dir)
    todo = runfolder.pending(run_dir, jobs)
    # soft_wrap: a path must stay one copyable line whatever the terminal's width
    console.print(f"run folder: {run_dir}  ({len(todo)} of {len(jobs)} jobs to run)", soft_wrap=True)
    if estimate is not None:
        console.print(estimate.text(), highlight=False)  # wrapped at whole words to the terminal
    from harness.orchestrate.placement.executors import ExecutorUnavailable

    try:
        with RunProgress(console, len(todo)) as bar:
            runner.execute(run_dir, caps=caps, env=env, env_key=key, on_start=bar.start if progress else None,
                           on_done=bar.done, notify=lambda message: console.print(message, soft_wrap=True),
                           executor=executor, packing=packing,
                           estimate=estimate.to_plain() if estimate is not None else None)
    except ExecutorUnavailable as exc:
        errors.print(f"error: {exc}; the run is resumable: nvbench run --resume {run_dir}", soft_wrap=True)
        return EXIT_BAD_INPUT
    except runner.Interrupted as exc:
        if exc.cancelled:
            errors.print(f"interrupted; cancelled SLURM job(s) {', '.join(exc.cancelled)} (scancel); finish with: "
                         f"nvbench run --resume {run_dir}", soft_wrap=True)
        else:
            errors.print(f"interrupted; finish with: nvbench run --resume {run_dir}", soft_wrap=True)
        return EXIT_INTERRUPTED
    except KeyboardInterrupt:
        errors.print(f"interrupted; finish with: nvbench run --resume {run_dir}", soft_wrap=True)
        return EXIT_INTERRUPTED
    try:
        _count(run_dir, caps, env, key, notify=lambda message: console.print(message, soft_wrap=True))
    except KeyboardInterrupt:
        errors.print(f"interrupted while counting; finish with: nvbench run --resume {run_dir}", soft_wrap=True)
        return EXIT_INTERRUPTED
    rows, results = store.read_cells(run_dir).to_pylist(), Console()
    if verbose:
        results.print(detail_table(rows))
    print_summary(results, rows, run_dir, store.read_json(run_dir / runfolder.MANIFEST))
    return derive.exit_code(rows)


def add_parser(subparsers) -> None:
    r = subparsers.add_parser("run", help="run a matrix, one isolated process per cell")
    r.add_argument("matrix", nargs="?", help="the matrix file (TOML) to run (default: none; "
                   "--resume RUN_DIR instead)")
    r.add_argument("--smoke", action="store_true", help="shrink every cell to run anywhere in minutes")
    r.add_argument("--only", action="append", default=[], metavar="AXIS=VALUE",
                   help="keep cells with this axis value (repeat: same axis widens, other axes narrow; default: "
                        "every cell)")
    own_default(r.add_argument("--repeats", type=int, metavar="N",
                               help="run every cell N times (default: the matrix's run.repeats, itself "
                                    "%(own_default)s when unset)"), knob_default(RunConfig, "repeats"))
    r.add_argument("--dry-run", action="store_true", help="list the cells and what would be skipped, and the run's estimated wall time here")
    r.add_argument("--resume", metavar="RUN_DIR", help="finish an interrupted run (default: start a new one)")
    r.add_argument("--out", metavar="DIR", help="run folder (default: REPORTS/<run_id>)")
    own_default(r.add_argument("--executor", choices=("local", "slurm"),
                               help="where jobs run: this machine, or one SLURM job each (default: the matrix's "
                                    "[executor] kind, itself %(own_default)s when unset)"),
                knob_default(ExecutorConfig, "kind"))
    r.add_argument("--reports", default="reports", metavar="DIR", help="where run folders go (default: %(default)s)")
    add_slots_flag(r)
    r.add_argument("--no-progress", action="store_true", help="no progress bar (a line per cell is still printed)")
    r.add_argument("--quiet", action="store_true",
                   help="print only the summary (stdout) and problems (stderr): no progress, no line per job")
    r.add_argument("--verbose", action="store_true",
                   help="end with every (cell, repeat) row in full, before the summary (stdout)")
    add_work_flags(r, default_repeats=0, what="per cell after the timed jobs (the nightly runs 1, so that its run "
                   "folder and a baseline promoted from it carry work.parquet)")
    r.add_argument("--fire-drill", type=float, metavar="PCT",
                   help="add calibrated extra work of PCT %% of each measured step (tests the regression detector; "
                        "every row is flagged; default: off)")
    r.set_defaults(func=cmd_run)
