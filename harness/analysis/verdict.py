"""The verdict model: the verdict words, the Thresholds it takes to call a change, and what a comparison says
about each cell (MetricVerdict, CellVerdict, one verdicts.parquet row each) and about a run (Comparison)."""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from harness.analysis import decide
from harness.analysis.runs import RunData
from harness.spec.judge import FloorOverride, JudgeConfig
from harness.spec.matrix import AXES

REGRESSION, IMPROVEMENT, UNCHANGED, INCONCLUSIVE = decide.REGRESSION, decide.IMPROVEMENT, decide.UNCHANGED, \
    decide.INCONCLUSIVE
INSUFFICIENT = "insufficient data"
NOT_COMPARABLE = "not comparable"
SUSPECT_REGRESSION = "suspect regression"
SUSPECT_IMPROVEMENT = "suspect improvement"
FAILED = "failed"
SKIPPED = "skipped"
NO_BASELINE = "no baseline"
VERDICTS = (REGRESSION, SUSPECT_REGRESSION, FAILED, INCONCLUSIVE, IMPROVEMENT, SUSPECT_IMPROVEMENT, NOT_COMPARABLE,
            INSUFFICIENT, NO_BASELINE, SKIPPED, UNCHANGED)
"""Every verdict, in the order reports list them (what needs a person first)."""

ACCURACY_BELOW, ACCURACY_ABOVE, ACCURACY_WITHIN, ACCURACY_NA = "below band", "above band", "within band", "n/a"

THROUGHPUT, FAST_STEPS = "throughput", "fast steps"
"""The metrics a comparison tests, by the name `decided_by` gives them."""
SAMPLE_COLUMNS = {THROUGHPUT: "throughput_img_per_s", FAST_STEPS: "fast_step_img_per_s"}
"""Metric -> the cells/*.parquet column holding its value for each repeat."""

DEFAULT_FLOOR_PCT = 3.0
"""Practical floor in %: the largest round number that still lets a 5 % slowdown be caught once the noise
allows it (docs/performance.md, "What the thresholds rest on")."""

@dataclass(frozen=True, slots=True, kw_only=True)
class Thresholds:
    """What it takes to call a change. Validated at construction; every problem is reported at once.
    What each default rests on, measured: docs/performance.md, "What the thresholds rest on"."""

    floor_pct: float = DEFAULT_FLOOR_PCT
    """Practical floor in %: a change smaller than this is never a regression, however certain."""
    fdr_q: float = 0.01
    """Benjamini-Hochberg false discovery rate across cells; intervals at the FCR-adjusted level 1 - R q / m."""
    min_repeats: int = 5
    """Fewest usable repeats per side for a cell to be tested (5 + 5: the least with which a permutation test
    can reach p <= 0.01); below it a cell is `inconclusive`, saying how many it needs."""
    looks: int = 1
    """Looks of a sequential design (nvbench ab's adaptive repeats): every test and interval is at fdr_q /
    looks, so that the false-alarm rate holds across all the looks (Bonferroni over looks)."""
    num_resamples: int = 10_000
    """Bootstrap resamples per cell."""
    seed: int = 0
    """Bootstrap seed: the same inputs always give the same verdicts."""
    exclude_unsteady: bool = False
    """Leave out repeats whose window failed the steadiness check (is_steady false)."""
    speed_adjust: bool = True
    """Compare at equal machine-speed probe time (inference.ancova_fit) where every usable repeat has one probe kind."""
    fast_steps: bool = True
    """Test the fast-step rate beside throughput (from 6 + 5 usable repeats; Holm within the cell)."""
    accuracy_tolerance: float = 0.01
    """Top-1 band half-width (absolute, 0.01 = 1 point): an accuracy change counts only beyond it."""
    history_runs: int = 10
    """History screening: the last N comparable runs form the per-cell baseline."""
    history_min_runs: int = 5
    """History screening: fewer comparable past runs than this gives `insufficient data`."""
    history_z: float = 3.5
    """History screening: |robust z| at or above this (and beyond the floor) makes a cell a suspect."""
    floor_overrides: tuple[FloorOverride, ...] = ()
    """The matrix's [[judge.override]] floors: the first that matches a cell replaces floor_pct for it."""
    floor_origin: str = "default"
    """Where floor_pct came from (default, --floor, judge.floor_pct): the report names the floor of each cell."""

    def __post_init__(self) -> None:
        problems = []
        if not (math.isfinite(self.floor_pct) and 0 <= self.floor_pct < 100):
            problems.append(f"floor_pct={self.floor_pct}: must be in [0, 100)")
        if not 0 < self.fdr_q < 1:
            problems.append(f"fdr_q={self.fdr_q}: must be strictly between 0 and 1")
        if self.looks < 1:
            problems.append(f"looks={self.looks}: must be >= 1")
        if self.min_repeats < 2:
            problems.append(f"min_repeats={self.min_repeats}: a bootstrap needs at least 2 repeats per side")
        if self.num_resamples < 100:
            problems.append(f"num_resamples={self.num_resamples}: use at least 100 (10000 is the default)")
        if not 0 <= self.accuracy_tolerance < 1:
            problems.append(f"accuracy_tolerance={self.accuracy_tolerance}: must be in [0, 1)")
        if self.history_min_runs < 3:
            problems.append(f"history_min_runs={self.history_min_runs}: a median and MAD need at least 3 runs")
        if self.history_runs < self.history_min_runs:
            problems.append(f"history_runs={self.history_runs}: must be >= history_min_runs={self.history_min_runs}")
        if not self.history_z > 0:
            problems.append(f"history_z={self.history_z}: must be > 0")
        if problems:
            raise ValueError("; ".join(problems))

    @property
    def level(self) -> float:
        """The false discovery rate one look is tested at: fdr_q split over the looks."""
        return self.fdr_q / self.looks

    def floor_for(self, axes: Mapping[str, Any]) -> tuple[float, str]:
        """The floor that judges a cell of these axis values, and which rule set it."""
        for rule in self.floor_overrides:
            if rule.matches(axes):
                return rule.floor_pct, rule.label
        return self.floor_pct, self.floor_origin

    def for_cell(self, axes: Mapping[str, Any]) -> "Thresholds":
        """These thresholds with the cell's own floor as floor_pct."""
        floor, origin = self.floor_for(axes)
        return dataclasses.replace(self, floor_pct=floor, floor_origin=origin, floor_overrides=())


