"""Verdicts: every cell of a candidate run against a baseline run or the other side of an A/B run. Pure given
rows and manifests. What it does: match cells, decide what can be tested, compute each metric's change,
interval and test (with the multiplicity corrections across cells and metrics), and hand that evidence to
harness.analysis.decide, the one place that says the word. Reading runs is harness.analysis.runs (its names
are re-exported here); screening against a history of past runs is harness.analysis.screen.

A verdict is an effect size with an interval and a practical floor: `regression` only when the whole
(FDR-adjusted) interval of the change lies below zero AND the change is larger than the floor. Two
metrics are tested per cell (Bonferroni within the cell, Benjamini-Hochberg across cells): throughput
(the ratio of sums, the headline) and the fast-step rate (harness.stats.window.fast_step_rate), which sees through the
interference of a shared machine; either can call a regression, and the verdict says which did.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from harness.analysis import decide
from harness.analysis.runs import RunData, RunInputError, load_history, load_run, resolve_pointer  # noqa: F401 (re-exported)
from harness.results import accuracy
from harness.results.env import ENV_KEY_FIELDS, cell_env_fields, env_diff, env_key
from harness.spec.matrix import AXES
from harness.stats import inference
from harness.stats.changepoint import welch_difference
from harness.stats.core import Interval

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

BAD_STATUSES = ("failed", "timeout", "crashed", "cancelled")
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
    "candidate_fast_img_per_s", "baseline_fast_img_per_s", "floor_pct", "fdr_q", "mdc_pct", "repeats_needed",
    "num_candidate",
    "num_baseline", "candidate_img_per_s", "baseline_img_per_s", "candidate_cv", "baseline_cv", "num_unsteady",
    "noise", "accuracy_verdict", "candidate_top1", "baseline_top1", "top1_change", "top1_ci_low", "top1_ci_high",
    "accuracy_tolerance", "history_median_img_per_s", "history_mad_img_per_s", "robust_z", "num_history_runs",
    "unadjusted_effect_pct", "speed_probe_change_pct", "speed_slope", "fire_drill_pct", "baseline_fire_drill_pct",
    "is_smoke", "env_diff", "candidate_run_id", "baseline_run_id",
    "phase", "phase_change_ms", "phase_change_low_ms", "phase_change_high_ms", "step_change_ms", "attribution",
)
"""The columns of verdicts.parquet (version 6), in order: CellVerdict's cell-level fields (the matrix's axes
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

    def counts(self) -> dict[str, int]:
        counted = Counter(v.verdict for v in self.verdicts)
        return {name: counted[name] for name in VERDICTS if counted[name]}

    @property
    def regressions(self) -> tuple[CellVerdict, ...]:
        return tuple(v for v in self.verdicts if v.is_regression)

    @property
    def fire_drill_pct(self) -> float:
        return max((v.fire_drill_pct for v in self.verdicts), default=0.0)


# ---------------------------------------------------------------------------------------------
# per-cell facts


def _drill(row: Mapping[str, Any]) -> float:
    return float(row.get("fire_drill_pct") or 0.0)


