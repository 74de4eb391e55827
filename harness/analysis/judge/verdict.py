"""The verdict model: the verdict words, the Thresholds it takes to call a change, and what a comparison says
about each cell (MetricVerdict, CellVerdict, one verdicts.parquet row each) and about a run (Comparison)."""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from harness.analysis.judge import decide
from harness.analysis.judge.run import RunData
from harness.catalogue import judged
from harness.catalogue.axes import AXES, AxisValues
from harness.catalogue.verdicts import VERDICT_COLUMNS as _VERDICT_COLUMNS
from harness.matrix.judge import FloorOverride, JudgeConfig, WorkGate

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

THROUGHPUT, FAST_STEPS = judged.THROUGHPUT.name, judged.FAST_STEPS.name
"""The headline metric and the fast steps' rate, by the name `decided_by` gives them (harness.catalogue.judged
declares every judged metric)."""

WARNING, INFO = "warning", "info"
"""A note's severity: a warning is printed on stderr by `nvbench report` too; info only in the report."""
NOTE_SHORT_REPEATS, NOTE_MISSING_CELLS, NOTE_MIXED_NODES, NOTE_GPU_SHARED, NOTE_UNCALIBRATED = (
    "short_repeats", "missing_cells", "mixed_nodes", "shared_gpu", "uncalibrated")
"""What produced a note: a reader that leaves one out (calibrate-slots, its own packed side) names its kind."""


@dataclass(frozen=True, slots=True)
class Note:
    """A sentence about a comparison as a whole, typed where it is made: its words, its severity and its kind."""

    text: str
    """The sentence, without its severity word."""
    severity: str = INFO
    kind: str = ""

    def __str__(self) -> str:
        """The sentence as every format shows it: a warning's led by `warning: `."""
        return f"{WARNING}: {self.text}" if self.severity == WARNING else self.text


FLOOR_DEFAULT, FLOOR_FLAG, FLOOR_MATRIX, FLOOR_OVERRIDE = "default", "--floor", "judge.floor_pct", "judge.override"
FLOOR_KINDS = (FLOOR_DEFAULT, FLOOR_FLAG, FLOOR_MATRIX, FLOOR_OVERRIDE)
"""What set a cell's floor: nvbench's default, `--floor`, the matrix's [judge] floor_pct, or a [[judge.override]]
rule (its label in floor_source)."""

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
    floor_kind: str = FLOOR_DEFAULT
    """Which kind of rule set floor_pct (FLOOR_KINDS); floor_origin names the rule itself."""
    """Where floor_pct came from (default, --floor, judge.floor_pct): the report names the floor of each cell."""
    work_gates: tuple[WorkGate, ...] = ()
    """The matrix's [judge.work_gates]: a broken one fails its cell whatever the timing (analysis.pages.work_report)."""

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

    def for_cell(self, axes: Mapping[str, Any]) -> "Thresholds":
        """These thresholds with the cell's own floor as floor_pct: the first [[judge.override]] rule that matches
        its axis values, else the run's floor."""
        rule = next((r for r in self.floor_overrides if r.matches(axes)), None)
        if rule is None:
            return dataclasses.replace(self, floor_overrides=())
        return dataclasses.replace(self, floor_pct=rule.floor_pct, floor_origin=rule.label, floor_kind=FLOOR_OVERRIDE,
                                   floor_overrides=())


def with_judge(th: Thresholds, judge: JudgeConfig) -> Thresholds:
    """`th` with a matrix's [judge]: its floor_pct unless --floor set one (floor_origin `--floor`), its overrides,
    its work gates."""
    floor, origin, kind = th.floor_pct, th.floor_origin, th.floor_kind
    if judge.floor_pct is not None and kind != FLOOR_FLAG:
        floor, origin, kind = judge.floor_pct, FLOOR_MATRIX, FLOOR_MATRIX
    return dataclasses.replace(th, floor_pct=floor, floor_origin=origin, floor_kind=kind,
                               floor_overrides=judge.overrides,
                               work_gates=judge.work_gates)