def with_judge(th: Thresholds, judge: JudgeConfig) -> Thresholds:
    """`th` with a matrix's [judge]: its floor_pct unless --floor set one (floor_origin `--floor`), its overrides."""
    floor, origin = th.floor_pct, th.floor_origin
    if judge.floor_pct is not None and origin != "--floor":
        floor, origin = judge.floor_pct, "judge.floor_pct"
    return dataclasses.replace(th, floor_pct=floor, floor_origin=origin, floor_overrides=judge.overrides)


@dataclass(frozen=True, slots=True, kw_only=True)
class MetricVerdict:
    """One metric of one cell, candidate against baseline: the change with its interval and test, and the
    two sides' means. Throughput carries its spreads and speed adjustment too (the headline's)."""

    effect_pct: float | None = None
    """Change in %, candidate vs baseline (history: vs the median of past runs)."""
    ci_low_pct: float | None = None
    """Interval of the change, lower end in %, at the cell's ci_level."""
    ci_high_pct: float | None = None
    """Interval of the change, upper end in %."""
    p_value: float | None = None
    """This metric's own permutation p-value, before Bonferroni across the cell's metrics."""
    candidate_img_per_s: float | None = None
    """Mean over the candidate's usable repeats."""
    baseline_img_per_s: float | None = None
    """Mean over the baseline's usable repeats (history: the median of past runs)."""
    candidate_cv: float | None = None
    """Throughput only: the candidate's spread between repeats (standard deviation / mean)."""
    baseline_cv: float | None = None
    """Throughput only: the baseline's spread between repeats."""
    unadjusted_effect_pct: float | None = None
    """Throughput only, speed-adjusted comparisons: the change before the adjustment (mean log throughput)."""
    speed_slope: float | None = None
    """Throughput only, speed-adjusted comparisons: fitted d log throughput / d log probe time."""


