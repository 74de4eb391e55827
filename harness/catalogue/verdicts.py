"""The columns of verdicts.parquet (one row per cell of a comparison) and its version history: the cell-level
columns declared here, each judged metric's columns derived from harness.catalogue.judged."""

from __future__ import annotations

from harness.catalogue.axes import AXES_RECORD
from harness.catalogue.columns import B, F, I, S, Column, per_cell
from harness.catalogue.judged import JUDGED, METRIC_FIELDS, Judged

VERDICTS_VERSION = 15
"""Version of verdicts.parquet (schema metadata nvbench.verdicts_version). 1: first release. 2: the
speed-adjustment columns unadjusted_effect_pct, speed_probe_change_pct and speed_slope. 3: the fast-step
rate (decided_by, throughput_p_value, fast_effect_pct, fast_ci_low_pct, fast_ci_high_pct, fast_p_value,
candidate_fast_img_per_s, baseline_fast_img_per_s); p_value is the cell's (Bonferroni over its metrics). 4: the
compile axis (`compile`; null when read from an older file). 5: the verdict `inconclusive` (a cell that is
neither shown changed nor shown inside the floor; `unchanged` now means equivalence shown) and its
`repeats_needed`; older files read with repeats_needed null, their verdicts as they were written. 6: the
phase the change sits in (phase, phase_change_ms with its interval, step_change_ms, attribution); null or
empty when read from an older file. 7: the model axis (`model`, after cell_id; null when read from an older
file). 8: each judged metric's own call (`throughput_verdict`, `fast_verdict`; null when read from an older
file); the columns derived from harness.catalogue.judged, every column with its unit and meaning. 9: energy judged
(img_per_joule: energy_verdict, energy_effect_pct, energy_ci_low_pct, energy_ci_high_pct, energy_p_value,
candidate_img_per_joule, baseline_img_per_joule; null when read from an older file or where it was not tested).
10: floor_source, the rule that set the cell's floor (the matrix's [judge]; empty when read from an older file).
11: the work diff (work, work_changed, work_gate; null when read from an older file or where no work was counted).
12: busy, a cell not judged because the machine was busy (null when read from an older file). 13: operators, the
kernel diff's line of a changed cell as a column of its own (its reason still ends with it for a reader; null when
read from an older file or where the cell was not profiled). 14: the reasons as data: reason_code (why, as a code of
harness.catalogue.reasons), reason_figure (the cell's figures that lead its reason), floor_kind (which kind of rule set
the floor) and work_gate_broken (a gate broke: the flag the exit status reads); empty or null when read from an older
file, except work_gate_broken, which reads as whether work_gate holds words. 15: cell_label, the cell's readable axis
part as its rows recorded it (before: the id without its hash)."""


