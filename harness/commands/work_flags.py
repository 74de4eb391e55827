"""The counted processes' flags (`ab`, `run`): how many processes a cell's work is counted in, and how many steps."""

from __future__ import annotations

import argparse

from harness.catalogue.work import DEFAULT_WORK_REPEATS, DEFAULT_WORK_STEPS

__all__ = ["DEFAULT_WORK_REPEATS", "add_work_flags"]


def add_work_flags(p: argparse.ArgumentParser, *, default_repeats: int, what: str) -> None:
    """--work-repeats (its default the command's own) and --work-steps."""
    p.add_argument("--work-repeats", type=int, default=default_repeats, metavar="N",
                   help=f"counted processes {what}: a few steps after the warm-up under torch.profiler, their op "
                        "calls, host syncs, allocations, copies (and on a GPU kernel launches), never timed "
                        "(work.parquet; default: %(default)s; 0: none)")
    p.add_argument("--work-steps", type=int, default=DEFAULT_WORK_STEPS, metavar="N",
                   help="steps each counted process counts (default: %(default)s)")
