"""`nvbench ab`: run a matrix under two interpreters or checkouts, interleaved, and compare B with A."""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

from harness.commands.common import (
    EXIT_INCONCLUSIVE,
    EXIT_INTERRUPTED,
    add_slots_flag,
    add_threshold_flags,
    bad_input,
    fire_drill_problem,
    knob_default,
    own_default,
    print_report,
    slot_packing,
    thresholds_from,
)
from harness.commands.kernel_flags import add_kernel_flags, kernel_extra, kernel_settings_problem
from harness.commands.work_flags import DEFAULT_WORK_REPEATS, add_work_flags
from harness.matrix.sections import RunConfig
from harness.matrix.parse import MatrixError, load_matrix, with_repeats
from harness.catalogue import col
from harness.results.store import CannotWrite

DEFAULT_MAX_RERUNS = 2
"""Re-runs of a spoiled window (interference, a start transient) per cell and side of an A/B
(harness.orchestrate.workflows.rerun). On a quiet machine a
window that opens in a transient is a hiccup (docs/performance.md); a side whose every window opens in one has
too short a warm-up, not bad luck, and re-running it more would only cost time."""


def cmd_ab(args: argparse.Namespace) -> int:
    """nvbench ab; a full disk stops it with the resume of its folder (the A/B whose ab.json holds the failed
    write), every pair written so far kept."""
    with contextlib.ExitStack() as cleanup:  # --base's worktree, removed however the A/B ends (a stop included)
        try:
            return _cmd_ab(args, cleanup)
        except CannotWrite as exc:
            from harness.orchestrate.workflows import ab

            folder = next((p for p in exc.path.parents if (p / ab.AB_FILE).is_file()), None)
            if folder is not None:
                exc.resume = f"nvbench ab --resume {folder}"
            raise


