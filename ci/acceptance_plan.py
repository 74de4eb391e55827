"""The GPU acceptance's plan: which checks run in what order, what each is estimated to take (stated defaults, or
the last report's times), what a missing module skips, how much of the mission slice and which extra checks
the budget holds, and the lines that say so before anything runs."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

import acceptance_extra as extra
import acceptance_judge as judge

GPU_SIDE_CORES = 4
"""Cores kept for the GPU checks while the suite runs beside them (one process each, mostly waiting on the GPU)."""
DEFAULT_BUDGET_S = 540.0
ESTIMATES_S = {"suite": 330.0, "gpu-tests": 90.0, "dataset": 30.0, "verdict-aa": 80.0, "verdict-drill": 80.0,
               "phases": 20.0, "autotune": 0.0, "compile-cache": 70.0, "overhead": 60.0, "profile": 35.0,
               "mission-slice-smoke": 90.0} | extra.EXTRA_ESTIMATES_S
"""Each check's estimated time when no last report is given. Measured on an H100 (docs/gpu-validation.md): the
GPU-marked tests 77 s (DALI absent), the dataset about 26-60 s, a cell's process 17-35 s at 20 + 60 steps
(startup 2.4 s, build 4.4 s). Reasoned from those, not yet measured (the first GPU run's report, given as
--last, replaces them): an A/B of 5 pairs is 10 processes of a resnet18 cell (~7 s each) and two environment
probes; the phases check one cudagraph process; autotune reads the A/A's rows; the compile cache one cold
resnet18 compile and two warm repeats; the overhead benchmark four loops of 130 ResNet-50 steps (~7 s each)
with their builds; the profile one cell of 10 steps. The mission slice takes the largest part of itself that
fits what is left (acceptance_judge.slice_rungs: 25-35 s a cell). The suite took 301 s on 12 cores."""
NEEDS = {"overhead": ("nvtx",), "dali-tests": ("nvidia.dali",), "dali-cells": ("nvidia.dali",)}
"""Modules a check cannot run without (skipped with the reason where they do not import). The cells of the other
checks run with NVTX ranges off where nvtx does not import; duckdb is only some CPU tests' (they skip)."""


def usable_cores() -> list[int]:
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))


def split_cores(cores: list[int]) -> tuple[list[int], list[int]] | None:
    """(the suite's cores, the GPU checks' cores), or None where there are too few to share.

    The suite's CPU tests need no GPU and the GPU-marked tests, the overhead benchmark and the profile need
    little CPU, so the two run side by side on disjoint cores. The mission slice runs after both, alone with
    every core: its loader efficiency is a CPU figure too."""
    if len(cores) < 8:
        return None
    return cores[:-GPU_SIDE_CORES], cores[-GPU_SIDE_CORES:]


def say(line: str) -> None:
    print(f"gpu-acceptance: {line}", file=sys.stderr, flush=True)


def estimates(last: Path | None) -> tuple[dict[str, float], str]:
    """Each check's estimated seconds: its time in the last report where it ran to its end there, else
    ESTIMATES_S; and where they come from, in words."""
    table = dict(ESTIMATES_S)
    if last is None:
        return table, "stated defaults (ci/gpu_acceptance.py ESTIMATES_S)"
    try:
        doc = json.loads(last.read_text())
        checks = doc["checks"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"--last {last}: not a gpu-acceptance.json ({exc})") from None
    for c in checks:
        ended = c.get("status") in ("pass", "fail") and not str(c.get("detail", "")).startswith(
            ("not started", "timed out")) and c.get("duration_s", 0) > 0
        if c.get("name") in table and ended:
            table[c["name"]] = float(c["duration_s"])
        planned = (c.get("figures") or {}).get("planned_s") if isinstance(c.get("figures"), dict) else None
        if c.get("name") == "mission-slice" and ended and planned:  # the slice's parts, as its last part ran
            table["slice-factor"] = float(c["duration_s"]) / float(planned)
    return table, f"the last report, {last} (its checks that ran to their end; defaults for the rest)"


def announce(plan: list[tuple[str, float | str, str]], budget: Budget, source: str) -> None:
    """Before anything runs: each check and its estimate (or why it is skipped), with its note, and the total."""
    say(f"budget {budget.seconds:.0f} s; estimates from {source}:")
    total = 0.0
    for name, what, note in plan:
        if isinstance(what, str):
            say(f"  {name:<20} skip: {what}")
        else:
            total += what
            say(f"  {name:<20} ~{what:.0f} s" + (f" ({note})" if note else ""))
    fits = "fits the budget" if total <= budget.seconds else \
        "does NOT fit the budget: a check whose estimate exceeds what is left will not start"
    say(f"  {'total':<20} ~{total:.0f} s: {fits}")


GPU_CHECKS = ("gpu-tests", "dataset", "verdict-aa", "verdict-drill", "phases", "autotune", "compile-cache",
              "mission-slice", "overhead", "profile")
