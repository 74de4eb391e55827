"""The looks of an adaptive A/B, planned before anything runs: the pairs at each look, the ones that can decide at
the level split over them, and whether the last can decide at all (harness.orchestrate.workflows.ab runs them)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from harness.analysis.judge.decide import reach_problem
from harness.analysis.judge.verdict import Thresholds
from harness.orchestrate.workflows.ab import decisive_looks, look_schedule


@dataclass(frozen=True, slots=True, kw_only=True)
class LookPlan:
    looks: list[int]
    """Pairs per cell at each look (the first is what runs before the first judgement)."""
    thresholds: Thresholds
    """The report's thresholds with the level split over the looks."""
    note: str | None = None
    """Said on stderr: the A/B starts later than asked, because the first looks could not decide."""
    warning: str | None = None
    """Said on stderr: the matrix's own repeats can never decide (every cell will be inconclusive)."""


def plan_looks(repeats: int, max_repeats: int | None, thresholds: Thresholds, *, knob: str,
               asked: bool) -> LookPlan:
    """The look schedule from `repeats` up to `max_repeats` (None: one look), cut to the looks that can decide,
    with the level split over them. `knob` names where the last look's pairs were set (a flag or the matrix's
    run.repeats); `asked`: the user asked for these repeats by a flag, so a plan that can never decide is a
    ValueError (bad input) rather than a warning."""
    looks = look_schedule(repeats, max_repeats or repeats)
    note = None
    if (decisive := decisive_looks(looks, thresholds.fdr_q)) != looks:
        note = (f"note: --max-repeats adds pairs at planned looks {looks}, and each look spends a share of "
                f"--fdr {thresholds.fdr_q:g}; {looks[0]} pairs a side are too few to show a change with their "
                f"share, so the A/B starts at {decisive[0]} pairs a side (looks {decisive})")
        looks = decisive
    split = dataclasses.replace(thresholds, looks=len(looks))
    warning = None
    if problem := reach_problem(looks[-1], split.level, what=knob):
        problem += f" (the level {thresholds.fdr_q:g} split over {len(looks)} looks)" if len(looks) > 1 else ""
        if asked:
            raise ValueError(problem)
        warning = f"warning: {problem}: every cell will be inconclusive"
    return LookPlan(looks=looks, thresholds=split, note=note, warning=warning)