METRIC_ATTRIBUTES = {THROUGHPUT: "throughput", FAST_STEPS: "fast_step"}
"""Metric name (as `decided_by` spells it) -> the CellVerdict attribute holding its MetricVerdict."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CellVerdict:
    """A cell of the candidate run and what the comparison says about it: the cell-level call and one
    MetricVerdict per metric tested. One row of verdicts.parquet (to_row / from_row)."""

    cell_id: str
    model: str | None = None
    """Null in verdicts written before version 7."""
    backend: str | None = None
    memory_format: str | None = None
    precision: str | None = None
    world_size: int | None = None
    grad_accum: int | None = None
    compile: str | None = None
    """Null in verdicts written before version 4."""
    verdict: str
    reason: str
    method: str = ""
    ci_level: float | None = None
    p_value: float | None = None
    """The cell's p-value as Benjamini-Hochberg saw it: the smallest of the metrics' p-values times their
    number (Bonferroni within the cell)."""
    p_adjusted: float | None = None
    decided_by: str = ""
    """The metric the verdict rests on (throughput or fast steps; throughput, the headline, when both make
    the same call); for `unchanged`, the one with the smaller p-value."""
    throughput: MetricVerdict = MetricVerdict()
    """The headline metric; also what history screening and describe-only fill in."""
    fast_step: MetricVerdict | None = None
    """The fast-step rate, where the comparison tested it."""
    floor_pct: float
    floor_source: str = ""
    """Which rule set floor_pct: default, --floor, judge.floor_pct or `judge.override[i] axis=value` (empty in
    verdicts written before version 8)."""
    fdr_q: float
    mdc_pct: float | None = None
    repeats_needed: int | None = None
    """Inconclusive cells: about how many usable repeats per side would likely decide (decide.repeats_needed);
    null in verdicts written before version 5."""
    num_candidate: int = 0
    num_baseline: int = 0
    num_unsteady: int = 0
    noise: str = ""
    accuracy_verdict: str = ACCURACY_NA
    candidate_top1: float | None = None
    baseline_top1: float | None = None
    top1_change: float | None = None
    top1_ci_low: float | None = None
    top1_ci_high: float | None = None
    accuracy_tolerance: float
    history_median_img_per_s: float | None = None
    history_mad_img_per_s: float | None = None
    robust_z: float | None = None
    num_history_runs: int = 0
    speed_probe_change_pct: float | None = None
    """Speed-adjusted comparisons: change of the probe's time, candidate vs baseline (+ = machine slower)."""
    fire_drill_pct: float = 0.0
    baseline_fire_drill_pct: float = 0.0
    is_smoke: bool = False
    env_diff: str = ""
    """The environment fields that differ and matter to this cell (harness.results.env.cell_env_fields)."""
    candidate_run_id: str = ""
    baseline_run_id: str = ""
    phase: str | None = None
    """The step phase whose time changed most (by |change|; phase_attribution), where both sides timed
    phases; null in verdicts written before version 6."""
    phase_change_ms: float | None = None
    """That phase's change, candidate - baseline, in ms per step, with its interval at ci_level."""
    phase_change_low_ms: float | None = None
    phase_change_high_ms: float | None = None
    step_change_ms: float | None = None
    """The whole step's change (median step time), candidate - baseline, in ms."""
    attribution: str = ""
    """The phase's change in words, e.g. "optimizer +20.3 ms [+18.9, +21.6] of +21.0 ms per step"."""

    def axis_filters(self) -> list[str]:
        """`AXIS=VALUE` for every axis the verdict records: the `--only` filters that select its cell (an axis
        an older verdicts file lacks, read as null, filters nothing)."""
        return [f"{axis}={getattr(self, axis)}" for axis in AXES if getattr(self, axis) is not None]

    def metric(self, name: str) -> MetricVerdict | None:
        """The MetricVerdict of THROUGHPUT or FAST_STEPS."""
        return getattr(self, METRIC_ATTRIBUTES[name])

    @property
    def decided_effect_pct(self) -> float | None:
        """The change of the metric the verdict rests on."""
        metric = self.metric(self.decided_by) if self.decided_by in METRIC_ATTRIBUTES else self.throughput
        return metric.effect_pct if metric is not None else None

    @property
    def is_regression(self) -> bool:
        """A confirmed regression: of throughput, or of accuracy below its band."""
        return self.verdict == REGRESSION or self.accuracy_verdict == ACCURACY_BELOW

    def to_row(self) -> dict[str, Any]:
        """The flat verdicts.parquet row, columns in VERDICT_COLUMNS order."""
        cell = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in _METRIC_FIELDS}
        metrics = {column: getattr(getattr(self, attr) or MetricVerdict(), name)
                   for attr, columns in METRIC_COLUMNS.items() for name, column in columns.items()}
        flat = cell | metrics
        return {column: flat[column] for column in VERDICT_COLUMNS}

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> "CellVerdict":
        """A verdicts.parquet row (to_row's output) back as a CellVerdict; a metric whose every column is
        null is a metric not tested."""
        cell = {f.name: row[f.name] for f in fields(cls) if f.name not in _METRIC_FIELDS and f.name in row}
        metrics = {}
        for attr, columns in METRIC_COLUMNS.items():
            values = {name: row.get(column) for name, column in columns.items()}
            metrics[attr] = MetricVerdict(**values) if any(v is not None for v in values.values()) else None
        return cls(**cell, throughput=metrics["throughput"] or MetricVerdict(), fast_step=metrics["fast_step"])


