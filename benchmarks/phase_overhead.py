"""What per-phase step timing costs a step: ns for one phase range (`with ranges(NAME):`) with the phase
clock armed against the same range without a clock, on CPU (perf_counter marks), min over rounds so that a
busy machine's interruptions do not count; then per step (the timed ranges a step enters: data, forward,
backward per micro-batch, optimizer, h2d for real data) against a step time you give.

    python benchmarks/phase_overhead.py --step-ms 50 --micro-batches 1     # the CPU machine's tiny cell
    python benchmarks/phase_overhead.py --step-ms 64 --micro-batches 1     # an H100 ResNet-50 step (run 2)

The end-to-end figure is benchmarks/overhead.py with and without --no-phase-timing (needs a quiet machine).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.cell.instruments.timing import FORWARD, PhaseClock, make_ranges  # noqa: E402


def per_range_ns(ranges, n: int, rounds: int) -> float:
    enter = ranges(FORWARD)
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter_ns()
        for _ in range(n):
            with enter:
                pass
        best = min(best, (time.perf_counter_ns() - t0) / n)
    return best


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--step-ms", type=float, default=50.0, help="the step time to compare with (ms)")
    p.add_argument("--micro-batches", type=int, default=1)
    p.add_argument("--real-data", action="store_true", help="count the h2d range too")
    p.add_argument("--n", type=int, default=200_000)
    p.add_argument("--rounds", type=int, default=7)
    args = p.parse_args()
    clock = PhaseClock()
    clock.arm(1, torch.device("cpu"), 1)  # every mark lands in step 0: the cost of marking, not of storage
    timed = make_ranges(False, phases=clock)
    plain = make_ranges(False)

    off = per_range_ns(plain, args.n, args.rounds)
    on = per_range_ns(timed, args.n, args.rounds)
    ranges_per_step = 1 + 3 * args.micro_batches + (args.micro_batches if args.real_data else 0)
    step_call = per_range_ns(lambda name: _Call(clock), args.n, args.rounds)  # the window's clock.step(i)
    extra_ns = (on - off) * ranges_per_step + step_call
    print(f"one phase range: {off:.0f} ns without the clock, {on:.0f} ns with it (+{on - off:.0f} ns)")
    print(f"clock.step(i) once a step: {step_call:.0f} ns")
    print(f"per step ({ranges_per_step} timed ranges): +{extra_ns / 1e3:.2f} us = "
          f"{100 * extra_ns / (args.step_ms * 1e6):.4f} % of a {args.step_ms:g} ms step")
    return 0


class _Call:
    """`with _Call(clock):` costs one clock.step call (the context protocol's own cost is subtracted by
    comparing with the plain range above only approximately; it is an upper bound)."""

    __slots__ = ("_step",)

    def __init__(self, clock: PhaseClock) -> None:
        self._step = clock.step

    def __enter__(self) -> None:
        self._step(0)

    def __exit__(self, *exc: object) -> bool:
        return False


if __name__ == "__main__":
    sys.exit(main())