@dataclass(frozen=True, slots=True, kw_only=True)
class MetricVerdict:
    """One judged metric of one cell, candidate against baseline: its own call, the change with its interval and
    test, and the two sides' means. Each field's meaning: harness.catalogue.judged.METRIC_FIELDS."""

    verdict: str | None = None
    effect_pct: float | None = None
    ci_low_pct: float | None = None
    ci_high_pct: float | None = None
    p_value: float | None = None
    candidate_value: float | None = None
    baseline_value: float | None = None
    candidate_cv: float | None = None
    baseline_cv: float | None = None
    unadjusted_effect_pct: float | None = None
    speed_slope: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CellVerdict(AxisValues):
    """A cell of the candidate run and what the comparison says about it: its axis values (AxisValues; null in
    verdicts written before the axis), the cell-level call and one MetricVerdict per judged metric tested. One row
    of verdicts.parquet (to_row / from_row): each field is a column declared, with its meaning, once in
    harness.catalogue.verdicts (`nvbench columns` and docs/results.md read it there)."""

    cell_id: str
    verdict: str
    reason: str
    method: str = ""
    ci_level: float | None = None
    p_value: float | None = None
    p_adjusted: float | None = None
    decided_by: str = ""
    metrics: Mapping[str, MetricVerdict] = field(default_factory=dict)  # judged metric -> its verdict (no column)
    floor_pct: float
    floor_source: str = ""
    floor_kind: str = ""
    """FLOOR_KINDS: which kind of rule set floor_pct (empty when read from a file before version 14)."""
    fdr_q: float
    mdc_pct: float | None = None
    repeats_needed: int | None = None
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
    fire_drill_pct: float = 0.0
    baseline_fire_drill_pct: float = 0.0
    is_smoke: bool = False
    env_diff: str = ""
    candidate_run_id: str = ""
    baseline_run_id: str = ""
    phase: str | None = None
    attribution: str = ""
    phase_change_ms: float | None = None
    phase_change_low_ms: float | None = None
    phase_change_high_ms: float | None = None
    step_change_ms: float | None = None
    work: str | None = None
    work_changed: bool | None = None
    work_gate: str | None = None
    """The broken gates in words (GateCheck.words; null: none broke)."""
    busy: bool | None = None
    operators: str | None = None
    cell_label: str = ""
    """The cell's readable axis part, as its rows recorded it (empty: rows that did not record it)."""
    reason_code: str = ""
    """Why, as a code (harness.catalogue.reasons): what groups and decisions read, never `reason`'s words."""
    reason_figure: str = ""
    """The figures that lead `reason` (its change and interval); empty where none lead it."""
    work_gate_broken: bool | None = None
    """A gate of the matrix's [judge.work_gates] broke (None: no work was diffed)."""

    def axis_filters(self) -> list[str]:
        """`AXIS=VALUE` for every axis the verdict records: the `--only` filters that select its cell (an axis
        an older verdicts file lacks, read as null, filters nothing)."""
        return [f"{axis}={getattr(self, axis)}" for axis in AXES if getattr(self, axis) is not None]

    def metric(self, name: str) -> MetricVerdict | None:
        """The MetricVerdict of a judged metric, by name (None: not tested)."""
        if name == THROUGHPUT:
            return self.throughput
        return self.metrics.get(name)

    @property
    def throughput(self) -> MetricVerdict:
        """The headline metric's (empty where nothing was measured)."""
        return self.metrics.get(THROUGHPUT) or MetricVerdict()

    @property
    def fast_step(self) -> MetricVerdict | None:
        """The fast steps' rate, where the comparison tested it."""
        return self.metrics.get(FAST_STEPS)

    def others(self) -> list[tuple[judged.Judged, MetricVerdict]]:
        """Every judged metric after the headline that the comparison tested, in the catalogue's order."""
        return [(m, self.metrics[m.name]) for m in judged.JUDGED[1:] if self.metrics.get(m.name) is not None]

    @property
    def decided_effect_pct(self) -> float | None:
        """The change of the metric the verdict rests on."""
        metric = self.metric(self.decided_by) if self.decided_by in judged.BY_NAME else self.throughput
        return metric.effect_pct if metric is not None else None

    @property
    def label(self) -> str:
        """What every format names the cell by: its label, or its id where none was recorded."""
        return self.cell_label or self.cell_id

    @property
    def cause(self) -> str:
        """`reason` after the figures that lead it: what the cells of one reason code share, in words."""
        reason = self.reason or ""
        return reason[len(self.reason_figure) + 2:] if self.reason_figure else reason

    @property
    def is_regression(self) -> bool:
        """A confirmed regression: of a judged metric, or of accuracy below its band."""
        return self.verdict == REGRESSION or self.accuracy_verdict == ACCURACY_BELOW

    def to_row(self) -> dict[str, Any]:
        """The flat verdicts.parquet row, columns in VERDICT_COLUMNS order."""
        flat = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "metrics"}
        for name, columns in METRIC_COLUMNS.items():
            metric = self.metrics.get(name) or MetricVerdict()
            flat |= {column: getattr(metric, attr) for attr, column in columns.items()}
        return {column: flat[column] for column in VERDICT_COLUMNS}

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> "CellVerdict":
        """A verdicts.parquet row (to_row's output) back as a CellVerdict; a metric whose every column is
        null (or missing from an older file) is a metric not tested."""
        cell = {f.name: row[f.name] for f in fields(cls) if f.name != "metrics" and f.name in row}
        metrics = {}
        for name, columns in METRIC_COLUMNS.items():
            values = {attr: row.get(column) for attr, column in columns.items()}
            if any(v is not None for v in values.values()):
                metrics[name] = MetricVerdict(**values)
        return cls(**cell, metrics=metrics)