def _cmd_ab(args: argparse.Namespace, cleanup: contextlib.ExitStack) -> int:
    # the library, loaded when the command runs: its pyarrow and numpy would add ~1 s to every nvbench start
    from harness.analysis.judge import compare
    from harness.analysis.product import pipeline
    from harness.analysis.product.extras import Work
    from harness.results.store import UnreadableFile
    from harness.analysis.load.runs import load_run
    from harness.analysis.judge.verdict import INCONCLUSIVE, Comparison, with_judge
    from harness.orchestrate.workflows import ab, ab_sides
    from harness.orchestrate.placement.packing import CalibrationError
    from harness.orchestrate.placement.slots import SlotError
    from harness.orchestrate.session import opening
    from harness.orchestrate.workflows import kernel_repeats, work_repeats
    from harness.orchestrate.workflows.looks import plan_looks
    from harness.matrix.cells import expand

    from harness.orchestrate.workflows import rerun

    if args.resume:
        try:
            args = _resumed(args)
        except ValueError as exc:
            return bad_input([str(exc)])
    elif not args.matrix:
        return bad_input(["nvbench ab needs a MATRIX, or --resume DIR"])
    if args.busy_wait_s is not None and not args.busy_wait_s > 0:
        return bad_input([f"--busy-wait-s {args.busy_wait_s:g}: must be > 0 seconds"])
    own = {"a": args.a_checkout or args.base, "b": args.b_checkout}  # --base: side A's code is a worktree of it
    if warning := ab_sides.code_warning(Path.cwd(), ab.checkout_root(), own):
        print(warning, file=sys.stderr)  # before anything runs: the A/B the user meant may not be this one
    try:
        matrix = with_repeats(load_matrix(args.matrix), args.repeats)
        last = args.max_repeats or matrix.run.repeats
        knob = f"--max-repeats {last}" if args.max_repeats else f"--repeats {last}" if args.repeats is not None \
            else f"run.repeats = {last}"
        plan = plan_looks(matrix.run.repeats, args.max_repeats, with_judge(thresholds_from(args), matrix.judge),
                          knob=knob, asked=args.repeats is not None or args.max_repeats is not None)
        opening.say(plan.warning)
        opening.say(plan.note)  # after the check: an A/B that can never decide says so in one line
        looks, thresholds, matrix = plan.looks, plan.thresholds, with_repeats(matrix, plan.looks[0])
        cells = expand(matrix, smoke=args.smoke, only=args.only)
        if problem := fire_drill_problem(args.fire_drill):
            raise ValueError(problem)
        if args.max_reruns < 0:
            raise ValueError(f"--max-reruns {args.max_reruns}: must be >= 0")
        kernel_plan = kernel_repeats.KernelPlan(repeats=args.kernel_repeats, steps=args.kernel_steps)
        if args.kernels and not kernel_plan.repeats:
            raise ValueError("--kernels with --kernel-repeats 0: no profiled repeat would run")
        work_plan = work_repeats.WorkPlan(repeats=args.work_repeats, steps=args.work_steps)
        if problem := kernel_settings_problem(args):
            raise ValueError(problem)
        pythons = {"a": ab.resolve_python(args.a), "b": ab.resolve_python(args.b)}
        checkouts = {name: ab.resolve_checkout(path) if path else None
                     for name, path in (("a", args.a_checkout), ("b", args.b_checkout))}
        out = Path(args.resume) if args.resume else opening.fresh_out(args.out, reports=args.reports,
                                                                       name=f"{matrix.benchmark.name}-ab")
        base = _base_side(args, out, checkouts, cleanup) if args.base else None
        for name, checkout in checkouts.items():
            if checkout is not None:
                ab.precompile(pythons[name], checkout)
        envs = {name: ab.collect_env_under(py, checkout=checkouts[name]) for name, py in pythons.items()}
    except (MatrixError, ab.AbInputError, opening.OpeningError) as exc:
        return bad_input(exc.problems)
    except ValueError as exc:
        return bad_input([str(exc)])
    caps = opening.machine_from_env(matrix.run.device, envs["a"]).caps  # side A's interpreter: the pairs' device

    try:  # both sides of a pair run on the same slot; pairs run side by side, one per slot
        packing = slot_packing(args.slots or matrix.run.slots, device=caps.device, env=envs["a"],
                               key=envs["a"][col.env_key], backends={c.backend for c in cells},
                               source=None if args.slots else args.matrix)
    except (SlotError, CalibrationError) as exc:
        return bad_input([str(exc)])
    names = ab_sides.labels(envs, {"a": args.a_label, "b": args.b_label})
    sides = ab_sides.side_lines(names, {n: ab_sides.where(pythons[n], checkouts[n] or ab.checkout_root(), envs[n])
                                        for n in ab.SIDES})
    if not args.resume:
        ab.create_ab(matrix, cells, out_dir=out, pythons=pythons, envs=envs, smoke=args.smoke, only=args.only,
                     seed=args.seed, checkouts=checkouts, fire_drill_pct=args.fire_drill or 0.0,
                     max_reruns=args.max_reruns, labels=names, settings=_settings(args), base=base)
    waits = rerun.WaitBudget(args.busy_wait_s or _default_wait_s(cells, looks, caps, envs, Path(args.reports)))
    adaptive = f"; more pairs of inconclusive cells up to {looks[-1]} a side, looks at {looks}" if len(looks) > 1 else ""
    print(f"A/B folder: {out}  ({2 * len(cells) * matrix.run.repeats} jobs{adaptive}; a repeat whose window opens "
          f"in a start transient or under interference runs again, at most {args.max_reruns} per cell and side)", *sides, sep="\n", file=sys.stderr)
    print(_estimate_line(cells, looks, caps, envs, Path(args.reports), work_plan.repeats)
          + f"; beside a neighbour it waits at most {waits.limit_s:.0f} s in all (--busy-wait-s)", file=sys.stderr)

    def done(side: str, row: dict) -> None:
        detail = f"{row[col.throughput_img_per_s]:.1f} img/s" if row["status"] == "ok" else row["reason"]
        where = f" s{row['slot']}" if row.get("packing") not in (None, "solo") else ""
        print(f"{side.upper()} {row['status']:>8} {row[col.cell_id]} r{row['repeat']}{where}  {detail}", file=sys.stderr)

    def judge() -> Comparison:
        return compare.compare_runs(load_run(out / "b"), load_run(out / "a"), thresholds, require_same_env=False,
                                    mode="ab", baseline_label="A", candidate_label="B", sides=sides)

    try:
        ab.run_adaptive(out, looks, judge=lambda: [v.cell_id for v in judge().verdicts
                                                    if v.verdict == INCONCLUSIVE],
                        caps=caps, envs=envs, pythons=pythons, seed=args.seed, checkouts=checkouts, on_done=done,
                        notify=lambda m: print(m, file=sys.stderr), packing=packing, waits=waits)
        comparison = judge()
        targets, why = kernel_plan.targets(comparison, asked=args.kernels)
        if targets:
            print(f"{why}: {kernel_plan.repeats} profiled processes per side of {len(targets)} cell(s), "
                  f"{kernel_plan.steps} steps each (never part of the verdict)", file=sys.stderr)
            kernel_repeats.run_kernel_repeats(out, targets, kernel_plan, caps=caps, envs=envs, pythons=pythons,
                                              seed=args.seed, checkouts=checkouts,
                                              notify=lambda m: print(m, file=sys.stderr))
        _count(out, [c.cell_id for c in cells], work_plan, caps=caps, envs=envs, pythons=pythons, seed=args.seed,
               checkouts=checkouts)
    except KeyboardInterrupt:
        print(f"interrupted; the rows so far are in {out}/a and {out}/b", file=sys.stderr)
        return EXIT_INTERRUPTED
    except rerun.MachineBusy as exc:  # undecided: no verdict is written, every row stays for --resume
        said = f"{rerun.busy_summary([out / 'a', out / 'b'])}; undecided"
        ab.mark_busy(out, said)  # as data, for bisect: ab.json's stopped_busy
        print(said)
        try:  # what a step does is counted exactly beside any neighbour: the work diff still answers
            _count(out, [c.cell_id for c in cells], work_plan, caps=caps, envs=envs, pythons=pythons,
                   seed=args.seed, checkouts=checkouts)
            for line in _work_lines(out, [c.cell_id for c in cells]):
                print(line)
        except KeyboardInterrupt:
            print(f"interrupted; the rows so far are in {out}/a and {out}/b", file=sys.stderr)
            return EXIT_INTERRUPTED
        except UnreadableFile as exc_:
            print(f"warning: {exc_}: no work diff", file=sys.stderr)
        print(f"stopped: {exc}; on a quiet machine finish the same pairs with: nvbench ab --resume {out}",
              file=sys.stderr)
        return EXIT_INCONCLUSIVE
    # both sides' counted work diffed beside the timing (the counted processes, where asked, ran before this): a
    # work file it cannot read leaves the timed verdict standing, the work diff said missing, never guessed
    result = pipeline.write(pipeline.Compared(comparison=comparison, base_dir=out / "a", cand_dir=out / "b"),
                            out / "report", (Work(optional=True), kernel_extra(args)))
    for line in result.lines:
        print(line, file=sys.stderr)
    return print_report(result, args.fail_on_regression)


