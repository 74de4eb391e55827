"""`nvbench` command line: argument parsing and dispatch only."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from harness import __version__
from harness.spec.matrix import MatrixError, load_matrix, with_repeats

EXIT_OK, EXIT_FAILURES, EXIT_BAD_INPUT, EXIT_INCONCLUSIVE, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
"""nvbench report / ab with --fail-on-regression: 0 every judged cell unchanged or improved (nothing failed);
1 a confirmed regression or a failed cell; 3 nothing regressed but some cell stayed inconclusive; 2 bad
input; 130 interrupted."""


def _reach_warning(repeats: int, *, smoke: bool, what: str) -> None:
    """One line up front when runs of `repeats` repeats could never be told apart at the report's default level
    (a description needs no verdict: 1 repeat and --smoke runs say nothing)."""
    from harness.analysis.compare import Thresholds
    from harness.analysis.decide import reach_problem

    if repeats >= 2 and not smoke and (problem := reach_problem(repeats, Thresholds().level, what=what)):
        print(f"warning: {problem}: two such runs can only be inconclusive", file=sys.stderr)


def _bad_input(problems: list[str]) -> int:
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    return EXIT_BAD_INPUT


def cmd_validate(args: argparse.Namespace) -> int:
    problems = []
    for path in args.matrix:
        try:
            matrix = load_matrix(path)
            from harness.spec.cells import expand

            cells = expand(matrix, only=args.only)
            print(f"{path}: ok, {len(cells)} cells x {matrix.run.repeats} repeats")
            _reach_warning(matrix.run.repeats, smoke=False, what=f"{path}: run.repeats = {matrix.run.repeats}")
        except MatrixError as exc:
            problems += exc.problems
    return _bad_input(problems) if problems else EXIT_OK


def _env_and_caps(device: str):
    from harness.orchestrate.runner import probe_capabilities
    from harness.results.env import collect_env, env_key

    env = collect_env()
    return env, env_key(env), probe_capabilities(device, env)


def _fire_drill_problem(pct: float | None) -> str | None:
    if pct is not None and not 0 < pct <= 1000:
        return f"--fire-drill {pct:g}: must be a percentage in (0, 1000]"
    return None


def cmd_run(args: argparse.Namespace) -> int:
    from harness.orchestrate import runner
    from harness.results import store
    from harness.spec.cells import expand

    if args.resume and (args.matrix or args.only or args.smoke or args.out or args.dry_run or args.fire_drill
                        or args.repeats is not None or args.executor):
        return _bad_input(["--resume takes the run folder alone (its plan fixes matrix, filters, --smoke, "
                           "--repeats, --fire-drill and --executor)"])
    if problem := _fire_drill_problem(args.fire_drill):
        return _bad_input([problem])
    if args.resume:
        run_dir = Path(args.resume)
        try:
            _, _, cells = runner.load_plan(run_dir)
            store.read_cells(run_dir)  # a finished job's row must read back, or the summary fails at the end
        except runner.RunFolderError as exc:
            return _bad_input([str(exc)])
        except store.UnreadableFile as exc:
            return _bad_input([f"{exc}; delete it to run that job again"])
        device = next(iter(cells.values())).run.device
        executor = runner.plan_executor(run_dir)
    else:
        if not args.matrix:
            return _bad_input(["nvbench run needs a MATRIX file or --resume RUN_DIR"])
        try:
            matrix = with_repeats(load_matrix(args.matrix), args.repeats)
            cell_list = expand(matrix, smoke=args.smoke, only=args.only)
        except MatrixError as exc:
            return _bad_input(exc.problems)
        if args.out and (Path(args.out) / runner.PLAN).exists():
            return _bad_input([f"--out {args.out}: already holds a run; use --resume {args.out}"])
        device = matrix.run.device
        knob = f"--repeats {args.repeats}" if args.repeats is not None else f"run.repeats = {matrix.run.repeats}"
        _reach_warning(matrix.run.repeats, smoke=args.smoke, what=knob)
        executor = _executor_config(matrix, args.executor)
    env, key, caps = _env_and_caps(device)
    if args.dry_run:
        for cell in cell_list:
            reason = runner.skip_reason(cell, caps)
            print(f"{cell.cell_id}  x{matrix.run.repeats}  " + (f"skip: {reason}" if reason else "run"))
        print(f"{len(cell_list)} cells, {len(cell_list) * matrix.run.repeats} jobs; nothing was run or written")
        return EXIT_OK
    from harness.orchestrate.executors import ExecutorUnavailable, executor_for

    where = executor_for(executor)
    try:
        where.check()  # before anything is written: sbatch missing or the controller down is one line, exit 2
    except ExecutorUnavailable as exc:
        return _bad_input([str(exc)])
    if not args.resume:
        run_dir = runner.create_run(matrix, cell_list, run_dir=Path(args.out) if args.out else None,
                                    reports_root=Path(args.reports), smoke=args.smoke, only=args.only, env=env,
                                    fire_drill_pct=args.fire_drill or 0.0, executor=executor)
    return _execute(run_dir, caps, env, key, progress=not args.no_progress, verbose=args.verbose, executor=where)


def _executor_config(matrix, flag: str | None):
    """The matrix's [executor], its kind replaced by `--executor` when given (the flag wins over the file)."""
    import dataclasses

    return dataclasses.replace(matrix.executor, kind=flag) if flag else matrix.executor


