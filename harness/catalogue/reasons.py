"""Why a cell got its verdict, as a code: the closed set a verdict's `reason_code` takes (verdicts.parquet), each
with its meaning. The reason's words (`reason`) say the same for a person, with the cell's own figures; code that
groups or decides on why reads the code, never the words (tests/test_architecture.py holds that)."""

from __future__ import annotations

REASONS: dict[str, str] = {
    # the decision on a tested cell (analysis.judge.decide)
    "beyond_floor": "A judged metric's change is significant, its interval wholly on one side of 0, and beyond the "
                    "floor.",
    "inside_floor": "Every tested metric's interval lies inside the ±floor: equivalence shown.",
    "straddles_floor": "The change is real (significant, its interval excludes 0) but its interval straddles the floor.",
    "includes_zero": "The test rejects but the interval includes 0.",
    "not_shown": "The test does not reject and the interval does not lie inside the floor.",
    "cannot_reach": "With these repeats a permutation test can never reach the level.",
    "too_few_repeats": "Fewer usable repeats a side than --min-repeats.",
    "no_usable_repeats": "A side has no usable repeat.",
    "machine_differed": "The machine-speed probe differed between the sides and what it explains leaves the change "
                        "undecided.",
    "beyond_machine": "The machine-speed probe differed between the sides, and the change net of what it explains "
                      "is beyond the floor.",
    # a cell not tested (analysis.judge.compare)
    "cell_failed": "No usable repeat: its repeats failed (the row's status and reason say how).",
    "cell_skipped": "The cell was skipped (the row's reason says why).",
    "no_throughput": "No repeat recorded a throughput.",
    "not_in_baseline": "The cell is not in the baseline.",
    "smoke_mismatch": "One side is a --smoke run: smoke and full runs measure different things.",
    "machine_busy": "Not judged: the machine was busy (others' processes on the cell's cores).",
    "environment_differs": "The environments differ and the comparison requires the same one.",
    "no_baseline_given": "Nothing to compare with: the report describes the run.",
    # the history screen (analysis.judge.screen)
    "history_suspect": "Beyond the robust z and the floor against the cell's own history: a confirmation rerun "
                       "decides.",
    "history_within_spread": "Within the run-to-run spread of the cell's history.",
    "history_within_floor": "Beyond the spread but within the floor.",
    "history_too_few": "Too few comparable past runs.",
    "history_absent": "The cell is in no past run.",
    "history_not_comparable": "No past run with the same environment and smoke setting.",
}
"""reason_code -> its meaning (docs/results.md lists them)."""

CODES = frozenset(REASONS)
(BEYOND_FLOOR, INSIDE_FLOOR, STRADDLES_FLOOR, INCLUDES_ZERO, NOT_SHOWN, CANNOT_REACH, TOO_FEW_REPEATS,
 NO_USABLE_REPEATS, MACHINE_DIFFERED, BEYOND_MACHINE, CELL_FAILED, CELL_SKIPPED, NO_THROUGHPUT, NOT_IN_BASELINE,
 SMOKE_MISMATCH, MACHINE_BUSY, ENVIRONMENT_DIFFERS, NO_BASELINE_GIVEN, HISTORY_SUSPECT, HISTORY_WITHIN_SPREAD,
 HISTORY_WITHIN_FLOOR, HISTORY_TOO_FEW, HISTORY_ABSENT, HISTORY_NOT_COMPARABLE) = tuple(REASONS)
