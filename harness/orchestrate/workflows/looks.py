"""The looks of an adaptive A/B, planned before anything runs: the pairs at each look, the ones that can decide at
the level split over them, and whether the last can decide at all (harness.orchestrate.workflows.ab runs them)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from harness.analysis.judge.decide import reach_problem, smallest_permutation_p
from harness.analysis.judge.verdict import Thresholds


def look_schedule(repeats: int, max_repeats: int) -> list[int]:
    """Pairs per cell at each look of an adaptive A/B: `repeats`, then doubling, ending at `max_repeats`
    (e.g. 5, 10, 20). A fixed-look design: the looks are planned before anything runs, so the report's
    level can be split over them (verdict.Thresholds.looks)."""
    if repeats < 1 or max_repeats < repeats:
        raise ValueError(f"--repeats {repeats} --max-repeats {max_repeats}: need 1 <= repeats <= max-repeats")
    looks = [repeats]
    while looks[-1] < max_repeats:
        looks.append(min(2 * looks[-1], max_repeats))
    return looks


def decisive_looks(looks: Sequence[int], fdr_q: float) -> list[int]:
    """The planned looks that can decide: the largest k such that each of the k largest looks can reach
    fdr_q / k, the level split over the looks kept (compare.Thresholds.looks). A look that cannot would spend a
    share of the level and decide nothing (e.g. 5, 10, 20 at q 0.01: 5 + 5 pairs' smallest p is 2 / C(10, 5) =
    0.0079 > 0.01 / 3, so the A/B starts at 10 pairs and splits 0.01 over 10 and 20).

    Why the k largest, and why it ends: the smallest p falls as pairs grow, so if any k looks can reach
    fdr_q / k the k largest can; and if the k largest can, the k - 1 largest reach the larger fdr_q / (k - 1).
    So feasibility only falls with k, one pass from k = len(looks) down finds the largest, and k = 1 (the
    last look alone) always stands: whether the last look can reach is the caller's check.

    "Can reach" is the cell's gate in compare (a cell whose repeats cannot reach the level is inconclusive
    whatever its numbers): the smallest two-sided p of an exact permutation test at n + n pairs, 2 / C(2n, n),
    at most fdr_q / k. The number of cells does not enter. Benjamini-Hochberg across m cells tests the i-th
    smallest p at i q / m, so a lone change among m cells needs q / (k m), but a look that reaches only q / k
    still decides: every cell changed together, or a cell shown unchanged (equivalence needs the gate, not a
    rejection). Where the report's test is Monte Carlo (more than 20,000 splits), compare.permutations_for
    sizes it so that its grain stays ten times below q / (k m)."""
    last = len(looks)
    for k in range(last, 0, -1):
        kept = list(looks[last - k:])
        if all(smallest_permutation_p(n, n) <= fdr_q / k * (1 + 1e-12) for n in kept[:-1]):
            return kept
    return list(looks)  # no looks at all


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