def _execute(run_dir: Path, caps, env, key, *, progress: bool, verbose: bool, executor=None) -> int:
    from rich.console import Console

    from harness.console import RunProgress, detail_table, print_summary
    from harness.orchestrate import runner
    from harness.results import store

    console = Console(stderr=True)
    _, jobs, _ = runner.load_plan(run_dir)
    todo = runner.pending(run_dir, jobs)
    # soft_wrap: a path must stay one copyable line whatever the terminal's width
    console.print(f"run folder: {run_dir}  ({len(todo)} of {len(jobs)} jobs to run)", soft_wrap=True)
    from harness.orchestrate.executors import ExecutorUnavailable

    try:
        with RunProgress(console, len(todo)) as bar:
            runner.execute(run_dir, caps=caps, env=env, env_key=key, on_start=bar.start if progress else None,
                           on_done=bar.done, notify=lambda message: console.print(message, soft_wrap=True),
                           executor=executor)
    except ExecutorUnavailable as exc:
        console.print(f"error: {exc}; the run is resumable: nvbench run --resume {run_dir}", soft_wrap=True)
        return EXIT_BAD_INPUT
    except runner.Interrupted as exc:
        if exc.cancelled:
            console.print(f"interrupted; cancelled SLURM job(s) {', '.join(exc.cancelled)} (scancel); finish with: "
                          f"nvbench run --resume {run_dir}", soft_wrap=True)
        else:
            console.print(f"interrupted; finish with: nvbench run --resume {run_dir}", soft_wrap=True)
        return EXIT_INTERRUPTED
    except KeyboardInterrupt:
        console.print(f"interrupted; finish with: nvbench run --resume {run_dir}", soft_wrap=True)
        return EXIT_INTERRUPTED
    rows = store.read_cells(run_dir).to_pylist()
    if verbose:
        Console().print(detail_table(rows))
    print_summary(console, rows, run_dir, store.read_json(run_dir / runner.MANIFEST))
    return runner.exit_code(rows)


