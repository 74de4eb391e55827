"""The kernel diff's flags (`ab`, `report`) and the extra they set (analysis.product.extras.Kernels: diff two run
folders' profiled repeats, name each changed cell's operators in its verdict line, report/kernels.md and .html)."""

from __future__ import annotations

import argparse


def add_kernel_flags(p: argparse.ArgumentParser, *, runs: bool = True) -> None:
    """--kernels, --kernel-floor; with `runs` (ab) also --kernel-repeats and --kernel-steps."""
    from harness.catalogue.kernels import (DEFAULT_KERNEL_FDR, DEFAULT_KERNEL_FLOOR_PCT, DEFAULT_KERNEL_REPEATS,
                                           DEFAULT_KERNEL_STEPS)

    if runs:
        p.add_argument("--kernels", action="store_true",
                       help="profile every cell's extra repeats and diff operators and kernels, whatever the verdict "
                            "(default: only cells called regression or improvement)")
        p.add_argument("--kernel-repeats", type=int, default=DEFAULT_KERNEL_REPEATS, metavar="N",
                       help="profiled processes per cell and side, interleaved A/B after the timed pairs, never part "
                            "of the verdict (default: %(default)s; 0: none, even on a change)")
        p.add_argument("--kernel-steps", type=int, default=DEFAULT_KERNEL_STEPS, metavar="N",
                       help="steps each profiled process records under torch.profiler (default: %(default)s)")
    else:
        p.add_argument("--kernels", action="store_true",
                       help="diff the operators and kernels of the two run folders' profiled repeats "
                            "(kernels.parquet; default: off)")
    p.add_argument("--kernel-floor", type=float, default=DEFAULT_KERNEL_FLOOR_PCT, metavar="PCT",
                   help="no operator or kernel is called changed below PCT %% of the baseline's step "
                        "(default: %(default)s)")
    p.add_argument("--kernel-fdr", type=float, default=DEFAULT_KERNEL_FDR, metavar="Q",
                   help="Benjamini-Hochberg false discovery rate across a cell's operators and kernels "
                        "(default: %(default)s)")


def kernel_settings_problem(args: argparse.Namespace) -> str | None:
    """One line when --kernel-floor or --kernel-fdr is out of range (None when both are fine)."""
    if not 0 <= args.kernel_floor < 100:
        return f"--kernel-floor {args.kernel_floor}: must be in [0, 100)"
    if not 0 < args.kernel_fdr < 1:
        return f"--kernel-fdr {args.kernel_fdr}: must be strictly between 0 and 1"
    return None


def kernel_extra(args: argparse.Namespace):
    """The kernel diff as the report's pipeline plugs it in (analysis.product.extras.Kernels), at these flags."""
    from harness.analysis.product.extras import Kernels

    return Kernels(floor_pct=args.kernel_floor, fdr_q=args.kernel_fdr)
