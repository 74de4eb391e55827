"""What a comparison finds beside each cell's throughput verdict: top-1 against its band, the step phase whose
time changed most, and the cells whose repeats ran on more than one node."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from harness.analysis.judge.repeats import ok_rows
from harness.analysis.judge.verdict import (
    ACCURACY_ABOVE, ACCURACY_BELOW, ACCURACY_NA, ACCURACY_WITHIN, NOTE_MIXED_NODES, WARNING, Note, Thresholds)
from harness.results import accuracy
from harness.stats import inference
from harness.stats.changepoint import welch_difference
from harness.catalogue import col
from harness.catalogue.steps import PHASE_MEDIAN_COLUMNS, STEP_PHASES


def accuracy_check(cand: Sequence[Mapping[str, Any]], base: Sequence[Mapping[str, Any]],
                   th: Thresholds, confidence: float) -> dict[str, Any]:
    """Top-1 against a band: `below band` when the whole interval of the change lies below 0 and the
    change is beyond accuracy_tolerance (the same rule as throughput). Repeats evaluate the same images,
    so the sample size is one repeat's num_val_images, not their sum. Repeats validated on fewer than
    accuracy.MIN_VAL_IMAGES images are not judged (`n/a`; the report prints their top-1 as "n/a: N images")."""
    c = [r for r in cand if accuracy.meaningful(r)]  # fewer than 100 images: noise, not judged
    b = [r for r in base if accuracy.meaningful(r)]
    if not c or not b:
        return {col.accuracy_verdict: ACCURACY_NA}
    p_c, p_b = float(np.mean([r["top1"] for r in c])), float(np.mean([r["top1"] for r in b]))
    n_c, n_b = float(np.mean([r[col.num_val_images] for r in c])), float(np.mean([r[col.num_val_images] for r in b]))
    ci = inference.two_proportion_interval(p_c, n_c, p_b, n_b, confidence=confidence)
    verdict = ACCURACY_WITHIN
    if ci.high < 0 and ci.estimate < -th.accuracy_tolerance:
        verdict = ACCURACY_BELOW
    elif ci.low > 0 and ci.estimate > th.accuracy_tolerance:
        verdict = ACCURACY_ABOVE
    return {col.accuracy_verdict: verdict, col.candidate_top1: p_c, col.baseline_top1: p_b, col.top1_change: ci.estimate,
            col.top1_ci_low: ci.low, col.top1_ci_high: ci.high}


PHASE_NAMES = STEP_PHASES
"""The step's phases as cells record them (harness.catalogue.steps: each phase's median column)."""


def phase_attribution(cand: Sequence[Mapping[str, Any]], base: Sequence[Mapping[str, Any]],
                      level: float) -> dict[str, Any]:
    """Which phase of the step changed most between two sets of repeats, with its interval.

    Per phase, each repeat's median phase time; the change is the difference of their means (candidate -
    baseline, ms per step) with a Welch t interval at `level`; the phase with the largest |change| is
    named. The whole step's change (median step times) is given beside it, so that a reader sees how much
    of the step's change the phase explains. Empty where either side has fewer than two repeats with phase
    times (runs before schema 4, or one repeat)."""
    def series(rows, column):
        return [float(r[column]) * 1e3 for r in rows if r.get(column) is not None]

    found = []
    for name in PHASE_NAMES:
        a, b = series(base, PHASE_MEDIAN_COLUMNS[name]), series(cand, PHASE_MEDIAN_COLUMNS[name])
        if len(a) >= 2 and len(b) >= 2:
            d = welch_difference(a, b, confidence=level)
            found.append((name, d.estimate, d.low, d.high))
    if not found:
        return {}
    name, change, low, high = max(found, key=lambda f: abs(f[1]))
    a, b = series(base, col.step_time_median_s), series(cand, col.step_time_median_s)
    step = float(np.mean(b) - np.mean(a)) if a and b else None
    whole = f" of {step:+.1f} ms per step" if step is not None else " per step"
    return {"phase": name, col.phase_change_ms: change, col.phase_change_low_ms: low, col.phase_change_high_ms: high,
            col.step_change_ms: step, "attribution": f"{name} {change:+.1f} ms [{low:+.1f}, {high:+.1f}]{whole}"}


def node_notes(cand_cells: Mapping[str, list[Mapping[str, Any]]],
               base_cells: Mapping[str, list[Mapping[str, Any]]]) -> tuple[Note, ...]:
    """A warning naming the cells whose usable repeats (candidate and baseline together) ran on more than
    one node (the `nodes` column; SLURM spreads jobs over a partition): two nodes of one model differ in
    speed by more than repeats of one node do, so such a change mixes code and node."""
    mixed = []
    for cid, rows in sorted(cand_cells.items()):
        sides = {name: sorted({r.get("nodes") or r.get("hostname") or "?" for r in ok_rows(side_rows)})
                 for name, side_rows in (("candidate", rows), ("baseline", base_cells.get(cid, [])))}
        if len(set(sides["candidate"]) | set(sides["baseline"])) > 1:
            mixed.append(f"{cid} (candidate on {', '.join(sides['candidate']) or '-'}; "
                         f"baseline on {', '.join(sides['baseline']) or '-'})")
    if not mixed:
        return ()
    return (Note(f"{len(mixed)} cell(s) ran on more than one node, so their change mixes code and node "
                 f"(pin the cells to one node with [executor] constraint, or compare by A/B on one node): "
                 + "; ".join(mixed), WARNING, NOTE_MIXED_NODES),)