def cmd_profile(args: argparse.Namespace) -> int:
    from datetime import datetime, timezone

    from harness.orchestrate import profile, runner
    from harness.spec.cells import expand

    if args.steps < 1:
        return _bad_input([f"--steps must be >= 1, got {args.steps}"])
    nsys = profile.nsys_path() if args.tool == "nsys" else None
    if args.tool == "nsys" and nsys is None:
        return _bad_input(["nsys (Nsight Systems) is not on PATH; install it, or profile with --tool torch"])
    try:
        matrix = load_matrix(args.matrix)
        cell = profile.select_cell(expand(matrix, smoke=args.smoke, only=args.only), args.cell)
    except MatrixError as exc:
        return _bad_input(exc.problems)
    except ValueError as exc:
        return _bad_input([str(exc)])
    env, key, caps = _env_and_caps(matrix.run.device)
    reason = runner.skip_reason(cell, caps) or profile.unsupported_reason(args.tool, caps.device)
    if reason:
        return _bad_input([f"{cell.cell_id}: cannot be profiled here: {reason}"])
    run_dir = Path(args.out) if args.out else Path(args.reports) / runner.new_run_id(
        f"{matrix.benchmark.name}-profile", datetime.now(timezone.utc))
    spec = profile.ProfileSpec(tool=args.tool, steps=args.steps, out_dir=run_dir / profile.PROFILE_DIR,
                               nsys=nsys or "nsys", device=caps.device)
    print(f"profiling {cell.cell_id} with {args.tool} over {args.steps} measured steps -> {spec.out_dir}",
          file=sys.stderr)
    result = profile.profile_cell(cell, spec, run_id=run_dir.name, caps=caps, env=env, env_key=key,
                                  matrix_source=matrix.source, notify=lambda m: print(m, file=sys.stderr))
    row = result.row
    if row["status"] != "ok":
        print(f"error: profiled cell {row['status']}: {row['reason']} (log: {result.log_path})", file=sys.stderr)
        return EXIT_FAILURES
    for path in result.files:
        print(path)
    if args.tool == "nsys" and (sqlite := next((p for p in result.files if p.suffix == ".sqlite"), None)):
        from harness.analysis import timeline

        try:
            summary = timeline.window_summary(timeline.read_ranges(sqlite))
        except timeline.TimelineReadError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_FAILURES
        if not summary:
            print(f"error: {sqlite}: no NVTX range inside the measured window", file=sys.stderr)
            return EXIT_FAILURES
        print(f"NVTX ranges of the measured window ({args.steps} steps):\n" + timeline.render_summary(summary),
              file=sys.stderr)
    print(f"profiled throughput {row['throughput_img_per_s']:.1f} img/s (not a timed result); "
          f"row in {spec.out_dir / 'cells'}", file=sys.stderr)
    return EXIT_OK


def _thresholds(args: argparse.Namespace):
    """compare.Thresholds from the report/ab flags that were given (the rest keep their defaults)."""
    from harness.analysis.compare import Thresholds

    given = {name: getattr(args, name) for name in ("floor_pct", "fdr_q", "min_repeats", "exclude_unsteady",
                                                     "history_runs", "accuracy_tolerance", "speed_adjust",
                                                     "fast_steps")
             if getattr(args, name, None) is not None}
    return Thresholds(**given)


def _print_report(result, fail_on_regression: bool) -> int:
    """The report's files, its headline, and the cells a person must read (regressions, failures, then the
    inconclusive ones, loud, with the repeats each needs); the exit status of --fail-on-regression."""
    from harness.analysis.compare import FAILED, INCONCLUSIVE
    from harness.analysis.report import headline_words

    comparison = result.comparison
    for note in comparison.notes:
        if note.startswith("warning:"):
            print(note, file=sys.stderr)
    for path in result.files:
        print(path)
    print(f"{comparison.candidate.run_id} vs {comparison.baseline_label}: {headline_words(comparison)}",
          file=sys.stderr)
    for v in comparison.regressions:
        print(f"regression: {v.cell_id}: {v.reason}", file=sys.stderr)
    failed = [v for v in comparison.verdicts if v.verdict == FAILED]
    for v in failed:
        print(f"failed: {v.cell_id}: {v.reason}", file=sys.stderr)
    open_ = [v for v in comparison.verdicts if v.verdict == INCONCLUSIVE and not v.is_regression]
    if open_:
        print(f"INCONCLUSIVE: {len(open_)} cell(s) neither shown changed nor shown unchanged; not a pass:",
              file=sys.stderr)
        for v in open_:
            print(f"inconclusive: {v.cell_id}: {v.reason}", file=sys.stderr)
    if not fail_on_regression:
        return EXIT_OK
    if comparison.regressions or failed:
        return EXIT_FAILURES
    return EXIT_INCONCLUSIVE if open_ else EXIT_OK