def _base_side(args: argparse.Namespace, out: Path, checkouts: dict, cleanup: contextlib.ExitStack) -> dict:
    """--base REV: side A's code a worktree of REV's commit (the merge-base of HEAD and REV unless --base-exact; a
    resumed A/B's own) under OUT/worktrees, removed when the command ends; side B this checkout as it is, its
    uncommitted changes said. What ab.json records of it (ab.Base.record)."""
    from harness.orchestrate.session import worktrees
    from harness.orchestrate.workflows import ab
    from harness.results import store

    if args.a_checkout:
        raise ab.AbInputError([f"--base {args.base} with --a-checkout {args.a_checkout}: both name side A's code; "
                               "give one"])
    recorded = store.read_json(out / ab.AB_FILE).get("base", {}).get("commit") if args.resume else None
    b_code = checkouts["b"] or ab.checkout_root()
    base = ab.resolve_base(args.base, exact=args.base_exact, checkout=b_code, recorded=recorded)
    try:
        checkouts["a"] = cleanup.enter_context(worktrees.checked_out(base.repo, base.commit,
                                                                     out.absolute() / worktrees.FOLDER))
    except worktrees.WorktreeError as exc:
        raise ab.AbInputError([f"--base {args.base}: {exc}"]) from None
    which = "the merge-base of HEAD and" if base.merge_base else "the commit"
    print(f"A: {which} {args.base}, {base.commit[:12]}, checked out in {checkouts['a']} (removed when the A/B ends)",
          file=sys.stderr)
    if base.dirty:
        shown = ", ".join(base.dirty[:5]) + (f" and {len(base.dirty) - 5} more" if len(base.dirty) > 5 else "")
        print(f"B: {b_code} as it is, uncommitted changes included ({len(base.dirty)} file(s): {shown})",
              file=sys.stderr)
    return base.record(checkouts["a"])