METRIC_COLUMNS: dict[str, dict[str, str]] = {m.name: m.columns() for m in judged.JUDGED}
"""Judged metric -> {MetricVerdict field: its verdicts.parquet column} (harness.catalogue.judged)."""

VERDICT_COLUMNS: tuple[str, ...] = tuple(c.name for c in _VERDICT_COLUMNS)
"""The columns of verdicts.parquet, in order (harness.catalogue.verdicts)."""


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
    notes: tuple[Note, ...] = ()
    """Sentences about the comparison as a whole (cells missing from the candidate, ...)."""
    suspects: tuple[str, ...] = field(default=())
    """History mode: the cell ids a confirmation rerun should target."""
    baseline: RunData | None = None
    """The run compared with (baseline and A/B modes): the report reads the baseline's other columns from it."""
    candidate_label: str = ""
    """What the candidate is, in words (an A/B: "B"); empty: its run id."""
    sides: tuple[str, ...] = ()
    """An A/B: one line naming each side alike, A first ("A: <label> (<interpreter or checkout>)")."""
    work_diffs: Mapping[str, Any] = field(default_factory=dict)
    """cell_id -> its work diff (analysis.judge.work_diff.WorkDiff) where the sides counted work: report.html's
    sections read it."""

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

    @property
    def broken_gates(self) -> tuple[CellVerdict, ...]:
        """The cells whose work broke a gate of the matrix's [judge.work_gates]: each fails, whatever its timing."""
        return tuple(v for v in self.verdicts if v.work_gate_broken)


def merge_fields(*parts: Mapping[str, Any]) -> dict[str, Any]:
    """Verdict fields merged left to right; the per-metric dicts (keyed by judged metric name) merge key by key."""
    out: dict[str, Any] = {}
    for part in parts:
        for key, value in part.items():
            out[key] = out.get(key, {}) | value if key in judged.BY_NAME else value
    return out


def build_verdict(fields_: Mapping[str, Any]) -> CellVerdict:
    """A CellVerdict from cell-level fields and one dict per judged metric described or tested."""
    cell = {key: value for key, value in fields_.items() if key not in judged.BY_NAME}
    metrics = {name: MetricVerdict(**fields_[name]) for name in judged.BY_NAME if fields_.get(name)}
    return CellVerdict(**cell, metrics=metrics)


def metric_change_text(v: CellVerdict) -> str:
    """The metrics' changes alone, with their intervals, the one that made the call starred (a heatmap tile's tooltip,
    a cell in a packed group; harness.analysis.pages.wording.change_text adds the phase)."""
    t = v.throughput
    if t.effect_pct is None:
        return "-"
    if t.ci_low_pct is None or t.ci_high_pct is None:
        return f"{t.effect_pct:+.1f}%" + (f" (z {v.robust_z:+.1f})" if v.robust_z is not None else "")
    called = v.verdict in (REGRESSION, IMPROVEMENT) and bool(v.others())  # mark which metric made the call
    parts = [f"{t.effect_pct:+.1f}% [{t.ci_low_pct:+.1f}, {t.ci_high_pct:+.1f}]"
             + ("*" if called and v.decided_by == THROUGHPUT else "")]
    for other, m in v.others():  # every other judged metric tested, by the catalogue's name
        if m.effect_pct is not None and m.ci_low_pct is not None and m.ci_high_pct is not None:
            parts.append(f"{other.name} {m.effect_pct:+.1f}% [{m.ci_low_pct:+.1f}, {m.ci_high_pct:+.1f}]"
                         + ("*" if called and v.decided_by == other.name else ""))
    return "; ".join(parts)