def cmd_report(args: argparse.Namespace) -> int:
    from harness.analysis.compare import RunInputError
    from harness.analysis.report import make_report

    from harness.analysis.decide import reach_problem

    try:
        thresholds = _thresholds(args)
        if args.min_repeats is not None and (problem := reach_problem(
                args.min_repeats, thresholds.level, what=f"--min-repeats {args.min_repeats}")):
            raise ValueError(f"{problem}; give more, or a larger --fdr")
        result = make_report(Path(args.run_dir), baseline=Path(args.baseline) if args.baseline else None,
                             history=Path(args.history) if args.history else None,
                             out_dir=Path(args.out) if args.out else None, thresholds=thresholds)
    except RunInputError as exc:
        return _bad_input(exc.problems)
    except ValueError as exc:
        return _bad_input([str(exc)])
    except OSError as exc:  # e.g. an --out folder that cannot be written (write_all: no file half-new)
        return _bad_input([f"{exc.filename or args.out or args.run_dir}: cannot write the report: {exc.strerror}"])
    return _print_report(result, args.fail_on_regression)


def cmd_ab(args: argparse.Namespace) -> int:
    from datetime import datetime, timezone

    from harness.analysis import compare
    from harness.analysis.report import write_report
    from harness.orchestrate import ab, runner
    from harness.spec.cells import expand

    from harness.analysis.decide import reach_problem

    try:
        matrix = with_repeats(load_matrix(args.matrix), args.repeats)
        looks = ab.look_schedule(matrix.run.repeats, args.max_repeats or matrix.run.repeats)
        thresholds = _thresholds(args)
        if (decisive := ab.decisive_looks(looks, thresholds.fdr_q)) != looks:
            print(f"note: {looks[0]} + {looks[0]} pairs cannot decide at the level split over the looks "
                  f"{looks}: the A/B starts at {decisive[0]} pairs (looks {decisive})", file=sys.stderr)
            looks, matrix = decisive, with_repeats(matrix, decisive[0])
        thresholds = dataclasses.replace(thresholds, looks=len(looks))
        knob = f"--max-repeats {looks[-1]}" if len(looks) > 1 else f"--repeats {looks[-1]}" \
            if args.repeats is not None else f"run.repeats = {looks[-1]}"
        if problem := reach_problem(looks[-1], thresholds.level, what=knob):
            problem += f" (the level {thresholds.fdr_q:g} split over {len(looks)} looks)" if len(looks) > 1 else ""
            if args.repeats is None and args.max_repeats is None:  # the matrix's own repeats: say so, run
                print(f"warning: {problem}: every cell will be inconclusive", file=sys.stderr)
            else:  # flags that ask for an A/B that can never decide
                raise ValueError(problem)
        cells = expand(matrix, smoke=args.smoke, only=args.only)
        if problem := _fire_drill_problem(args.fire_drill):
            raise ValueError(problem)
        pythons = {"a": ab.resolve_python(args.a), "b": ab.resolve_python(args.b)}
        checkouts = {name: ab.resolve_checkout(path) if path else None
                     for name, path in (("a", args.a_checkout), ("b", args.b_checkout))}
        envs = {name: ab.collect_env_under(py, checkout=checkouts[name]) for name, py in pythons.items()}
    except MatrixError as exc:
        return _bad_input(exc.problems)
    except ab.AbInputError as exc:
        return _bad_input(exc.problems)
    except ValueError as exc:
        return _bad_input([str(exc)])
    out = Path(args.out) if args.out else Path(args.reports) / runner.new_run_id(
        f"{matrix.benchmark.name}-ab", datetime.now(timezone.utc))
    if out.exists() and any(out.iterdir()):
        return _bad_input([f"--out {out}: not empty"])
    caps = runner.probe_capabilities(matrix.run.device, {k: v for k, v in envs["a"].items() if k != "env_key"})
    ab.create_ab(matrix, cells, out_dir=out, pythons=pythons, envs=envs, smoke=args.smoke, only=args.only,
                 seed=args.seed, checkouts=checkouts, fire_drill_pct=args.fire_drill or 0.0)
    label = {n: pythons[n] + (f" in {checkouts[n]}" if checkouts[n] else "") for n in ab.SIDES}
    adaptive = f"; more pairs of inconclusive cells up to {looks[-1]} a side, looks at {looks}" if len(looks) > 1 else ""
    print(f"A/B folder: {out}  (A = {label['a']}, B = {label['b']}; "
          f"{2 * len(cells) * matrix.run.repeats} jobs{adaptive})", file=sys.stderr)

    def done(side: str, row: dict) -> None:
        detail = f"{row['throughput_img_per_s']:.1f} img/s" if row["status"] == "ok" else row["reason"]
        print(f"{side.upper()} {row['status']:>8} {row['cell_id']} r{row['repeat']}  {detail}", file=sys.stderr)

    def judge() -> compare.Comparison:
        return compare.compare_runs(compare.load_run(out / "b"), compare.load_run(out / "a"), thresholds,
                                    require_same_env=False, mode="ab", baseline_label=f"A ({label['a']})")

    try:
        ab.run_adaptive(out, looks, judge=lambda: [v.cell_id for v in judge().verdicts
                                                    if v.verdict == compare.INCONCLUSIVE],
                        caps=caps, envs=envs, pythons=pythons, seed=args.seed, checkouts=checkouts, on_done=done,
                        notify=lambda m: print(m, file=sys.stderr))
    except KeyboardInterrupt:
        print(f"interrupted; the rows so far are in {out}/a and {out}/b", file=sys.stderr)
        return EXIT_INTERRUPTED
    return _print_report(write_report(judge(), out / "report"), args.fail_on_regression)