RESUME_KEEPS = ("busy_wait_s",)
"""What `nvbench ab --resume DIR --busy-wait-s S` may set anew; every other setting is the A/B's own (ab.json)."""


def _settings(args: argparse.Namespace) -> dict:
    """The command's settings as ab.json keeps them for --resume (everything but the handler and --resume)."""
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k not in ("func", "resume")}


def _resumed(args: argparse.Namespace) -> argparse.Namespace:
    """The A/B of folder args.resume, as it was started (ab.json's settings), with its folder as --out."""
    from harness.orchestrate.workflows.ab import AB_FILE
    from harness.results import store

    folder = Path(args.resume)
    if args.matrix:
        raise ValueError(f"--resume {folder} takes the A/B folder alone (its matrix and flags are its own)")
    meta = folder / AB_FILE
    if not meta.is_file():
        raise ValueError(f"--resume {folder}: not an A/B folder (no {AB_FILE})")
    settings = store.read_json(meta).get("settings")
    if not settings:
        raise ValueError(f"{meta}: written before A/Bs could resume (no settings): start it again")
    given = {k: getattr(args, k) for k in RESUME_KEEPS if getattr(args, k) is not None}
    return argparse.Namespace(**{**settings, **given, "out": str(folder), "resume": str(folder), "func": args.func})


def _default_wait_s(cells, looks: list[int], caps, envs: dict, reports: Path) -> float:
    """The budget for waiting on neighbours when --busy-wait-s is not given: the A/B's own estimated wall time at its
    last look, and never under one wait's bound (rerun.QUIET_WAIT_S): a neighbour may at most double the A/B."""
    from harness.orchestrate.cost import pricing as cost
    from harness.orchestrate.workflows.rerun import QUIET_WAIT_S

    keys = [envs[side][col.env_key] for side in ("a", "b")]
    return max(QUIET_WAIT_S, cost.ab_estimate(cells, looks[-1], caps, roots=[reports], keys=keys).wall_s)


def _work_lines(out: Path, cell_ids: list[str]) -> list[str]:
    """`<cell>: work changed: optimizer +1 host sync per step (...)`, one per cell both sides counted: what an A/B
    the machine left undecided still says (none where no process was counted)."""
    from harness.analysis.load.runs import read_work_table
    from harness.analysis.product.extras import diff_tables

    diffs = diff_tables(cell_ids, read_work_table(out / "a"), read_work_table(out / "b"))
    return [f"{cid}: {diff.words()}" for cid, diff in diffs.items()]


def _count(out: Path, cell_ids: list[str], plan, **how) -> None:
    """The counted processes of every cell, one side beside the other, after the timed pairs (never timed)."""
    from harness.orchestrate.workflows import work_repeats

    if not plan.repeats:
        return
    print(f"counting: {plan.repeats} counted process(es) per side of {len(cell_ids)} cell(s), {plan.steps} steps "
          "each (never timed, never part of the verdict)", file=sys.stderr)
    order = work_repeats.run_work_repeats({"a": out / "a", "b": out / "b"}, cell_ids, plan,
                                          notify=lambda m: print(m, file=sys.stderr), **how)
    work_repeats.record_ab(out, cell_ids, plan, order)


def _estimate_line(cells, looks: list[int], caps, envs: dict, reports: Path, counted: int = 0) -> str:
    """The A/B's estimated wall time at its first look's pairs and, adaptive, at its last, from past rows in
    --reports measured in each side's environment; what its counted processes add."""
    from harness.orchestrate.cost import pricing as cost
    from harness.orchestrate.cost.estimate import duration_text

    keys = [envs[side][col.env_key] for side in ("a", "b")]
    first = cost.ab_estimate(cells, looks[0], caps, roots=[reports], keys=keys)
    last = cost.ab_estimate(cells, looks[-1], caps, roots=[reports], keys=keys) if len(looks) > 1 else None
    line = cost.ab_line(first, last, looks)
    if not counted:
        return line
    # a counted process is priced as a timed repeat of its cell: an upper bound, its window being the shorter
    extra = cost.ab_estimate(cells, counted, caps, roots=[reports], keys=keys).wall_s
    return f"{line}; then {counted} counted process(es) a side per cell, at most {duration_text(extra)}"


