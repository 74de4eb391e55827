"""The columns of changes.parquet (the history's change points and drifts, harness.analysis.nights.history.Change):
one row per change of one cell's metric, after the cell's id and axis values (their meaning: harness.catalogue.cells).
Declared here once: the history's Change has these fields, the table these columns, `nvbench columns` these
meanings. Not in `col`: a change's columns are read and written by name through its dataclass."""

from __future__ import annotations

from harness.catalogue.axes import AXES
from harness.catalogue.columns import B, F, I, S, Column, per_change

CHANGE_FIELDS: tuple[Column, ...] = (
    per_change("metric", S, "",
               "throughput, fast steps, top1 or data wait."),
    per_change("kind", S, "",
               "step: the level changed at `run_id`; drift: a slope over the last nights, starting at `run_id`."),
    per_change("run_id", S, "",
               "The night the change starts (a step: the first night of the new level; a drift: its window's first)."),
    per_change("night", I, "",
               "That night's position in the history (1-based, oldest first)."),
    per_change("created_at", S, "",
               "When that night's run was created (UTC, ISO 8601)."),
    per_change("previous_run_id", S, "",
               "The night before (a drift: the window's last night)."),
    per_change("commit_from", S, "",
               "The commit of previous_run_id (a drift: of the window's first night)."),
    per_change("commit_to", S, "",
               "The commit of run_id (a drift: of the window's last night)."),
    per_change("unit", S, "",
               "%: change relative to the level before (rates); points: absolute change x 100 (fractions)."),
    per_change("before", F, "",
               "Level before the change in the metric's unit (rates: geometric mean of the nights)."),
    per_change("after", F, "",
               "Level after the change (a drift: the fitted level at the window's last night)."),
    per_change("change", F, "",
               "The change in `unit` (a drift: across its whole window)."),
    per_change("ci_low", F, "",
               "Lower end of the change's interval, in `unit`."),
    per_change("ci_high", F, "",
               "Upper end of the change's interval, in `unit`."),
    per_change("confidence", F, "",
               "Confidence level of the interval (e.g. 0.95)."),
    per_change("p_value", F, "",
               "A step's p-value (the best split over the series, its choice paid for); null for a drift (its "
               "interval excludes 0 at `confidence`)."),
    per_change("p_floor", F, "",
               "The smallest p the step's test could report (p at the floor reads `p <= floor`); null for a drift."),
    per_change("nights_before", I, "",
               "Nights in the level before (a drift: 0)."),
    per_change("nights_after", I, "",
               "Nights in the level after (a drift: nights in its window)."),
    per_change("fire_drill_pct", F, "%",
               "Fire drill of the night the change starts (a drill night is a calibration, never a result)."),
    per_change("is_new", B, "",
               "Not found without the newest night: what tonight's history added."),
    per_change("confirmation", S, "",
               "confirmed, not confirmed or could not confirm: what an interleaved A/B of commit_from and commit_to "
               "said (harness.orchestrate.workflows.confirm); null when none was asked."),
    per_change("confirmation_note", S, "",
               "The A/B's verdict behind it, or why there could be none."),
)
"""A change's own columns, after cell_id and the axes."""
CHANGE_COLUMNS: tuple[str, ...] = ("cell_id", *AXES, *(c.name for c in CHANGE_FIELDS))
"""changes.parquet's columns, in order."""