METRIC_COLUMNS: dict[str, dict[str, str]] = {
    "throughput": {"effect_pct": "effect_pct", "ci_low_pct": "ci_low_pct", "ci_high_pct": "ci_high_pct",
                   "p_value": "throughput_p_value", "candidate_img_per_s": "candidate_img_per_s",
                   "baseline_img_per_s": "baseline_img_per_s", "candidate_cv": "candidate_cv",
                   "baseline_cv": "baseline_cv", "unadjusted_effect_pct": "unadjusted_effect_pct",
                   "speed_slope": "speed_slope"},
    "fast_step": {"effect_pct": "fast_effect_pct", "ci_low_pct": "fast_ci_low_pct", "ci_high_pct": "fast_ci_high_pct",
                  "p_value": "fast_p_value", "candidate_img_per_s": "candidate_fast_img_per_s",
                  "baseline_img_per_s": "baseline_fast_img_per_s"},
}
"""CellVerdict attribute -> {MetricVerdict field: its verdicts.parquet column}. The fast-step rate stores no
spreads or speed adjustment (verdicts version 3), so its MetricVerdict never carries them."""
_METRIC_FIELDS = frozenset(METRIC_COLUMNS)

VERDICT_COLUMNS = (
    "cell_id", *AXES, "verdict", "reason", "method",
    "effect_pct", "ci_low_pct", "ci_high_pct", "ci_level", "p_value", "p_adjusted", "decided_by",
    "throughput_p_value", "fast_effect_pct", "fast_ci_low_pct", "fast_ci_high_pct", "fast_p_value",
    "candidate_fast_img_per_s", "baseline_fast_img_per_s", "floor_pct", "floor_source", "fdr_q", "mdc_pct", "repeats_needed",
    "num_candidate",
    "num_baseline", "candidate_img_per_s", "baseline_img_per_s", "candidate_cv", "baseline_cv", "num_unsteady",
    "noise", "accuracy_verdict", "candidate_top1", "baseline_top1", "top1_change", "top1_ci_low", "top1_ci_high",
    "accuracy_tolerance", "history_median_img_per_s", "history_mad_img_per_s", "robust_z", "num_history_runs",
    "unadjusted_effect_pct", "speed_probe_change_pct", "speed_slope", "fire_drill_pct", "baseline_fire_drill_pct",
    "is_smoke", "env_diff", "candidate_run_id", "baseline_run_id",
    "phase", "phase_change_ms", "phase_change_low_ms", "phase_change_high_ms", "step_change_ms", "attribution",
)
"""The columns of verdicts.parquet (version 8), in order: CellVerdict's cell-level fields (the matrix's axes
among them: CellVerdict names each) and every MetricVerdict flattened by METRIC_COLUMNS."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Comparison:
    """Everything a report renders: the verdicts and what they were measured against."""

    mode: str
    """baseline, ab, history or none."""
    candidate: RunData
    baseline_label: str
    """What the candidate was compared with, in words."""
    baseline_environment: Mapping[str, Any] | None
    thresholds: Thresholds
    verdicts: tuple[CellVerdict, ...]
    environment_diff: tuple[tuple[str, Any, Any], ...] = ()
    """(field, baseline value, candidate value) for every environment field that differs."""
    notes: tuple[str, ...] = ()
    """Sentences about the comparison as a whole (cells missing from the candidate, ...)."""
    suspects: tuple[str, ...] = field(default=())
    """History mode: the cell ids a confirmation rerun should target."""
    baseline: RunData | None = None
    """The run compared with (baseline and A/B modes): the report reads the baseline's other columns from it."""
    candidate_label: str = ""
    """What the candidate is, in words (an A/B: "B"); empty: its run id."""
    sides: tuple[str, ...] = ()
    """An A/B: one line naming each side alike, A first ("A: <label> (<interpreter or checkout>)")."""

    @property
    def title(self) -> str:
        """'<candidate> vs <baseline>', as every report format heads the comparison."""
        return f"{self.candidate_label or self.candidate.run_id} vs {self.baseline_label}"

    def counts(self) -> dict[str, int]:
        counted = Counter(v.verdict for v in self.verdicts)
        return {name: counted[name] for name in VERDICTS if counted[name]}

    @property
    def regressions(self) -> tuple[CellVerdict, ...]:
        return tuple(v for v in self.verdicts if v.is_regression)

    @property
    def fire_drill_pct(self) -> float:
        return max((v.fire_drill_pct for v in self.verdicts), default=0.0)


def merge_fields(*parts: Mapping[str, Any]) -> dict[str, Any]:
    """Verdict fields merged left to right; the per-metric dicts (METRIC_COLUMNS' keys) merge key by key."""
    out: dict[str, Any] = {}
    for part in parts:
        for key, value in part.items():
            out[key] = out.get(key, {}) | value if key in _METRIC_FIELDS else value
    return out


def build_verdict(fields_: Mapping[str, Any]) -> CellVerdict:
    """A CellVerdict from cell-level fields and one dict per metric tested."""
    cell = {key: value for key, value in fields_.items() if key not in _METRIC_FIELDS}
    fast = fields_.get("fast_step")
    return CellVerdict(**cell, throughput=MetricVerdict(**fields_.get("throughput", {})),
                       fast_step=MetricVerdict(**fast) if fast else None)
