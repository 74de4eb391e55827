"""`nvbench calibrate-slots`: does packing jobs into slots move a backend's numbers on this machine? An
interleaved A/A (each cell alone vs with every other slot busy), judged as a report judges, written per backend
where packed runs find it."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from harness.commands.common import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    add_slots_flag,
    bad_input,
    knob_default,
    own_default,
    print_report,
    reach_warning,
    threshold_default,
    thresholds_from,
)
from harness.matrix.sections import RunConfig
from harness.catalogue import col


def cmd_calibrate(args: argparse.Namespace) -> int:
    # the library, loaded when the command runs: its pyarrow and numpy would add ~1 s to every nvbench start
    from harness.orchestrate.placement.machine import probe_machine
    from harness.orchestrate.placement.packing import Packing
    from harness.orchestrate.placement.slots import SlotError, plan_slots
    from harness.orchestrate.session import opening
    from harness.orchestrate.workflows import calibrate

    try:
        opened = opening.open_matrix(args.matrix, repeats=args.repeats, smoke=args.smoke, only=args.only)
        matrix, cells = opened.matrix, calibrate.calibration_cells(opened.cells)
        if not cells:
            raise opening.OpeningError([f"{args.matrix}: no world-size-1 cell (after --only) to calibrate: slots "
                                        "pack those"])
        out = opening.fresh_out(args.out, reports=args.reports, name=f"{matrix.benchmark.name}-slots")
    except opening.OpeningError as exc:
        return bad_input(exc.problems)
    here = opening.this_machine(matrix.run.device)
    env, key, caps = here.env, here.key, here.caps
    machine = probe_machine(caps.device)
    requested = args.slots or matrix.run.slots
    count = len(machine.gpus) if requested == "auto" else requested
    if count < 2:
        return bad_input([(f"--slots {requested}: a calibration needs 2 or more slots to pack ({len(machine.gpus)} "
                           "GPUs visible); give --slots N (without GPUs, slots share out the cores)")])
    try:
        packing = Packing(slots=plan_slots(machine, count), machine_cpus=machine.cpus)
    except SlotError as exc:
        return bad_input([str(exc)])
    reach_warning(matrix.run.repeats, smoke=args.smoke, what=f"--repeats {matrix.run.repeats}")
    calibrate.create_calibration(matrix, cells, out_dir=out, env=env, smoke=args.smoke, only=args.only, slots=count)
    print(f"calibration folder: {out}  ({len(cells)} cells x {matrix.run.repeats} pairs on {count} slots; "
          f"machine load {_load()})", file=sys.stderr)

    def done(side: str, row: dict) -> None:
        detail = f"{row[col.throughput_img_per_s]:.1f} img/s" if row["status"] == "ok" else row["reason"]
        print(f"{side:>6} {row['status']:>8} {row[col.cell_id]} r{row['repeat']} s{row.get('slot')}  {detail}",
              file=sys.stderr)

    try:
        calibrate.run_calibration(out, packing, caps=caps, env=env, env_key=key, seed=args.seed,
                                  notify=lambda m: print(m, file=sys.stderr), on_done=done)
    except KeyboardInterrupt:
        print(f"interrupted; nothing written to this machine's calibration (rows so far in {out})", file=sys.stderr)
        return EXIT_INTERRUPTED
    return _judge(out, args, env, key, count, smoke=args.smoke)


def _judge(out: Path, args: argparse.Namespace, env: dict, key: str, slots: int, *, smoke: bool) -> int:
    """Packed against solo, as a report compares; the verdict per backend into OUT/calibration.json and (not
    under --smoke) this machine's calibration file."""
    from harness.analysis.judge import compare
    from harness.analysis.judge.packing import backend_verdicts
    from harness.analysis.judge.verdict import NOTE_UNCALIBRATED
    from harness.analysis.product.pipeline import Compared, write
    from harness.analysis.load.runs import load_run
    from harness.orchestrate.workflows import calibrate
    from harness.orchestrate.placement import packing
    from harness.results import store

    # No speed adjustment: the probe would take the neighbours' load for a slower machine and adjust away the
    # very change being measured.
    thresholds = dataclasses.replace(thresholds_from(args), speed_adjust=False)
    comparison = compare.compare_runs(load_run(out / "packed"), load_run(out / "solo"), thresholds,
                                      require_same_env=False, mode="ab",
                                      baseline_label="solo (alone on the same slot)")
    comparison = dataclasses.replace(comparison, notes=tuple(n for n in comparison.notes if n.kind != NOTE_UNCALIBRATED))
    result = write(Compared(comparison=comparison), out / "report")
    backends = backend_verdicts(comparison.verdicts)
    record = store.read_json(out / calibrate.RECORD) | {"backends": backends, col.floor_pct: thresholds.floor_pct}
    store.write_json(out / calibrate.RECORD, record)
    for backend, b in backends.items():
        then = "cleared: packed under --slots auto" if b["cleared"] else "runs solo under --slots auto"
        print(f"{backend}: {b['verdict']} {b['change']}  ({then})", file=sys.stderr)
    if smoke:
        print("--smoke: a shrunk calibration says nothing of full cells; this machine's calibration is unchanged",
              file=sys.stderr)
    else:
        path = packing.calibration_path(env, key)
        packing.write_calibration(path, slots=slots, created_at=record["created_at"], backends=backends,
                                  source=str(out.absolute()))
        print(f"calibration: {path}", file=sys.stderr)
    print_report(result, fail_on_regression=False)
    return EXIT_OK


def _load() -> str:
    """The 1-minute load average against the cores: a calibration on a busy machine says so."""
    import os

    try:
        return f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    except OSError:
        return "unknown"


def add_parser(subparsers) -> None:
    c = subparsers.add_parser(
        "calibrate-slots", help="measure whether packing jobs into slots moves each backend's numbers here")
    c.add_argument("matrix", help="the matrix file (TOML) whose cells are run solo and packed")
    c.add_argument("--only", action="append", default=[], metavar="AXIS=VALUE", help="filter cells as in run (default: every cell)")
    c.add_argument("--smoke", action="store_true", help="shrink every cell (tries the command; writes no calibration)")
    own_default(c.add_argument("--repeats", type=int, metavar="N",
                               help="pairs per cell, 5 or more to decide (default: the matrix's run.repeats, itself "
                                    "%(own_default)s when unset)"), knob_default(RunConfig, "repeats"))
    c.add_argument("--seed", type=int, default=0, help="seed of the order within each pair (default: %(default)s)")
    c.add_argument("--out", metavar="DIR", help="calibration folder (default: REPORTS/<id>): solo/, packed/, report/")
    c.add_argument("--reports", default="reports", metavar="DIR",
                   help="where calibration folders go (default: %(default)s)")
    add_slots_flag(c)
    own_default(c.add_argument("--floor", dest=col.floor_pct, type=float, metavar="PCT",
                               help="what packing may move a number by and still clear a backend (default: the "
                                    "report's floor, %(own_default)s %%)"), threshold_default(col.floor_pct))
    own_default(c.add_argument("--fdr", dest=col.fdr_q, type=float, metavar="Q",
                               help="Benjamini-Hochberg FDR across cells (default: %(own_default)s)"),
                threshold_default(col.fdr_q))
    own_default(c.add_argument("--min-repeats", type=int, metavar="N",
                               help="fewest usable pairs per cell (default: %(own_default)s)"),
                threshold_default("min_repeats"))
    c.set_defaults(func=cmd_calibrate)
