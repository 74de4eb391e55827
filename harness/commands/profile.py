"""`nvbench profile`: run one cell under nsys or torch.profiler, apart from timed runs."""

from __future__ import annotations

import argparse
import sys

from harness.commands.common import EXIT_FAILURES, EXIT_OK, bad_input
from harness.catalogue import col


def cmd_profile(args: argparse.Namespace) -> int:
    # the library, loaded when the command runs: its pyarrow and numpy would add ~1 s to every nvbench start
    from harness.orchestrate.session import capabilities, opening
    from harness.orchestrate.workflows import profile

    if args.steps < 1:
        return bad_input([f"--steps must be >= 1, got {args.steps}"])
    nsys = profile.nsys_path() if args.tool == "nsys" else None
    if args.tool == "nsys" and nsys is None:
        return bad_input(["nsys (Nsight Systems) is not on PATH; install it, or profile with --tool torch"])
    try:
        opened = opening.open_matrix(args.matrix, smoke=args.smoke, only=args.only)
        matrix, cell = opened.matrix, profile.select_cell(opened.cells, args.cell)
        run_dir = opening.fresh_out(args.out, reports=args.reports, name=f"{matrix.benchmark.name}-profile")
    except opening.OpeningError as exc:
        return bad_input(exc.problems)
    except ValueError as exc:
        return bad_input([str(exc)])
    here = opening.this_machine(matrix.run.device)
    env, key, caps = here.env, here.key, here.caps
    reason = capabilities.skip_reason(cell, caps) or profile.unsupported_reason(args.tool, caps.device)
    if reason:
        return bad_input([f"{cell.cell_id}: cannot be profiled here: {reason}"])
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
        from harness.analysis.load import timeline

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
    print(f"profiled throughput {row[col.throughput_img_per_s]:.1f} img/s (not a timed result); "
          f"row in {spec.out_dir / 'cells'}", file=sys.stderr)
    return EXIT_OK


def add_parser(subparsers) -> None:
    pr = subparsers.add_parser("profile", help="run one cell under nsys or torch.profiler, apart from timed runs")
    pr.add_argument("matrix", help="the matrix file (TOML) that holds the cell")
    pr.add_argument("--cell", metavar="ID", help="cell id or a unique prefix (default: the one cell --only leaves)")
    pr.add_argument("--only", action="append", default=[], metavar="AXIS=VALUE",
                    help="filter cells as in run (default: every cell)")
    pr.add_argument("--smoke", action="store_true", help="shrink the cell as `run --smoke` does")
    pr.add_argument("--tool", choices=("nsys", "torch"), default="nsys",
                    help="nsys: Nsight Systems timeline; torch: torch.profiler trace and table (default: %(default)s)")
    pr.add_argument("--steps", type=int, default=10, metavar="N",
                    help="measured steps to capture (default: %(default)s)")
    pr.add_argument("--out", metavar="DIR", help="run folder whose profile/ receives the results "
                    "(default: REPORTS/<run_id>); may be an existing run: its timed results stay untouched")
    pr.add_argument("--reports", default="reports", metavar="DIR", help="where run folders go (default: %(default)s)")
    pr.set_defaults(func=cmd_profile)