def cmd_bisect(args: argparse.Namespace) -> int:
    from datetime import datetime, timezone

    from harness.orchestrate import bisect, runner

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
            ab_args = ["--repeats", str(args.repeats), "--max-repeats", str(args.max_repeats),
                       *[f"--only={o}" for o in args.only]]
            out = Path(args.out) if args.out else Path(args.reports) / runner.new_run_id(
                "bisect", datetime.now(timezone.utc))
            if out.exists() and any(out.iterdir()):
                raise bisect.BisectInputError(f"--out {out}: not empty (continue one with --resume {out})")
            out.mkdir(parents=True, exist_ok=True)
    except MatrixError as exc:
        return _bad_input(exc.problems)
    except bisect.BisectInputError as exc:
        return _bad_input([str(exc)])
    out = out.absolute()
    bisector = bisect.Bisector(matrix=matrix, points=points, labels=labels, kind=kind, out=out, ab_args=ab_args,
                               repo=repo, notify=lambda m: print(m, file=sys.stderr))
    if args.resume:
        bisector.load()
    print(f"bisect folder: {out} ({len(points)} {kind}, good {bisector.name(0)}, bad {bisector.name(len(points) - 1)})",
          file=sys.stderr)
    try:
        code, _ = bisector.run()
    except KeyboardInterrupt:
        bisector.save()
        print(f"interrupted; continue with: nvbench bisect --resume {out}", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        bisector.cleanup()
    print(out / bisect.LOG)
    return code


def _add_threshold_flags(p: argparse.ArgumentParser, *, history: bool) -> None:
    p.add_argument("--fail-on-regression", action="store_true",
                   help="exit 1 on a confirmed regression or a failed cell, 3 when nothing regressed but a cell "
                        "stayed inconclusive, 0 otherwise")
    p.add_argument("--floor", dest="floor_pct", type=float, metavar="PCT",
                   help="practical floor: smaller changes are never a regression (default: see harness/analysis/compare.py)")
    p.add_argument("--fdr", dest="fdr_q", type=float, metavar="Q", help="Benjamini-Hochberg FDR across cells (0.01)")
    p.add_argument("--min-repeats", type=int, metavar="N", help="fewest usable repeats per side (5)")
    p.add_argument("--exclude-unsteady", action="store_true", default=None,
                   help="leave out repeats whose window failed the steadiness check")
    p.add_argument("--accuracy-tolerance", type=float, metavar="FRACTION", help="top-1 band half-width (0.01)")
    p.add_argument("--speed-adjust", action=argparse.BooleanOptionalAction, default=None,
                   help="compare CPU cells at equal machine-speed probe time where every repeat has a probe "
                        "(default on; docs/performance.md)")
    p.add_argument("--fast-steps", action=argparse.BooleanOptionalAction, default=None,
                   help="test the fast-step rate beside throughput where every repeat recorded it; either "
                        "can call a regression (default on; --no-fast-steps: throughput alone)")
    if history:
        p.add_argument("--history-runs", type=int, metavar="N", help="past runs that form the history baseline (10)")


def cmd_env(args: argparse.Namespace) -> int:
    from harness.results.env import collect_env, env_key, format_env

    env = collect_env()
    if args.json:
        print(json.dumps(env | {"env_key": env_key(env)}, indent=2, sort_keys=True, default=str))
    else:
        print(format_env(env))
        print(f"{'env_key':<20} {env_key(env)}")
    return EXIT_OK


def cmd_data_make(args: argparse.Namespace) -> int:
    from harness.data.generate import make_dataset

    try:
        out = make_dataset(Path(args.out), image_size=args.image_size, num_classes=args.classes,
                           train_per_class=args.train_per_class, val_per_class=args.val_per_class, seed=args.seed,
                           kind=args.kind)
    except ValueError as exc:  # the parameters, checked before anything is written
        return _bad_input([f"nvbench data make: {exc}"])
    print(f"dataset written to {out}")
    return EXIT_OK


def cmd_data_prepare(args: argparse.Namespace) -> int:
    """Make (or find) every generated dataset the matrix's cells read, so a timed run starts measuring at once."""
    from harness.orchestrate.runner import generated_dataset, reads_generated_dataset
    from harness.spec.cells import expand

    try:
        cells = expand(load_matrix(args.matrix), smoke=args.smoke, only=args.only)
    except MatrixError as exc:
        return _bad_input(exc.problems)
    wanted = {(c.data.cache_dir, c.data.generate): c for c in cells if reads_generated_dataset(c)}
    for cell in wanted.values():
        try:
            print(generated_dataset(cell, notify=lambda line: print(line, file=sys.stderr)))
        except (ValueError, FileExistsError) as exc:  # parameters the generator refuses; a cache folder not its own
            return _bad_input([f"nvbench data prepare: {args.matrix}: {exc}"])
    if not wanted:
        print("no cell reads a generated dataset (synthetic data, or data.path set)", file=sys.stderr)
    return EXIT_OK


def cmd_history(args: argparse.Namespace) -> int:
    """Change points and drifts of every cell over a folder of nightly runs: history.html, changes.md,
    changes.parquet (harness.analysis.history)."""
    from harness.analysis import history, trend
    from harness.analysis.compare import RunInputError

    folder = Path(args.history_dir)
    out = Path(args.out) if args.out else folder / "trend"
    given = {name: getattr(args, name) for name in ("floor_pct", "min_segment", "alpha", "drift_nights")
             if getattr(args, name) is not None}
    try:
        result = trend.write_history(history.load_history(folder, history.HistorySettings(**given)), out)
        for summary in map(Path, args.summary):
            from harness.results import store

            before = summary.read_text(encoding="utf-8") if summary.is_file() else ""
            store.write_bytes(summary, (before + trend.new_changes_markdown(result.history)).encode())
    except RunInputError as exc:
        return _bad_input(exc.problems)
    except ValueError as exc:
        return _bad_input([str(exc)])
    except OSError as exc:
        return _bad_input([f"{exc.filename or out}: cannot write the history: {exc.strerror}"])
    for path, why in result.history.skipped:
        print(f"skipped {path}: {why}", file=sys.stderr)
    for path in result.files:
        print(path)
    h = result.history
    print(f"{len(h.nights)} night(s), {len(h.series)} series: {len(h.changes)} change(s), "
          f"{sum(c.is_new for c in h.changes)} new tonight", file=sys.stderr)
    for c in h.changes:
        if c.is_new:
            print(f"new {c.kind}: {c.cell_id} {c.metric} {trend.change_text(c)} at night {c.night} ({c.run_id}), "
                  f"commits {trend.commit_range(c)}", file=sys.stderr)
    return EXIT_OK


def cmd_export(args: argparse.Namespace) -> int:
    """A run's cells in another tool's format (harness.analysis.export)."""
    from harness.analysis.compare import RunInputError
    from harness.analysis.export import export_run

    try:
        count = export_run(Path(args.run_dir), args.format, Path(args.out))
    except RunInputError as exc:
        return _bad_input(exc.problems)
    except OSError as exc:
        return _bad_input([f"{exc.filename or args.out}: cannot write the export: {exc.strerror}"])
    print(args.out)
    print(f"{count} benchmark(s) in {args.format} format", file=sys.stderr)
    return EXIT_OK


def _add_history_parser(sub) -> None:
    h = sub.add_parser("history", help="change points and drifts per cell over a folder of nightly runs")
    h.add_argument("history_dir", metavar="HISTORY_DIR")
    h.add_argument("--out", metavar="DIR", help="where history.html, changes.md, changes.parquet go "
                   "(default: HISTORY_DIR/trend)")
    h.add_argument("--floor", dest="floor_pct", type=float, metavar="PCT",
                   help="practical floor of throughput and fast-step changes in %% (default 3)")
    h.add_argument("--min-segment", type=int, metavar="N", help="fewest nights on each side of a change (2)")
    h.add_argument("--alpha", type=float, metavar="A", help="test level of each change point (0.01)")
    h.add_argument("--drift-nights", type=int, metavar="K", help="a drift is a slope over the last K nights (14)")
    h.add_argument("--summary", metavar="FILE", action="append", default=[],
                   help="append tonight's new change points to this Markdown file (repeatable)")
    h.set_defaults(func=cmd_history)
    x = sub.add_parser("export", help="a run's cells in another tool's format (pytest-benchmark JSON)")
    x.add_argument("run_dir", metavar="RUN")
    x.add_argument("--format", required=True, choices=("pytest-benchmark",),
                   help="pytest-benchmark: one benchmark per cell, img/s as ops, step times as stats")
    x.add_argument("--out", required=True, metavar="FILE", help="the JSON file to write")
    x.set_defaults(func=cmd_export)


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
    r.add_argument("--repeats", type=int, metavar="N", help="run every cell N times (overrides run.repeats)")
    r.add_argument("--dry-run", action="store_true", help="list the cells and what would be skipped")
    r.add_argument("--resume", metavar="RUN_DIR", help="finish an interrupted run")
    r.add_argument("--out", metavar="DIR", help="run folder (default: REPORTS/<run_id>)")
    r.add_argument("--executor", choices=("local", "slurm"),
                   help="where jobs run: this machine, or one SLURM job each (wins over the matrix's [executor] kind)")
    r.add_argument("--reports", default="reports", metavar="DIR", help="where run folders go (default: reports)")
    r.add_argument("--no-progress", action="store_true", help="no progress bar (a line per cell is still printed)")
    r.add_argument("--verbose", action="store_true",
                   help="end with every (cell, repeat) row in full, before the summary (stdout)")
    r.add_argument("--fire-drill", type=float, metavar="PCT",
                   help="add calibrated extra work of PCT %% of each measured step (tests the regression detector; "
                        "every row is flagged)")
    r.set_defaults(func=cmd_run)

    pr = sub.add_parser("profile", help="run one cell under nsys or torch.profiler, apart from timed runs")
    pr.add_argument("matrix")
    pr.add_argument("--cell", metavar="ID", help="cell id or a unique prefix (optional when one cell is left)")
    pr.add_argument("--only", action="append", default=[], metavar="AXIS=VALUE", help="filter cells as in run")
    pr.add_argument("--smoke", action="store_true", help="shrink the cell as `run --smoke` does")
    pr.add_argument("--tool", choices=("nsys", "torch"), default="nsys",
                    help="nsys: Nsight Systems timeline; torch: torch.profiler trace and table (default: nsys)")
    pr.add_argument("--steps", type=int, default=10, metavar="N", help="measured steps to capture (default: 10)")
    pr.add_argument("--out", metavar="DIR", help="run folder whose profile/ receives the results "
                    "(default: REPORTS/<run_id>); may be an existing run: its timed results stay untouched")
    pr.add_argument("--reports", default="reports", metavar="DIR", help="where run folders go (default: reports)")
    pr.set_defaults(func=cmd_profile)

    rp = sub.add_parser("report", help="verdicts vs a baseline run or a history: HTML, Markdown, JUnit, Parquet")
    rp.add_argument("run_dir", metavar="RUN_DIR")
    side = rp.add_mutually_exclusive_group()
    side.add_argument("--baseline", metavar="RUN_DIR", help="run folder (or pointer file) to compare with")
    side.add_argument("--history", metavar="DIR", help="folder of past runs: screen each cell against its history")
    rp.add_argument("--out", metavar="DIR", help="where the report goes (default: RUN_DIR/report)")
    _add_threshold_flags(rp, history=True)
    rp.set_defaults(func=cmd_report)

    ab = sub.add_parser("ab", help="run a matrix under two interpreters or checkouts, interleaved; compare B with A")
    ab.add_argument("matrix")
    ab.add_argument("--a", default=sys.executable, metavar="PYTHON",
                    help="interpreter of side A, the baseline (default: this one)")
    ab.add_argument("--b", default=sys.executable, metavar="PYTHON",
                    help="interpreter of side B, the candidate (default: this one)")
    ab.add_argument("--a-checkout", metavar="DIR", help="checkout whose harness side A runs, e.g. a git worktree "
                    "of the baseline's commit (default: this one)")
    ab.add_argument("--b-checkout", metavar="DIR", help="checkout whose harness side B runs (default: this one)")
    ab.add_argument("--fire-drill", type=float, metavar="PCT",
                    help="slow side B by PCT %% of each measured step (proves an A/B confirmation still rings)")
    ab.add_argument("--only", action="append", default=[], metavar="AXIS=VALUE", help="filter cells as in run")
    ab.add_argument("--smoke", action="store_true", help="shrink every cell as `run --smoke` does")
    ab.add_argument("--repeats", type=int, metavar="N", help="repeats per side (overrides run.repeats)")
    ab.add_argument("--max-repeats", type=int, metavar="M",
                    help="while a cell is inconclusive, run more interleaved pairs of it, up to M a side (looks at "
                         "N, 2N, 4N, ..., M, leaving out looks too small to decide at the split level; the level is split "
                         "over the looks). Default: N, no more pairs")
    ab.add_argument("--seed", type=int, default=0, help="seed of the A/B order within each pair (default: 0)")
    ab.add_argument("--out", metavar="DIR", help="A/B folder (default: REPORTS/<id>); holds a/, b/, report/")
    ab.add_argument("--reports", default="reports", metavar="DIR", help="where A/B folders go (default: reports)")
    _add_threshold_flags(ab, history=False)
    ab.set_defaults(func=cmd_ab)

    bi = sub.add_parser("bisect", help="find the first commit (or interpreter) that made a matrix slower, by A/B")
    bi.add_argument("matrix", nargs="?")
    bi.add_argument("--good", metavar="REV", help="a commit known fast (bisect runs in the repository under test)")
    bi.add_argument("--bad", metavar="REV", help="a later commit known slower (default: HEAD)")
    bi.add_argument("--pythons", metavar="FILE", help="bisect interpreters instead: one per line, good first, bad last")
    bi.add_argument("--only", action="append", default=[], metavar="AXIS=VALUE", help="filter cells as in run")
    bi.add_argument("--repeats", type=int, default=5, metavar="N", help="first pairs of each A/B (default: 5)")
    bi.add_argument("--max-repeats", type=int, default=10, metavar="M",
                    help="pairs an inconclusive cell may grow to in each A/B (default: 10)")
    bi.add_argument("--out", metavar="DIR", help="bisect folder (default: REPORTS/<id>): bisect.md, bisect.json")
    bi.add_argument("--resume", metavar="DIR", help="continue an interrupted bisect without redoing its comparisons")
    bi.add_argument("--reports", default="reports", metavar="DIR", help="where bisect folders go (default: reports)")
    bi.set_defaults(func=cmd_bisect)

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
    pp = dsub.add_parser("prepare", help="make every generated dataset a matrix's cells read, before a timed run")
    pp.add_argument("matrix")
    pp.add_argument("--only", action="append", default=[], metavar="AXIS=VALUE", help="filter cells as in run")
    pp.add_argument("--smoke", action="store_true", help="the datasets of the --smoke run")
    pp.set_defaults(func=cmd_data_prepare)
    _add_history_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