def _by_cell(rows: Iterable[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    out: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        out.setdefault(row["cell_id"], []).append(row)
    for cell_rows in out.values():
        cell_rows.sort(key=lambda r: r["repeat"])
    return out


def _ok(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [r for r in rows if r["status"] == "ok" and (r.get("throughput_img_per_s") or 0) > 0]


def _usable(rows: Sequence[Mapping[str, Any]], th: Thresholds) -> list[Mapping[str, Any]]:
    ok = _ok(rows)
    return [r for r in ok if r.get("is_steady") is not False] if th.exclude_unsteady else ok


def _throughputs(rows: Sequence[Mapping[str, Any]]) -> np.ndarray:
    return np.array([r["throughput_img_per_s"] for r in rows], dtype=float)


def _cv(x: np.ndarray) -> float | None:
    return float(x.std(ddof=1) / x.mean()) if x.size >= 2 else None


def noise_label(cv: float | None, num_unsteady: int) -> str:
    """quiet (< 1 %), moderate (< 3 %), noisy (< 10 %), very noisy: spread of throughput across repeats."""
    if cv is None:
        label = "unknown (one repeat)"
    else:
        label = "quiet" if cv < 0.01 else "moderate" if cv < 0.03 else "noisy" if cv < 0.10 else "very noisy"
    return label + (f", {num_unsteady} unsteady" if num_unsteady else "")


def _axes(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    return {axis: rows[0].get(axis) for axis in AXES}


def _failure(rows: Sequence[Mapping[str, Any]]) -> tuple[str, str]:
    """(verdict, reason) for a cell without a usable repeat in the candidate."""
    bad = [r for r in rows if r["status"] in BAD_STATUSES]
    if bad:
        return FAILED, f"{len(bad)} of {len(rows)} repeats {bad[0]['status']}: {bad[0]['reason']}"
    skipped = [r for r in rows if r["status"] == "skipped"]
    if skipped:
        return SKIPPED, skipped[0]["reason"] or "skipped"
    return INSUFFICIENT, "no repeat with a throughput"


def _format_diff(diff: Sequence[tuple[str, Any, Any]]) -> str:
    return "; ".join(f"{name}: {a} -> {b}" for name, a, b in diff)


def accuracy_check(cand: Sequence[Mapping[str, Any]], base: Sequence[Mapping[str, Any]],
                   th: Thresholds, confidence: float) -> dict[str, Any]:
    """Top-1 against a band: `below band` when the whole interval of the change lies below 0 and the
    change is beyond accuracy_tolerance (the same rule as throughput). Repeats evaluate the same images,
    so the sample size is one repeat's num_val_images, not their sum. Repeats validated on fewer than
    accuracy.MIN_VAL_IMAGES images are not judged (`n/a`; the report prints their top-1 as "n/a: N images")."""
    c = [r for r in cand if accuracy.meaningful(r)]  # fewer than 100 images: noise, not judged
    b = [r for r in base if accuracy.meaningful(r)]
    if not c or not b:
        return {"accuracy_verdict": ACCURACY_NA}
    p_c, p_b = float(np.mean([r["top1"] for r in c])), float(np.mean([r["top1"] for r in b]))
    n_c, n_b = float(np.mean([r["num_val_images"] for r in c])), float(np.mean([r["num_val_images"] for r in b]))
    ci = inference.two_proportion_interval(p_c, n_c, p_b, n_b, confidence=confidence)
    verdict = ACCURACY_WITHIN
    if ci.high < 0 and ci.estimate < -th.accuracy_tolerance:
        verdict = ACCURACY_BELOW
    elif ci.low > 0 and ci.estimate > th.accuracy_tolerance:
        verdict = ACCURACY_ABOVE
    return {"accuracy_verdict": verdict, "candidate_top1": p_c, "baseline_top1": p_b, "top1_change": ci.estimate,
            "top1_ci_low": ci.low, "top1_ci_high": ci.high}


# ---------------------------------------------------------------------------------------------
# candidate vs baseline (a run, or side A of an A/B run)


@dataclass(slots=True)
class _Metric:
    """One metric of a testable cell: its per-repeat values on both sides and its own p-value."""

    name: str
    cand: np.ndarray
    baseline: np.ndarray
    p: float = 1.0


@dataclass(slots=True)
class _Pending:
    """A cell that reached the tests: its samples and the verdict fields known so far."""

    base: dict[str, Any]
    metrics: list[_Metric]
    """Throughput first, then the fast-step rate where both sides have it (Thresholds.fast_steps)."""
    p: float = 1.0
    """The cell's p-value: the smallest metric p-value times the number of metrics (Bonferroni)."""
    note: str = ""
    """Appended to the verdict's reason."""
    cand_probe: np.ndarray | None = None
    """Machine-speed probe seconds of each candidate repeat, when the comparison adjusts for it."""
    base_probe: np.ndarray | None = None

    @property
    def adjusted(self) -> bool:
        return self.cand_probe is not None and self.base_probe is not None


def _probes(cand_ok: Sequence[Mapping[str, Any]], base_ok: Sequence[Mapping[str, Any]],
            th: Thresholds) -> tuple[np.ndarray, np.ndarray] | None:
    """Probe seconds of both sides when the comparison can adjust for machine speed: every usable repeat has
    a probe, all of one kind, and the probe varied within a side (else its slope is unknowable)."""
    if not th.speed_adjust:
        return None
    rows = [*cand_ok, *base_ok]
    if any(not (r.get("speed_probe_s") or 0) > 0 for r in rows) or \
            len({r.get("speed_probe_kind") for r in rows}) != 1:
        return None
    c = np.array([r["speed_probe_s"] for r in cand_ok], dtype=float)
    b = np.array([r["speed_probe_s"] for r in base_ok], dtype=float)
    if np.ptp(np.log(c)) <= 1e-12 and np.ptp(np.log(b)) <= 1e-12:
        return None
    return c, b


def _keys(rows: Sequence[Mapping[str, Any]]) -> set:
    return {r.get("env_key") for r in rows}


def _env_difference(cand_rows: Sequence[Mapping[str, Any]], base_rows: Sequence[Mapping[str, Any]],
                    cand_env: Mapping[str, Any], base_env: Mapping[str, Any], *, subset: bool = False) -> str:
    """What in the two sides' environments keeps this cell from being judged, in words; '' when nothing does.
    Only the fields that can move this cell count (env.cell_env_fields: DALI's version for dali-* cells, the
    GPU stack for GPU cells) where each manifest is the environment its rows ran in; where it is not (a run
    resumed elsewhere), the rows' env_key decides, over every key field. `subset`: the baseline's keys need
    only be among the candidate's (history runs)."""
    cand_keys, base_keys = _keys(cand_rows), _keys(base_rows)
    if base_keys <= cand_keys if subset else base_keys == cand_keys:
        return ""
    if {env_key(cand_env)} == cand_keys and {env_key(base_env)} == base_keys:
        first = cand_rows[0]
        relevant = cell_env_fields(backend=str(first.get("backend")), device=first.get("device"),
                                   world_size=int(first.get("world_size") or 1))
        return _format_diff(env_diff(base_env, cand_env, fields=relevant))
    return _format_diff(env_diff(base_env, cand_env, fields=ENV_KEY_FIELDS)) or \
        f"env_key {sorted(map(str, base_keys))} -> {sorted(map(str, cand_keys))}"


def _sides(cand_ok: Sequence[Mapping[str, Any]], base_ok: Sequence[Mapping[str, Any]],
           all_ok: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Both sides' throughput and spread, whether or not the cell can be judged."""
    cand_x, base_x = _throughputs(cand_ok), _throughputs(base_ok)
    unsteady = sum(r.get("is_steady") is False for r in all_ok)
    cv = max((c for c in (_cv(cand_x), _cv(base_x)) if c is not None), default=None)
    return {"num_baseline": len(base_ok), "num_unsteady": unsteady, "noise": noise_label(cv, unsteady),
            "throughput": {"candidate_cv": _cv(cand_x), "baseline_cv": _cv(base_x),
                           "candidate_img_per_s": float(cand_x.mean()) if cand_x.size else None,
                           "baseline_img_per_s": float(base_x.mean()) if base_x.size else None}}


def _prepare(cid: str, cand_rows: list, base_rows: list | None, candidate: RunData, baseline: RunData,
             th: Thresholds, require_same_env: bool) -> tuple[dict[str, Any], _Pending | None]:
    """Common verdict fields, and the samples when the cell can be tested (else a final verdict). A cell
    that cannot be judged still carries both sides' figures."""
    common = {"cell_id": cid, **_axes(cand_rows), "floor_pct": th.floor_pct, "fdr_q": th.fdr_q,
              "accuracy_tolerance": th.accuracy_tolerance, "fire_drill_pct": max(map(_drill, cand_rows)),
              "is_smoke": bool(cand_rows[0].get("is_smoke")), "candidate_run_id": candidate.run_id,
              "baseline_run_id": baseline.run_id}
    cand_ok = _usable(cand_rows, th)
    common |= {"num_candidate": len(cand_ok)}
    if not _ok(cand_rows):
        verdict, reason = _failure(cand_rows)
        return common | {"verdict": verdict, "reason": reason}, None
    if not base_rows:
        x = _throughputs(cand_ok)
        common["throughput"] = {"candidate_img_per_s": float(x.mean()) if x.size else None, "candidate_cv": _cv(x)}
        return common | {"verdict": NO_BASELINE, "reason": f"cell not in the baseline {baseline.run_id}"}, None
    common["baseline_fire_drill_pct"] = max(map(_drill, base_rows))
    base_ok = _usable(base_rows, th)
    common |= _sides(cand_ok, base_ok, _ok(cand_rows) + _ok(base_rows))
    if bool(base_rows[0].get("is_smoke")) != common["is_smoke"]:
        which = "candidate" if common["is_smoke"] else "baseline"
        why = f"the {which} is a --smoke run; smoke and full runs measure different things"
        return common | {"verdict": NOT_COMPARABLE, "reason": why}, None
    diff = _env_difference(_ok(cand_rows), _ok(base_rows), candidate.environment, baseline.environment)
    if diff:
        common["env_diff"] = diff
        if require_same_env:
            return common | {"verdict": NOT_COMPARABLE, "reason": f"environment differs: {diff}"}, None
    cand_x, base_x = _throughputs(cand_ok), _throughputs(base_ok)
    base_cv = _cv(base_x)
    if base_cv and min(len(cand_ok), len(base_ok)) >= 2:
        common["mdc_pct"] = 100 * inference.min_detectable_change(base_cv, len(cand_ok), len(base_ok), alpha=th.level)
    smallest_p = decide.smallest_permutation_p(len(cand_ok), len(base_ok))
    if min(len(cand_ok), len(base_ok)) < th.min_repeats or smallest_p > th.level:
        return common | _untestable(cand_x, base_x, th), None
    probes = _probes(cand_ok, base_ok, th)
    metrics = [_Metric(THROUGHPUT, cand_x, base_x)]
    fast = _fast_steps(cand_ok, base_ok, th)
    if fast is not None and 2 * smallest_p > th.level:  # split two ways the level would be out of reach
        fast, note = None, (f" (fast steps not tested: at {len(cand_ok)} + {len(base_ok)} repeats only one metric "
                            f"can reach p <= {th.level:.3g})")
    else:
        note = ""
    if fast is not None:
        metrics.append(_Metric(FAST_STEPS, *fast))
        common["fast_step"] = {"candidate_img_per_s": float(fast[0].mean()),
                               "baseline_img_per_s": float(fast[1].mean())}
    return common, _Pending(base=common, metrics=metrics, cand_probe=probes and probes[0],
                            base_probe=probes and probes[1], note=note)


def _log_sd(*sides: np.ndarray) -> float | None:
    """Pooled within-side standard deviation of log values (None without a side of two)."""
    logs = [np.log(x) for x in sides if x.size >= 2]
    dof = sum(x.size - 1 for x in logs)
    return float(math.sqrt(sum(((x - x.mean()) ** 2).sum() for x in logs) / dof)) if dof else None


def _untestable(cand_x: np.ndarray, base_x: np.ndarray, th: Thresholds) -> dict[str, Any]:
    """The verdict of a cell with too few usable repeats to be tested (fewer than min_repeats, or fewer than
    a permutation test needs to reach the level): `inconclusive`, with its change where one can be computed
    and the repeats that would likely decide it."""
    n_c, n_b = cand_x.size, base_x.size
    if n_c == 0 or n_b == 0:
        n = max(th.min_repeats, decide.repeats_to_reach(th.level))
        return {"verdict": INCONCLUSIVE, "decided_by": THROUGHPUT, "repeats_needed": n,
                "reason": f"{n_c} candidate and {n_b} baseline repeats usable; {decide.needed_text(n)}"}
    if n_c >= 2 and n_b >= 2:
        ci = inference.bootstrap_log_ratio(cand_x, base_x, confidence=1 - th.level, num_resamples=th.num_resamples,
                                           seed=th.seed)
        low, high = inference.to_percent(ci.low), inference.to_percent(ci.high)
    else:
        ci, low, high = None, math.nan, math.nan
    effect = inference.to_percent(math.log(cand_x.mean() / base_x.mean()))
    evidence = decide.Evidence(name=THROUGHPUT, effect_pct=effect, ci_low_pct=low, ci_high_pct=high,
                               significant=False, log_sd=_log_sd(cand_x, base_x))
    d = decide.decide([evidence], floor_pct=th.floor_pct, alpha=th.level, n_candidate=n_c, n_baseline=n_b,
                      min_repeats=th.min_repeats)
    change = f"{effect:+.1f}%" + (f" [{low:+.1f}, {high:+.1f}] (bootstrap, untested)" if ci else "")
    dropped = " (unsteady repeats left out)" if th.exclude_unsteady else ""
    return {"verdict": d.verdict, "decided_by": d.decided_by, "repeats_needed": d.repeats_needed,
            "throughput": {"effect_pct": effect, "ci_low_pct": low if ci else None, "ci_high_pct": high if ci else None},
            "reason": f"{change}{dropped}: {d.reason}"}


def _fast_steps(cand_ok: Sequence[Mapping[str, Any]], base_ok: Sequence[Mapping[str, Any]],
                th: Thresholds) -> tuple[np.ndarray, np.ndarray] | None:
    """Fast-step rates of both sides when the comparison tests them: every usable repeat recorded one
    (rows written before nvbench recorded it read as null: those cells are judged on throughput)."""
    column = SAMPLE_COLUMNS[FAST_STEPS]
    if not th.fast_steps or any(not (r.get(column) or 0) > 0 for r in [*cand_ok, *base_ok]):
        return None
    return (np.array([r[column] for r in cand_ok], dtype=float), np.array([r[column] for r in base_ok], dtype=float))


def permutations_for(th: Thresholds, num_tests: int, num_metrics: int) -> int:
    """Random splits per Monte-Carlo permutation test: Thresholds.num_resamples, or more where a matrix is wide
    enough that their resolution would decide the answer. A Monte-Carlo p is at least 1 / (B + 1); the cell's is
    that times its metrics (Bonferroni), and Benjamini-Hochberg's first step over m cells asks for q / m. With
    B + 1 >= 10 m k / q the smallest p a cell can reach is a tenth of that, so no real change is held
    inconclusive by the test's grain (36 cells at q = 0.01 with 10,000 splits could never reject at all)."""
    return max(th.num_resamples, math.ceil(10 * num_tests * num_metrics / th.level))


def _p_value(p: _Pending, m: _Metric, th: Thresholds, num_permutations: int) -> float:
    if p.adjusted:
        return inference.ancova_permutation_p(m.cand, m.baseline, p.cand_probe, p.base_probe,
                                              num_permutations=num_permutations, seed=th.seed)
    return inference.permutation_p_value(m.cand, m.baseline, num_permutations=num_permutations, seed=th.seed)


def _interval(pending: _Pending, m: _Metric, level: float,
              th: Thresholds) -> tuple[Interval, dict[str, Any], str]:
    """The metric's change with its interval, the speed-adjustment fields (with the metric's minimum
    detectable change at its share of the level), and the method in words."""
    n_c, n_b, alpha = m.cand.size, m.baseline.size, th.level / len(pending.metrics)
    if not pending.adjusted:
        ci = inference.bootstrap_log_ratio(m.cand, m.baseline, confidence=level, num_resamples=th.num_resamples,
                                       seed=th.seed)
        cv = _cv(m.baseline)
        mdc = 100 * inference.min_detectable_change(cv, n_c, n_b, alpha=alpha) if cv else None
        return ci, {"mdc_pct": mdc, "log_sd": _log_sd(m.cand, m.baseline)}, \
            f"permutation + benjamini_hochberg; {ci.method} interval"
    fit = inference.ancova_fit(m.cand, m.baseline, pending.cand_probe, pending.base_probe)
    extra = {"unadjusted_effect_pct": inference.to_percent(fit.unadjusted),
             "speed_probe_change_pct": inference.to_percent(fit.covariate_shift), "speed_slope": fit.slope,
             "log_sd": fit.residual_sd if math.isfinite(fit.residual_sd) else None,
             # what the adjusted comparison could see: its residual noise in place of the raw spread
             "mdc_pct": 100 * inference.min_detectable_change(fit.residual_sd, n_c, n_b, alpha=alpha)
             if math.isfinite(fit.residual_sd) and fit.residual_sd > 0 else None}
    return fit.interval(level), extra, "speed-adjusted (ancova on the probe) freedman_lane permutation + " \
        "benjamini_hochberg; ancova_t interval"


def holm_within(p_values: Sequence[float], alpha: float) -> list[bool]:
    """Which metrics of one cell are significant when the cell is tested at `alpha` (Holm's step-down,
    i.e. closed testing over Bonferroni: the smallest p-value needs k p <= alpha, the next (k - 1) p <=
    alpha, and so on while they pass). With one metric: p <= alpha."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    out = [False] * len(p_values)
    for rank, i in enumerate(order):
        if (len(p_values) - rank) * p_values[i] > alpha * (1 + 1e-12):
            break
        out[i] = True
    return out


def _decide(pending: _Pending, alpha: float, p_adjusted: float, level: float, th: Thresholds,
            num_tested: int) -> dict[str, Any]:
    """The evidence of a tested cell, and decide's verdict on it. `alpha`: the level Benjamini-Hochberg
    tested the cell at (R q / m with R cells rejected; 0 when none was). Which metrics are significant
    follows Holm within the cell (holm_within); each metric's interval is at the FCR level split between the
    metrics. Where the comparison is adjusted for the machine-speed probe, the probe's balance between the
    sides goes to decide too, with the unadjusted change it falls back on (tested at the level split over
    the `num_tested` cells: Bonferroni, since the fallback is not part of the cells' BH)."""
    k = len(pending.metrics)
    level_m = 1 - (1 - level) / k
    out: dict[str, Any] = {"p_value": pending.p, "p_adjusted": p_adjusted, "ci_level": level_m}
    evidence, texts, reach = [], [], []
    for m, significant in zip(pending.metrics, holm_within([m.p for m in pending.metrics], alpha)):
        ci, extra, method = _interval(pending, m, level_m, th)
        mdc = extra.pop("mdc_pct", None)
        if mdc is not None:
            reach.append(mdc)
        effect, low, high = (inference.to_percent(x) for x in (ci.estimate, ci.low, ci.high))
        metric = {"effect_pct": effect, "ci_low_pct": low, "ci_high_pct": high, "p_value": m.p}
        text = f"{effect:+.1f}% [{low:+.1f}, {high:+.1f}]"
        if m.name == THROUGHPUT:  # the headline carries the method and the speed adjustment
            out |= {"method": method + (f"; Bonferroni over {k} metrics" if k > 1 else "")
                    + (f"; level split over {th.looks} looks" if th.looks > 1 else "")}
            if pending.adjusted:
                metric |= {"unadjusted_effect_pct": extra["unadjusted_effect_pct"], "speed_slope": extra["speed_slope"]}
                out["speed_probe_change_pct"] = extra["speed_probe_change_pct"]
                text += (f" adjusted for machine speed (probe {extra['speed_probe_change_pct']:+.1f}%, "
                         f"unadjusted {extra['unadjusted_effect_pct']:+.1f}%)")
        out[METRIC_ATTRIBUTES[m.name]] = metric
        texts.append(f"{m.name} {text}" if k > 1 else text)
        evidence.append(decide.Evidence(name=m.name, effect_pct=effect, ci_low_pct=low, ci_high_pct=high,
                                        significant=significant, log_sd=extra.get("log_sd")))
    if reach:  # either metric can call a change: the comparison reaches as far as the better one
        out["mdc_pct"] = min(reach)
    probe = _probe_balance(pending, level_m, th, num_tested) if pending.adjusted else None
    if probe is not None and not probe.balanced:  # the adjustment extrapolates: show what was judged instead
        net = probe.net
        out["throughput"] |= {"effect_pct": net.effect_pct, "ci_low_pct": net.ci_low_pct, "ci_high_pct": net.ci_high_pct}
        out["method"] += "; probe unbalanced: judged net of the probe's shift (slope -1)"
        texts[0] = (f"{THROUGHPUT + ' ' if k > 1 else ''}{net.text()} net of the machine's speed (probe "
                    f"{probe.shift_pct:+.1f}%, unadjusted {out['throughput']['unadjusted_effect_pct']:+.1f}%)")
    d = decide.decide(evidence, floor_pct=th.floor_pct, alpha=th.level, n_candidate=pending.metrics[0].cand.size,
                      n_baseline=pending.metrics[0].baseline.size, min_repeats=th.min_repeats, probe=probe)
    change = "; ".join(texts) + f" at {level_m:.1%}"
    reason = f"{change}: {d.reason}{pending.note}"
    if d.verdict == UNCHANGED or d.verdict == INCONCLUSIVE and not probe:
        reason += _reach_note(out.get("mdc_pct", pending.base.get("mdc_pct")), evidence, th)
    return out | {"verdict": d.verdict, "decided_by": d.decided_by, "repeats_needed": d.repeats_needed,
                  "reason": reason}


def _reach_note(mdc: float | None, evidence: Sequence[decide.Evidence], th: Thresholds) -> str:
    effects = [abs(e.effect_pct) for e in evidence]
    if mdc is not None and mdc > max(th.floor_pct, *effects):
        return f" (at this noise only changes beyond ~{mdc:.0f}% are reliably seen)"
    return ""


def _probe_balance(pending: _Pending, level: float, th: Thresholds, num_tested: int) -> decide.ProbeBalance:
    """The probe's balance between the sides, with (when unbalanced) the unadjusted throughput change net of
    what the probe's shift can explain."""
    shift, shift_ci, p, balanced = decide.probe_balance(pending.cand_probe, pending.base_probe,
                                                        floor_pct=th.floor_pct, alpha=th.level, confidence=level)
    if balanced:
        return decide.ProbeBalance(shift_pct=shift, p_value=p, balanced=True)
    m = pending.metrics[0]
    ci = inference.bootstrap_log_ratio(m.cand, m.baseline, confidence=level, num_resamples=th.num_resamples,
                                       seed=th.seed)
    p_plain = inference.permutation_p_value(m.cand, m.baseline, num_permutations=th.num_resamples, seed=th.seed)
    plain = decide.Evidence(name=m.name, effect_pct=inference.to_percent(ci.estimate),
                            ci_low_pct=inference.to_percent(ci.low), ci_high_pct=inference.to_percent(ci.high),
                            significant=p_plain <= th.level / num_tested, log_sd=_log_sd(m.cand, m.baseline))
    return decide.ProbeBalance(shift_pct=shift, p_value=p, balanced=False,
                               net=decide.net_of_probe(plain, shift, shift_ci))


def compare_runs(candidate: RunData, baseline: RunData, thresholds: Thresholds | None = None, *,
                 require_same_env: bool = True, mode: str = "baseline",
                 baseline_label: str | None = None) -> Comparison:
    """Verdict for every cell of `candidate` against `baseline`, matched by cell_id.

    Per testable cell: log ratio of mean throughput across repeats with a percentile bootstrap interval
    (inference.bootstrap_log_ratio, resampling repeats) and an exact permutation p-value of the same statistic
    (inference.permutation_p_value: its false-alarm rate is at most the level at any number of repeats, where
    the percentile bootstrap's is not); Benjamini-Hochberg across the testable cells at fdr_q; intervals at
    the FCR-adjusted level 1 - R q / m (Benjamini & Yekutieli). With Thresholds.speed_adjust (the default)
    and a machine-speed probe of one kind on every usable repeat of both sides (CPU cells),
    the change is instead the difference of mean log throughput at equal probe time (inference.ancova_fit, t
    interval) tested by a Freedman-Lane permutation (inference.ancova_permutation_p). With Thresholds.fast_steps
    the fast-step rate is tested the same way beside throughput: the cell's p-value is the smaller one times
    two, Holm within the cell says which metric is significant, intervals are at half the error each. A
    regression needs all three, for one metric: BH rejects (and Holm keeps the metric), the whole interval
    lies below 0, and the change is beyond the floor.
    `require_same_env=False` (A/B runs, where the environment is what is being compared) reports
    environment differences instead of refusing.
    """
    th = thresholds or Thresholds()
    cand_cells, base_cells = _by_cell(candidate.rows), _by_cell(baseline.rows)
    prepared = [_prepare(cid, rows, base_cells.get(cid), candidate, baseline, th, require_same_env)
                for cid, rows in sorted(cand_cells.items())]
    testable = [p for _, p in prepared if p is not None]
    for p in testable:
        splits = permutations_for(th, len(testable), len(p.metrics))
        for m in p.metrics:
            m.p = _p_value(p, m, th, splits)
        p.p = min(1.0, len(p.metrics) * min(m.p for m in p.metrics))
    decided: dict[int, dict[str, Any]] = {}
    if testable:
        adjusted, rejected = inference.benjamini_hochberg([p.p for p in testable], q=th.level)
        level = inference.fcr_adjusted_confidence(int(rejected.sum()), len(testable), q=th.level)
        alpha = int(rejected.sum()) * th.level / len(testable)  # the BH threshold the rejected cells passed
        for p, adj, rej in zip(testable, adjusted, rejected):
            decided[id(p)] = _decide(p, alpha if rej else 0.0, float(adj), level, th, len(testable))
    verdicts = []
    for common, p in prepared:
        fields_ = _merge(common, decided[id(p)]) if p is not None else common
        cid = common["cell_id"]
        if p is not None or common["verdict"] not in (FAILED, SKIPPED):
            fields_ |= accuracy_check(_ok(cand_cells[cid]), _ok(base_cells.get(cid, [])), th,
                                      fields_.get("ci_level") or 1 - th.level)
            if fields_["verdict"] == NOT_COMPARABLE:
                fields_["accuracy_verdict"] = ACCURACY_NA
        if p is not None:
            fields_ |= phase_attribution(_ok(cand_cells[cid]), _ok(base_cells.get(cid, [])),
                                         fields_.get("ci_level") or 1 - th.level)
        drills = (fields_.get("fire_drill_pct") or 0.0, fields_.get("baseline_fire_drill_pct") or 0.0)
        if any(drills):  # never silent: a drill's verdict says so in its own words
            fields_["reason"] = f"FIRE DRILL (candidate +{drills[0]:g}%, baseline +{drills[1]:g}% injected work): " \
                + fields_["reason"]
        verdicts.append(_build(fields_))
    missing = sorted(set(base_cells) - set(cand_cells))
    notes = (f"{len(missing)} baseline cell(s) not in this run: {', '.join(missing)}",) if missing else ()
    reach = decide.repeats_to_reach(th.level)
    short = [v for v in verdicts if v.verdict == INCONCLUSIVE and 0 < min(v.num_candidate, v.num_baseline) < reach]
    if short:
        notes = (f"warning: {len(short)} cell(s) have fewer usable repeats than a permutation test needs to reach "
                 f"p <= {th.level:.3g} ({reach} a side): they are inconclusive whatever their numbers",) + notes
    notes += node_notes(cand_cells, base_cells)
    return Comparison(
        mode=mode, candidate=candidate, baseline_label=baseline_label or f"run {baseline.run_id}",
        baseline_environment=baseline.environment, thresholds=th, verdicts=tuple(verdicts), notes=notes,
        environment_diff=tuple(env_diff(baseline.environment, candidate.environment)), baseline=baseline)


PHASE_NAMES = ("data", "h2d", "forward", "backward", "optimizer", "allreduce")
"""The step's phases as cells record them (`phase_<name>_median_s`; harness/cell/timing.py PHASES)."""


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
        a, b = series(base, f"phase_{name}_median_s"), series(cand, f"phase_{name}_median_s")
        if len(a) >= 2 and len(b) >= 2:
            d = welch_difference(a, b, confidence=level)
            found.append((name, d.estimate, d.low, d.high))
    if not found:
        return {}
    name, change, low, high = max(found, key=lambda f: abs(f[1]))
    a, b = series(base, "step_time_median_s"), series(cand, "step_time_median_s")
    step = float(np.mean(b) - np.mean(a)) if a and b else None
    whole = f" of {step:+.1f} ms per step" if step is not None else " per step"
    return {"phase": name, "phase_change_ms": change, "phase_change_low_ms": low, "phase_change_high_ms": high,
            "step_change_ms": step, "attribution": f"{name} {change:+.1f} ms [{low:+.1f}, {high:+.1f}]{whole}"}


def node_notes(cand_cells: Mapping[str, list[Mapping[str, Any]]],
               base_cells: Mapping[str, list[Mapping[str, Any]]]) -> tuple[str, ...]:
    """A warning naming the cells whose usable repeats (candidate and baseline together) ran on more than
    one node (the `nodes` column; SLURM spreads jobs over a partition): two nodes of one model differ in
    speed by more than repeats of one node do, so such a change mixes code and node."""
    mixed = []
    for cid, rows in sorted(cand_cells.items()):
        sides = {name: sorted({r.get("nodes") or r.get("hostname") or "?" for r in _ok(side_rows)})
                 for name, side_rows in (("candidate", rows), ("baseline", base_cells.get(cid, [])))}
        if len(set(sides["candidate"]) | set(sides["baseline"])) > 1:
            mixed.append(f"{cid} (candidate on {', '.join(sides['candidate']) or '-'}; "
                         f"baseline on {', '.join(sides['baseline']) or '-'})")
    if not mixed:
        return ()
    return (f"warning: {len(mixed)} cell(s) ran on more than one node, so their change mixes code and node "
            f"(pin the cells to one node with [executor] constraint, or compare by A/B on one node): "
            + "; ".join(mixed),)


def _merge(*parts: Mapping[str, Any]) -> dict[str, Any]:
    """Verdict fields merged left to right; the per-metric dicts (METRIC_COLUMNS' keys) merge key by key."""
    out: dict[str, Any] = {}
    for part in parts:
        for key, value in part.items():
            out[key] = out.get(key, {}) | value if key in _METRIC_FIELDS else value
    return out


def _build(fields_: Mapping[str, Any]) -> CellVerdict:
    """A CellVerdict from cell-level fields and one dict per metric tested."""
    cell = {key: value for key, value in fields_.items() if key not in _METRIC_FIELDS}
    fast = fields_.get("fast_step")
    return CellVerdict(**cell, throughput=MetricVerdict(**fields_.get("throughput", {})),
                       fast_step=MetricVerdict(**fast) if fast else None)


def describe_only(candidate: RunData, thresholds: Thresholds | None = None) -> Comparison:
    """No baseline: every cell's own figures and failures, verdict `no baseline`."""
    th = thresholds or Thresholds()
    verdicts = []
    for cid, rows in sorted(_by_cell(candidate.rows).items()):
        ok = _usable(rows, th)
        x = _throughputs(ok)
        unsteady = sum(r.get("is_steady") is False for r in _ok(rows))
        verdict, reason = _failure(rows) if not _ok(rows) else (NO_BASELINE, "no baseline given")
        verdicts.append(CellVerdict(
            cell_id=cid, **_axes(rows), verdict=verdict, reason=reason, floor_pct=th.floor_pct, fdr_q=th.fdr_q,
            accuracy_tolerance=th.accuracy_tolerance, num_candidate=len(ok),
            throughput=MetricVerdict(candidate_img_per_s=float(x.mean()) if x.size else None,
                                     candidate_cv=_cv(x) if x.size else None),
            num_unsteady=unsteady, noise=noise_label(_cv(x), unsteady) if x.size else "",
            fire_drill_pct=max(map(_drill, rows)), is_smoke=bool(rows[0].get("is_smoke")),
            candidate_run_id=candidate.run_id))
    return Comparison(mode="none", candidate=candidate, baseline_label="nothing (no baseline given)",
                      baseline_environment=None, thresholds=th, verdicts=tuple(verdicts))