"""Run in this order on a GPU machine, by what they prove: the GPU tests, then the verdict (A/A, fire drill),
then the figures it rests on (phases, autotuning, the compile cache), then the mission slice, which takes the
largest part of itself that fits what the others leave; the overhead benchmark and the profile after it. The
dataset is made early: CPU work, which a suite beside the GPU checks can share the machine with."""
EXTRA_CHECKS = tuple(extra.EXTRA_ESTIMATES_S)
"""After those, in this order, each where the budget leaves room (acceptance_extra.py): the rest of one GPU's claims."""
REPORT_ORDER = ("suite", "gpu-tests", "dali-tests", "verdict-aa", "verdict-drill", "phases", "autotune",
                "compile-cache", "dataset", "mission-slice", "data-wait-agreement", "dali-cells", "overhead",
                "profile", *EXTRA_CHECKS)
SUITE_SKIP = "the CPU suite is CI's job (--with-suite adds it)"
LAST = ("overhead", "profile")
"""The checks after the slice: what they need is kept from the slice's part."""


def dependency_gaps(find: Callable[[str], Any] = importlib.util.find_spec) -> dict[str, str]:
    """Check name -> why it cannot run here (a module NEEDS names does not import)."""
    gaps = {name: why for name, modules in NEEDS.items() if (why := judge.missing_module(modules, find=find))}
    return gaps | {name: why for name, tool in extra.EXTRA_NEEDS.items() if (why := extra.missing_tool(tool, find))}


def scaled_rungs(est: dict[str, float], gaps: dict[str, str]) -> list[tuple[dict[str, list[str]], float]]:
    """The slice's parts with their estimates, scaled by what the last report's part took against its plan."""
    factor = est.get("slice-factor", 1.0)
    return [(rung, seconds * factor) for rung, seconds in judge.slice_rungs(dali="dali-cells" not in gaps)]


def extras_planned(est: dict[str, float], left_s: float, gaps: dict[str, str]) -> list[str]:
    """The extra checks that fit `left_s` (what the checks before them and the slice's first two parts leave),
    in order; one that does not fit leaves room for the next."""
    planned = []
    for name in EXTRA_CHECKS:
        if name not in gaps and est[name] <= left_s:
            planned.append(name)
            left_s -= est[name]
    return planned


def slice_plan(est: dict[str, float], left_s: float, gaps: dict[str, str],
               extras: Sequence[str] = ()) -> tuple[dict | None, float, float]:
    """(the slice's part that fits `left_s` less the checks after it, its estimate, the smallest part's)."""
    rungs = scaled_rungs(est, gaps)
    after = sum(est[name] for name in LAST if name not in gaps) + sum(est[name] for name in extras)
    rung, seconds = judge.slice_part(rungs, left_s - after)
    return rung, seconds, rungs[0][1]


def gpu_plan(with_suite: bool, est: dict[str, float], budget_s: float,
             gaps: dict[str, str] | None = None) -> list[tuple[str, float | str, str]]:
    """Every GPU check with its estimate (or why it is skipped here) and a note; the slice's part is what the
    others' estimates leave of `budget_s`."""
    gaps = gaps or {}
    plan: list[tuple[str, float | str, str]] = [("suite", est["suite"] if with_suite else SUITE_SKIP, "")]
    before = sum(est[name] for name in GPU_CHECKS if name not in gaps and name not in ("mission-slice", *LAST))
    suite_first = est["suite"] if with_suite and split_cores(usable_cores()) is None else 0.0
    left = budget_s - before - suite_first
    extras = planned_extras(est, left, gaps)
    rung, seconds, smallest = slice_plan(est, left, gaps, extras)
    for name in GPU_CHECKS:
        if name in gaps:
            plan.append((name, gaps[name], ""))
        elif name == "mission-slice":
            note = (f"{judge.rung_cells(rung)} cells at the mission's window: {' '.join(judge.only_flags(rung))}"
                    if rung else "not even its smallest part fits what the others leave")
            plan.append((name, seconds if rung else smallest, note))
        else:
            plan.append((name, est[name], "reads verdict-aa's rows" if name == "autotune" else ""))
    plan += [(name, gaps[name], "") for name in ("dali-tests", "dali-cells") if name in gaps]
    for name in EXTRA_CHECKS:
        plan.append((name, gaps.get(name) or (est[name] if name in extras else beyond(name, est, budget_s)), ""))
    return plan


def planned_extras(est: dict[str, float], left_s: float, gaps: dict[str, str]) -> list[str]:
    """The extras that fit once the checks before them and the slice's first two parts (a synthetic and a
    real-data cell) have their estimates."""
    base = scaled_rungs(est, gaps)[1][1]
    after = sum(est[name] for name in LAST if name not in gaps)
    return extras_planned(est, left_s - base - after, gaps)


def beyond(name: str, est: dict[str, float], budget_s: float) -> str:
    return (f"beyond the {budget_s:.0f} s budget: ~{est[name]:.0f} s (runs where --budget-s leaves room, e.g. "
            f"--budget-s {budget_s + est[name]:.0f})")


def cpu_plan(with_suite: bool, est: dict[str, float]) -> list[tuple[str, float | str, str]]:
    suite: float | str = est["suite"] if with_suite else SUITE_SKIP
    return [("suite", suite, ""), ("mission-slice-smoke", est["mission-slice-smoke"], "")]