def add_parser(subparsers) -> None:
    ab = subparsers.add_parser(
        "ab", help="run a matrix under two interpreters or checkouts, interleaved; compare B with A")
    ab.add_argument("matrix", nargs="?", help="the matrix file (TOML) both sides run")
    ab.add_argument("--resume", metavar="DIR", help="finish the A/B of folder DIR as it was started (its matrix and "
                    "flags), running only its pending pairs: after a busy machine stopped it, or Ctrl-C (default: a new A/B)")
    ab.add_argument("--busy-wait-s", type=float, metavar="SECONDS",
                    help="seconds the A/B may wait in all for neighbours to leave its cores before re-running windows "
                         "they spoiled; once spent, the next spoiled window ends it, exit 3, every row kept for "
                         "--resume (default: the A/B's own estimated time, at least 120 s)")
    ab.add_argument("--a", default=sys.executable, metavar="PYTHON",
                    help="interpreter of side A, the baseline (default: this one, %(default)s)")
    ab.add_argument("--b", default=sys.executable, metavar="PYTHON",
                    help="interpreter of side B, the candidate (default: this one, %(default)s)")
    ab.add_argument("--a-checkout", metavar="DIR", help="checkout whose harness side A runs, e.g. a git worktree "
                    "of the baseline's commit (default: the code this nvbench imports; the A/B warns first when you "
                    "stand in another checkout)")
    ab.add_argument("--base", metavar="REV", help="side A runs REV's code: a git worktree of the merge-base of HEAD "
                    "and REV (a pull request's base), made under the A/B folder and removed when it ends; side B this "
                    "checkout as it is (default: no --base; A is --a-checkout's code)")
    ab.add_argument("--base-exact", action="store_true", help="with --base, side A runs REV itself, not its "
                    "merge-base with HEAD (default: off)")
    ab.add_argument("--b-checkout", metavar="DIR", help="checkout whose harness side B runs (default: as --a-checkout)")
    ab.add_argument("--a-label", metavar="TEXT", help="what side A is, in the verdict's words (default: the "
                    "environment fields that differ between the sides, e.g. 'torch 2.12.1'; else 'baseline')")
    ab.add_argument("--b-label", metavar="TEXT", help="what side B is (default: as --a-label; else 'candidate')")
    ab.add_argument("--max-reruns", type=int, default=DEFAULT_MAX_RERUNS, metavar="N",
                    help="run a repeat again, as a fresh process beside its pair, when its window opened in a start "
                         "transient; at most N times per cell and side; the transient row is kept as `superseded` "
                         f"(default: {DEFAULT_MAX_RERUNS}; 0: never)")
    ab.add_argument("--fire-drill", type=float, metavar="PCT",
                    help="slow side B by PCT %% of each measured step (proves an A/B confirmation still rings; "
                         "default: off)")
    ab.add_argument("--only", action="append", default=[], metavar="AXIS=VALUE",
                    help="filter cells as in run (default: every cell)")
    ab.add_argument("--smoke", action="store_true", help="shrink every cell as `run --smoke` does")
    own_default(ab.add_argument("--repeats", type=int, metavar="N",
                                help="pairs (repeats per side) the A/B starts with (default: the matrix's run.repeats, "
                                     "itself %(own_default)s when unset; with --max-repeats, raised to the fewest "
                                     "that can decide, which the A/B says before it starts)"),
                knob_default(RunConfig, "repeats"))
    ab.add_argument("--max-repeats", type=int, metavar="M",
                    help="while a cell is inconclusive, run more interleaved pairs of it, up to M a side (looks at "
                         "N, 2N, 4N, ..., M, leaving out looks too small to decide at the split level; the level is split "
                         "over the looks). Default: N, no more pairs")
    ab.add_argument("--seed", type=int, default=0, help="seed of the A/B order within each pair (default: %(default)s)")
    ab.add_argument("--out", metavar="DIR", help="A/B folder (default: REPORTS/<id>); holds a/, b/, report/")
    ab.add_argument("--reports", default="reports", metavar="DIR", help="where A/B folders go (default: %(default)s)")
    add_kernel_flags(ab)
    add_work_flags(ab, default_repeats=DEFAULT_WORK_REPEATS,
                   what="per cell and side, interleaved A/B after the timed pairs, whatever the verdict")
    add_slots_flag(ab)
    add_threshold_flags(ab, history=False)
    ab.set_defaults(func=cmd_ab)