CELL_LEVEL: tuple[Column, ...] = (
    per_cell("cell_id", S, "", "The cell compared (cells/*.parquet's cell_id)."),
    *(per_cell(a.name, a.type, a.unit, f"Axis: {a.doc}") for a in AXES_RECORD),
    per_cell(
        "verdict",
        S,
        "",
        "The cell's call: regression, improvement, unchanged (equivalence shown), "
        "inconclusive, or why it was not judged (failed, skipped, not comparable, no baseline, ...).",
    ),
    per_cell("reason", S, "", "Why, in words: the change with its interval, and what would decide it."),
    per_cell("method", S, "", "The test and interval the call rests on, with its corrections."),
    per_cell("ci_level", F, "", "Confidence level of each metric's interval (FCR-adjusted, split over the metrics)."),
    per_cell(
        "p_value",
        F,
        "",
        "The cell's p-value as Benjamini-Hochberg saw it: the smallest of its metrics' "
        "p-values times their number (Bonferroni within the cell).",
    ),
    per_cell("p_adjusted", F, "", "The cell's Benjamini-Hochberg adjusted p-value across the comparison's cells."),
    per_cell("decided_by", S, "", "The judged metric the verdict rests on (harness.catalogue.judged)."),
    per_cell("floor_pct", F, "%", "Practical floor: a change smaller than this is never called a change."),
    per_cell(
        "floor_source",
        S,
        "",
        "Which rule set floor_pct: default, --floor, judge.floor_pct or `judge.override[i] axis=value` (empty in "
        "verdicts written before version 10).",
    ),
    per_cell("fdr_q", F, "", "False discovery rate across the comparison's cells (Benjamini-Hochberg)."),
    per_cell(
        "mdc_pct", F, "%", "Minimum detectable change at the sides' spread, 80 % power: what the comparison could see."
    ),
    per_cell(
        "repeats_needed", I, "repeats", "Inconclusive cells: about how many usable repeats a side would likely decide."
    ),
    per_cell("num_candidate", I, "repeats", "Usable candidate repeats."),
    per_cell("num_baseline", I, "repeats", "Usable baseline repeats."),
    per_cell("num_unsteady", I, "repeats", "Repeats of both sides whose window failed the steadiness check."),
    per_cell("noise", S, "", "The spread between repeats in a word (quiet, noisy, ...)."),
    per_cell("accuracy_verdict", S, "", "Top-1 against its band: below band, above band, within band or n/a."),
    per_cell("candidate_top1", F, "fraction", "Mean top-1 of the candidate's usable repeats."),
    per_cell("baseline_top1", F, "fraction", "Mean top-1 of the baseline's usable repeats."),
    per_cell("top1_change", F, "fraction", "Top-1 change, candidate - baseline."),
    per_cell("top1_ci_low", F, "fraction", "Interval of the top-1 change, lower end."),
    per_cell("top1_ci_high", F, "fraction", "Interval of the top-1 change, upper end."),
    per_cell("accuracy_tolerance", F, "fraction", "Half-width of the top-1 band (absolute)."),
    per_cell("history_median_img_per_s", F, "images/s", "History screening: median throughput of the past runs."),
    per_cell("history_mad_img_per_s", F, "images/s", "History screening: median absolute deviation of the past runs."),
    per_cell("robust_z", F, "", "History screening: (this run - median) / (1.4826 MAD)."),
    per_cell("num_history_runs", I, "runs", "History screening: comparable past runs in the baseline."),
    per_cell(
        "speed_probe_change_pct",
        F,
        "%",
        "Speed-adjusted comparisons: change of the machine-speed probe's "
        "time, candidate vs baseline (+ = the candidate's machine slower).",
    ),
    per_cell("fire_drill_pct", F, "%", "The candidate's fire drill: injected extra work (0: a real run)."),
    per_cell("baseline_fire_drill_pct", F, "%", "The baseline's fire drill (0: a real run)."),
    per_cell("is_smoke", B, "", "The candidate is a --smoke run."),
    per_cell("env_diff", S, "", "The environment fields that differ between the sides and matter to this cell."),
    per_cell("candidate_run_id", S, "", "The candidate's run id."),
    per_cell("baseline_run_id", S, "", "The baseline's run id (empty: none)."),
    per_cell("phase", S, "", "The step phase whose time changed most, where both sides timed phases."),
    per_cell("phase_change_ms", F, "ms", "That phase's change per step, candidate - baseline."),
    per_cell("phase_change_low_ms", F, "ms", "Interval of the phase's change, lower end (at ci_level)."),
    per_cell("phase_change_high_ms", F, "ms", "Interval of the phase's change, upper end."),
    per_cell("step_change_ms", F, "ms", "The whole step's change (median step time), candidate - baseline."),
    per_cell(
        "attribution", S, "", 'The phase\'s change in words ("optimizer +20.3 ms [+18.9, +21.6] of +21.0 ms per step").'
    ),
    per_cell(
        "work",
        S,
        "",
        "The counted work of B against A in words: `work: same`, `work changed: forward +16 aten::mm per step`, "
        "`work: same where exact; varying: ...` or `work: no work counted (...)`; null: neither side counted work.",
    ),
    per_cell(
        "work_changed", B, "", "An item exact on both sides changed per step; null where either side counted nothing."
    ),
    per_cell(
        "work_gate",
        S,
        "",
        "The matrix's broken work gates in words, each naming the counter and the place; null: none broke. A broken "
        "gate fails the cell whatever its timing says.",
    ),
    per_cell(
        "busy",
        B,
        "",
        "True: fewer than half of a side's ok windows were clean (others' processes on the cell's cores), so the "
        "cell was not judged: inconclusive, no alarm opened or ended on it. Null before version 12.",
    ),
    per_cell(
        "operators",
        S,
        "",
        "The kernel diff's line of a changed cell with profiled repeats on both sides: its operators by phase and "
        "the closure (`forward +3.1 ms: aten::mm +2.9 ms [+2.7, +3.1]; ...`); null: not profiled, or not changed. "
        "Null before version 13.",
    ),
    per_cell("cell_label", S, "", "The cell's readable axis part (cells' cell_label): what every format names it by; "
             "before version 15 its id without the hash."),
    per_cell("reason_code", S, "", "Why, as a code: one of harness.catalogue.reasons (docs/results.md lists them); "
             "empty before version 14."),
    per_cell("reason_figure", S, "", "The cell's own figures that lead its reason (its change with its interval, "
             "`+1.2% [-0.4, +2.9] at 99.0%`); empty where the reason has none, and before version 14."),
    per_cell("floor_kind", S, "", "Which kind of rule set floor_pct: default, --floor, judge.floor_pct or "
             "judge.override (floor_source names the rule); empty before version 14."),
    per_cell("work_gate_broken", B, "", "A work gate of the matrix broke (work_gate says which, in words): the cell "
             "fails whatever its timing. Null where no work was counted; before version 14 read as whether work_gate "
             "is set."),
)
"""What a comparison says of a cell as a whole (harness.analysis.judge.verdict.CellVerdict's fields)."""

_FIELD_TYPES = {"verdict": S, "p_value": F}


def metric_columns(metric: Judged) -> tuple[Column, ...]:
    """The verdicts.parquet columns of one judged metric, with units and meanings from METRIC_FIELDS."""
    out = []
    for name, column in metric.columns().items():
        unit, doc = METRIC_FIELDS[name]
        out.append(
            per_cell(
                column,
                _FIELD_TYPES.get(name, F),
                metric.unit if unit == "=" else unit,
                f"{metric.name} ({metric.column}): {doc}",
            )
        )
    return tuple(out)


VERDICT_COLUMNS: tuple[Column, ...] = CELL_LEVEL + tuple(c for m in JUDGED for c in metric_columns(m))
"""Every column of verdicts.parquet, in order."""
