"""The metrics a comparison judges, each declared once: the column it tests, which way is better, the evidence
it takes, its words and its columns in verdicts.parquet. Everything that tests, stores or shows a judged metric
(harness.analysis: compare, evidence, verdict, verdicts_file, wording, ci_formats) reads this list."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from harness.catalogue.cells import CELL_COLUMNS

METRIC_FIELDS: dict[str, tuple[str, str]] = {
    "verdict": ("", "This metric's own call: regression, improvement, unchanged or inconclusive (null: not tested)."),
    "effect_pct": ("%", "Change in %, candidate vs baseline (history: vs the median of past runs)."),
    "ci_low_pct": ("%", "Interval of the change, lower end in %, at the cell's ci_level."),
    "ci_high_pct": ("%", "Interval of the change, upper end in %."),
    "p_value": ("", "This metric's own permutation p-value, before Bonferroni across the cell's metrics."),
    "candidate_value": ("=", "Mean over the candidate's usable repeats."),
    "baseline_value": ("=", "Mean over the baseline's usable repeats (history: the median of past runs)."),
    "candidate_cv": ("", "The candidate's spread between repeats (standard deviation / mean)."),
    "baseline_cv": ("", "The baseline's spread between repeats (standard deviation / mean)."),
    "unadjusted_effect_pct": ("%", "Speed-adjusted comparisons: the change before the adjustment (mean log value)."),
    "speed_slope": ("", "Speed-adjusted comparisons: fitted d log value / d log probe time."),
}
"""What a comparison may say about one judged metric (harness.analysis.judge.verdict.MetricVerdict's fields): unit
('=': the metric's own) and meaning."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Judged:
    """One judged metric. Its evidence is always its per-repeat values: a permutation test of the log ratio of
    the sides' means (Bonferroni-Holm with the cell's other metrics, Benjamini-Hochberg across cells) and an
    interval on the same ratio (bootstrap, or ancova on the machine-speed probe where `speed_adjusted`)."""

    name: str
    """As the verdict's decided_by, its reason, the report and the console spell it ('fast steps -5.0% [...]')."""
    column: str
    """The cells/*.parquet column holding each repeat's value (a rate: positive, compared as a ratio)."""
    higher_is_better: bool
    """Direction: a change toward higher values is an improvement."""
    worse: str
    """Its word for a change beyond the floor the wrong way ("slower")."""
    better: str
    """Its word for a change beyond the floor the right way ("faster")."""
    meaning: str
    """What it measures, in the words of the report's methods paragraph."""
    speed_adjusted: bool
    """Compared at equal machine-speed probe time where every usable repeat has a probe of one kind (CPU
    cells): a value the host's speed moves."""
    switch: str | None = None
    """A Thresholds flag that turns its test off (None: always tested where both sides have it)."""
    stored: tuple[str, ...] = (
        "verdict",
        "effect_pct",
        "ci_low_pct",
        "ci_high_pct",
        "p_value",
        "candidate_value",
        "baseline_value",
    )
    """Its MetricVerdict fields kept in verdicts.parquet."""
    prefix: str = ""
    """Its verdicts.parquet columns are prefix + field (candidate_value: candidate_<column>), except `renamed`."""
    renamed: Mapping[str, str] = field(default_factory=dict)
    """Field -> column where an older verdicts.parquet named it otherwise (kept so old files read)."""

    def column_of(self, name: str) -> str:
        """Its verdicts.parquet column for MetricVerdict field `name`."""
        if name in self.renamed:
            return self.renamed[name]
        if name in ("candidate_value", "baseline_value"):
            return f"{name.split('_')[0]}_{self.column}"
        return self.prefix + name

    def columns(self) -> dict[str, str]:
        """MetricVerdict field -> verdicts.parquet column, for every stored field."""
        return {name: self.column_of(name) for name in self.stored}

    @property
    def unit(self) -> str:
        return next(c.unit for c in CELL_COLUMNS if c.name == self.column)


THROUGHPUT = Judged(
    name="throughput",
    column="throughput_img_per_s",
    higher_is_better=True,
    worse="slower",
    better="faster",
    meaning="images per second over the measured window (a ratio of sums)",
    speed_adjusted=True,
    stored=(
        "verdict",
        "effect_pct",
        "ci_low_pct",
        "ci_high_pct",
        "p_value",
        "candidate_value",
        "baseline_value",
        "candidate_cv",
        "baseline_cv",
        "unadjusted_effect_pct",
        "speed_slope",
    ),
    renamed={
        "p_value": "throughput_p_value",
        "verdict": "throughput_verdict",
        "candidate_value": "candidate_img_per_s",
        "baseline_value": "baseline_img_per_s",
    },
)
"""The headline: images per second over the window (a ratio of sums). What history screening and a cell
without a baseline fill in."""

FAST_STEPS = Judged(
    name="fast steps",
    column="fast_step_img_per_s",
    higher_is_better=True,
    worse="slower",
    better="faster",
    meaning="images per step over the 10th percentile of the step times, the speed of the steps interference "
    "left alone",
    speed_adjusted=True,
    switch="fast_steps",
    prefix="fast_",
    renamed={"candidate_value": "candidate_fast_img_per_s", "baseline_value": "baseline_fast_img_per_s"},
)
"""The fast steps' rate: far less noisy than throughput on a shared machine, blind to a slowdown of a few steps."""

ENERGY = Judged(
    name="energy",
    column="img_per_joule",
    higher_is_better=True,
    worse="less efficient",
    better="more efficient",
    meaning="images per joule of GPU energy over the measured window (NVML's energy counter, differenced)",
    speed_adjusted=False,
    prefix="energy_",
)
"""Energy efficiency: judged where every repeat of both sides read the GPU's energy counter (null on a CPU and
without NVML). Not speed-adjusted: the probe times the host, not the GPU's draw."""

JUDGED: tuple[Judged, ...] = (THROUGHPUT, FAST_STEPS, ENERGY)
"""Every judged metric, the headline first, then in the order a cell's level is split among them: a metric is
tested only while the cell's repeats can still reach the level split that many ways."""

BY_NAME: dict[str, Judged] = {m.name: m for m in JUDGED}
