"""The nightly history as series: every run folder of a history, one point per night per cell and metric (the
run's per-cell estimate), and the change points and drifts found in them (harness.stats.changepoint).
`load_nights` is the only function here that reads the disk; `analyse` is pure given the nights.

A run that cannot be read (corrupt or truncated Parquet, a newer schema, no rows) or that ran another
matrix than the newest run is skipped with its reason; a history with no usable run is bad input.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from harness.analysis.nights import summaries
from harness.analysis.nights.summaries import Cache
from harness.analysis.nights.coverage import OTHER_MATRIX, UNREADABLE, Coverage, Skipped, count as count_coverage
from harness.analysis.load.runs import RunInputError, check_run_folder, read_work_table, resolve_pointer
from harness.analysis.judge.run import RunData
from harness.analysis.judge.verdict import DEFAULT_FLOOR_PCT
from harness.analysis.nights.work_history import WorkStep, work_steps
from harness.catalogue.axes import AXES, AxisValues
from harness.stats import changepoint
from harness.stats.inference import to_percent
from harness.catalogue import col
from harness.catalogue.tracked import TRACKED, TRACKED_BY_NAME, Tracked
from harness.catalogue.changes import CHANGE_COLUMNS as CATALOGUE_CHANGE_COLUMNS

CHANGES_VERSION = 3
"""Version of changes.parquet (schema metadata nvbench.changes_version). 1: first release. 2: p_floor, the
smallest p the test could report; confirmation and confirmation_note, what the nightly's A/B of the change's
commits said (load.changes_file.CHANGES migrates 1: all three null). 3: the model axis (`model`, after cell_id;
read as null from 1 and 2)."""

CONFIRMED, NOT_CONFIRMED, COULD_NOT_CONFIRM = "confirmed", "not confirmed", "could not confirm"
"""What a confirmation can say (Change.confirmation); null: none was asked (a drift, `nvbench history` alone)."""


Metric = Tracked
METRICS = TRACKED
"""Every metric a history follows, headline first (declared in harness.catalogue.tracked)."""
METRIC_BY_NAME = TRACKED_BY_NAME


@dataclass(frozen=True, slots=True, kw_only=True)
class HistorySettings:
    """What it takes to call a change point or a drift. Validated at construction, every problem at once."""

    floor_pct: float = DEFAULT_FLOOR_PCT
    """Practical floor of the rates (throughput, fast steps) in %: a smaller step or drift is never reported."""
    top1_floor: float = 0.01
    """Practical floor of top-1 (absolute, 0.01 = 1 point): the report's accuracy band."""
    data_wait_floor: float = 0.02
    """Practical floor of the exposed data-wait fraction (absolute, 0.02 = 2 % of the window)."""
    min_segment: int = changepoint.DEFAULT_MIN_SEGMENT
    """Fewest nights on each side of a change point."""
    alpha: float = changepoint.DEFAULT_ALPHA
    """Significance level of each divisive step's test (the share of no-change series given a change point)."""
    num_simulations: int | None = None
    """Simulated series per test (None: enough for a p floor twenty times below alpha)."""
    drift_nights: int = changepoint.DEFAULT_DRIFT_NIGHTS
    """A drift is a slope over the last K nights; a series of fewer nights is not assessed for one."""
    confidence: float = 0.95
    """Level of every interval (a change's, a drift's slope)."""
    seed: int = 0
    """Simulation seed (mixed with the cell and metric): the same history always gives the same answer."""

    def __post_init__(self) -> None:
        problems = []
        if not (math.isfinite(self.floor_pct) and 0 <= self.floor_pct < 100):
            problems.append(f"floor_pct={self.floor_pct}: must be in [0, 100)")
        for name in ("top1_floor", "data_wait_floor"):
            if not 0 <= getattr(self, name) < 1:
                problems.append(f"{name}={getattr(self, name)}: must be in [0, 1)")
        if self.min_segment < 2:
            problems.append(f"min_segment={self.min_segment}: must be >= 2")
        if not 0 < self.alpha < 1:
            problems.append(f"alpha={self.alpha}: must be strictly between 0 and 1")
        elif self.num_simulations is not None and (self.num_simulations + 1) * self.alpha < 1:
            problems.append(f"num_simulations={self.num_simulations}: its p floor 1/{self.num_simulations + 1} lies "
                            f"above alpha={self.alpha}")
        if self.drift_nights < 4:
            problems.append(f"drift_nights={self.drift_nights}: must be >= 4")
        if not 0 < self.confidence < 1:
            problems.append(f"confidence={self.confidence}: must be strictly between 0 and 1")
        if problems:
            raise ValueError("; ".join(problems))

    def floor(self, metric: Metric) -> float:
        """The floor in the unit detection works in: log ratio for rates, the fraction itself otherwise."""
        if metric.relative:
            return math.log1p(self.floor_pct / 100)
        return self.top1_floor if metric.name == "top1" else self.data_wait_floor


@dataclass(frozen=True, slots=True, kw_only=True)
class Night:
    """One run of the history."""

    run: RunData
    matrix: str
    """The matrix's benchmark name (manifest's matrix_text), or its source path."""
    commit: str
    """The harness's commit the run recorded (short), `+dirty` when it had uncommitted changes; `?` unknown."""
    fire_drill_pct: float = 0.0
    cells: Mapping[str, Any] = field(default_factory=dict)
    """cell_id -> {"axes": {axis: value}, "points": {column: [value, low, high, repeats, [values]]}}: the night's
    ok rows as summaries.summarise left them (run.rows stays empty: history reads nothing else)."""
    work: Mapping[str, Any] = field(default_factory=dict)
    """cell_id -> {"processes", "digest", "ranges"}: the night's counted work (summaries.work_summary); empty
    where the night has no work.parquet."""
    busy: Mapping[str, Any] = field(default_factory=dict)
    """cell_id -> {"windows", "spoiled", "share"}: cells too few of whose windows were clean this night
    (harness.results.interference.MIN_CLEAN_FRAC): no point that night, neither a change point nor evidence against one."""

    num_rows: int = 0
    """Result rows the night holds (any status)."""
    num_windows: int = 0
    """Its measured windows: ok rows with a throughput."""
    num_busy_windows: int = 0
    """Windows taken under interference, left out of its points (those of busy cells and the others' spoiled few)."""

    def busy_text(self) -> str:
        return summaries.busy_words(self.busy)

    @property
    def run_id(self) -> str:
        return self.run.run_id


@dataclass(frozen=True, slots=True, kw_only=True)
class Point:
    """One night of one cell's metric: the run's estimate over its ok repeats, with its interval."""

    night: int
    """Position of the run in the history (0-based, oldest first)."""
    value: float
    low: float
    """Interval of the night's estimate (t over repeats; one repeat: its within-run interval); NaN unknown."""
    high: float
    num_repeats: int
    repeats: tuple[float, ...] = ()
    """The night's ok repeats' values: the change-point test weighs each night by its repeats' spread."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Series:
    cell_id: str
    axes: Mapping[str, Any]
    label: str = ""
    """The cell's label as its newest night's rows recorded it (empty: none did)."""
    metric: str
    points: tuple[Point, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Change(AxisValues):
    """A change point or a drift of one cell's metric: one row of changes.parquet (its axis values: AxisValues).
    Each field is a column of that table, declared with its type and meaning in harness.catalogue.changes."""

    cell_id: str
    metric: str
    kind: str
    run_id: str
    night: int
    created_at: str
    previous_run_id: str
    commit_from: str
    commit_to: str
    unit: str
    before: float
    after: float
    change: float
    ci_low: float | None = None
    ci_high: float | None = None
    confidence: float
    p_value: float | None = None
    p_floor: float | None = None
    nights_before: int
    nights_after: int
    fire_drill_pct: float = 0.0
    is_new: bool = False
    confirmation: str | None = None
    confirmation_note: str | None = None


CHANGE_COLUMNS = CATALOGUE_CHANGE_COLUMNS
"""changes.parquet's columns (harness.catalogue.changes), Change's fields in that order."""


class HistoryInputError(RunInputError):
    """The history as a whole cannot be analysed (no folder, no run folders, nothing readable)."""


# ---------------------------------------------------------------------------------------------
# reading the history


def _night(path: Path, cache: Cache) -> Night:
    """The night of run folder `path`: its summary from the cache while the files it came from are unchanged,
    else read (history's columns only) and summarised."""
    from harness.results import store

    check_run_folder(path)
    try:
        key = summaries.night_key(path)
        manifest = store.read_json(path / "manifest.json")
    except store.UnreadableFile as exc:
        raise RunInputError([str(exc)]) from None
    except OSError as exc:
        raise RunInputError([f"{path}: cannot read the run folder ({exc.strerror})"]) from None
    if not isinstance(manifest, dict):
        raise RunInputError([f"{path / 'manifest.json'}: not an nvbench manifest (a JSON object)"])
    summary = cache.night(key)
    if summary is None:
        try:
            work_rows = read_work_table(path)
        except store.UnreadableFile as exc:
            raise RunInputError([str(exc)]) from None
        summary = summaries.summarise(path, manifest, summaries.read_rows(path), work_rows)
        cache.keep_night(key, summary)
    run = RunData(path=summary["path"], run_id=summary[col.run_id], created_at=summary["created_at"],
                  environment=summary["environment"], rows=())
    return Night(run=run, matrix=summaries.matrix_name(manifest), commit=summaries.commit(run.environment),
                 fire_drill_pct=summary[col.fire_drill_pct], cells=summary["cells"], work=summary.get("work") or {},
                 busy=summary.get("busy") or {}, num_rows=summary["counts"]["rows"],
                 num_windows=summary["counts"]["windows"], num_busy_windows=summary["counts"]["spoiled"])


def load_nights(folder: Path | str, cache: Cache | None = None) -> tuple[list[Night], list[Skipped]]:
    """Every run folder directly inside `folder` (or named by a pointer file there), oldest first, and
    (path, reason) for every run skipped: unreadable, or of another matrix than the newest run's.
    HistoryInputError when the folder is missing, holds no run folder, or none is usable."""
    folder = Path(folder)
    if not folder.is_dir():
        raise HistoryInputError([f"{folder}: not a folder (a history is a folder of run folders)"])
    cache = cache or Cache(None)
    nights: list[Night] = []
    skipped: list[Skipped] = []
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith("."):
            continue
        try:
            target = resolve_pointer(entry) if entry.is_file() else entry
        except RunInputError as exc:
            skipped.append(Skipped(str(entry), exc.problems[0], UNREADABLE))
            continue
        if not (target / "manifest.json").is_file():
            continue  # not a run folder (the history's own trend page, a README): nothing to say
        try:
            nights.append(_night(target, cache))
        except RunInputError as exc:
            skipped.append(Skipped(str(entry), "; ".join(exc.problems), UNREADABLE))
    if not nights and not skipped:
        raise HistoryInputError([f"{folder}: no run folders (a run folder holds manifest.json and cells/)"])
    nights.sort(key=lambda n: (n.run.created_at, n.run_id))
    if nights:
        newest = nights[-1].matrix
        skipped += [Skipped(n.run.path, f"matrix '{n.matrix}' is not the newest run's '{newest}'", OTHER_MATRIX)
                    for n in nights if n.matrix != newest]
        nights = [n for n in nights if n.matrix == newest]
    if not nights:
        raise HistoryInputError([f"{folder}: no usable run folder ({len(skipped)} skipped: "
                                 f"{skipped[0][0]}: {skipped[0][1]})"])
    return nights, skipped


# ---------------------------------------------------------------------------------------------
# series


def build_series(nights: Sequence[Night]) -> list[Series]:
    """One series per (cell, metric) with at least one point: the mean over the night's ok repeats."""
    axes: dict[str, Mapping[str, Any]] = {}
    labels: dict[str, str] = {}
    points: dict[tuple[str, str], list[Point]] = {}
    for i, night in enumerate(nights):  # one pass over every night's cells, oldest first
        for cid, cell in night.cells.items():
            axes.setdefault(cid, cell["axes"])
            labels[cid] = cell.get("label") or labels.get(cid, "")
            for column, p in cell.get("points", {}).items():
                points.setdefault((cid, column), []).append(
                    Point(night=i, value=p[0], low=p[1], high=p[2], num_repeats=p[3], repeats=tuple(p[4])))
    return [Series(cell_id=cid, axes=axes[cid], label=labels[cid], metric=metric.name, points=tuple(found))
            for cid in sorted(axes) for metric in METRICS if (found := points.get((cid, metric.column)))]


# ---------------------------------------------------------------------------------------------
# change points and drifts


def _scaled(metric: Metric, values: np.ndarray) -> np.ndarray:
    return np.log(values) if metric.relative else values


def _level(metric: Metric, value: float) -> float:
    return math.exp(value) if metric.relative else value


def _change_units(metric: Metric, value: float | None) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return to_percent(value) if metric.relative else 100 * value


def _seed(settings: HistorySettings, series: Series) -> int:
    return settings.seed + zlib.crc32(f"{series.cell_id}/{series.metric}".encode())


def _nights_of(series: Series, metric: Metric) -> list[np.ndarray]:
    """Each night's repeats in the unit detection works in (a point without them: its value, one repeat)."""
    return [_scaled(metric, np.array(p.repeats or (p.value,))) for p in series.points]


def _detect(series: Series, settings: HistorySettings) -> tuple[list[changepoint.ChangePoint], changepoint.Trend | None]:
    metric = METRIC_BY_NAME[series.metric]
    y = _scaled(metric, np.array([p.value for p in series.points]))
    steps: list[changepoint.ChangePoint] = []
    if y.size >= 2 * settings.min_segment:
        steps = list(changepoint.change_points(
            _nights_of(series, metric), min_segment=settings.min_segment, min_magnitude=settings.floor(metric),
            alpha=settings.alpha, num_simulations=settings.num_simulations, confidence=settings.confidence,
            seed=_seed(settings, series)))
    trend = changepoint.drift(y, last=settings.drift_nights, breaks=[s.index for s in steps],
                              min_total=settings.floor(metric), confidence=settings.confidence)
    return steps, trend


def _cached_detect(series: Series, settings: HistorySettings,
                   cache: Cache) -> tuple[list[changepoint.ChangePoint], changepoint.Trend | None]:
    """_detect, or what it gave for the very same series before (the nightly's yesterday is tonight's series
    without its newest night: every series with a change asks for it)."""
    key = summaries.series_key([[getattr(settings, f.name) for f in fields(HistorySettings)], series.cell_id,
                                    series.metric], [1 + len(p.repeats) for p in series.points],
                                   [v for p in series.points for v in (p.value, *p.repeats)])
    hit = cache.detection(key)
    if hit is not None:
        return [summaries.from_plain(changepoint.ChangePoint, s) for s in hit[0]], \
            (summaries.from_plain(changepoint.Trend, hit[1]) if hit[1] else None)
    steps, trend = _detect(series, settings)
    cache.keep_detection(key, [[summaries.to_plain(s) for s in steps], summaries.to_plain(trend) if trend else None])
    return steps, trend


def _base(series: Series, night: Night, position: int) -> dict[str, Any]:
    return {col.cell_id: series.cell_id, **{a: series.axes.get(a) for a in AXES}, "metric": series.metric,
            col.run_id: night.run_id, "night": position + 1, "created_at": night.run.created_at,
            col.fire_drill_pct: night.fire_drill_pct}


def _step_change(series: Series, step: changepoint.ChangePoint, nights: Sequence[Night],
                 settings: HistorySettings) -> Change:
    metric = METRIC_BY_NAME[series.metric]
    at, before = series.points[step.index].night, series.points[step.index - 1].night
    return Change(**_base(series, nights[at], at), kind="step", previous_run_id=nights[before].run_id,
                  commit_from=nights[before].commit, commit_to=nights[at].commit,
                  unit="%" if metric.relative else "points", before=_level(metric, step.before),
                  after=_level(metric, step.after), change=_change_units(metric, step.change.estimate),
                  ci_low=_change_units(metric, step.change.low), ci_high=_change_units(metric, step.change.high),
                  confidence=settings.confidence, p_value=step.p_value, p_floor=step.p_floor,
                  nights_before=step.num_before, nights_after=step.num_after)


def _drift_change(series: Series, trend: changepoint.Trend, nights: Sequence[Night],
                  settings: HistorySettings) -> Change:
    metric = METRIC_BY_NAME[series.metric]
    first, last = series.points[trend.start].night, series.points[-1].night
    y = _scaled(metric, np.array([p.value for p in series.points[trend.start:]]))
    span = len(series.points) - 1 - trend.start
    # where the fitted line ends: every night of the window carried to the last one along the slope
    end_level = float(np.mean(y - trend.slope.estimate * (np.arange(y.size) - span)))
    return Change(**_base(series, nights[first], first), kind="drift", previous_run_id=nights[last].run_id,
                  commit_from=nights[first].commit, commit_to=nights[last].commit,
                  unit="%" if metric.relative else "points", before=_level(metric, end_level - trend.total),
                  after=_level(metric, end_level), change=_change_units(metric, trend.total),
                  ci_low=_change_units(metric, trend.slope.low * span),
                  ci_high=_change_units(metric, trend.slope.high * span), confidence=settings.confidence,
                  nights_before=0, nights_after=y.size)


def _changes_of(series: Series, nights: Sequence[Night], settings: HistorySettings, cache: Cache) -> list[Change]:
    steps, trend = _cached_detect(series, settings, cache)
    out = [_step_change(series, s, nights, settings) for s in steps]
    if trend is not None:
        out.append(_drift_change(series, trend, nights, settings))
    return out


def _is_known(change: Change, earlier: Sequence[Change]) -> bool:
    """Found the night before too: the same cell, metric and kind, starting within a night, the same sign."""
    return any(c.cell_id == change.cell_id and c.metric == change.metric and c.kind == change.kind
               and abs(c.night - change.night) <= 1 and (c.change > 0) == (change.change > 0) for c in earlier)


@dataclass(frozen=True, slots=True, kw_only=True)
class History:
    """Everything the page and changes.parquet render."""

    folder: str
    nights: tuple[Night, ...]
    skipped: tuple[Skipped, ...]
    series: tuple[Series, ...]
    changes: tuple[Change, ...]
    """Newest first, then the largest change first."""
    settings: HistorySettings = field(default_factory=HistorySettings)
    work_steps: tuple[WorkStep, ...] = ()
    """The nights a cell's counted work changed (work_steps), newest first."""

    @property
    def coverage(self) -> Coverage:
        """What it read and what it left out, counted."""
        return count_coverage(self.nights, self.skipped, self.series)

    def drift_note(self) -> str | None:
        """Why some series were not assessed for a drift (fewer nights than its window), or None."""
        short = [s for s in self.series if not changepoint.drift_assessed(len(s.points), self.settings.drift_nights)]
        if not short:
            return None
        fewest, window = min(len(s.points) for s in short), self.settings.drift_nights
        if len(short) == len(self.series):
            longest = max(len(s.points) for s in short)
            return (f"drift not assessed: a drift is a slope over the last {window} nights, and no series has that "
                    f"many (at most {longest})")
        return (f"drift not assessed for {len(short)} of {len(self.series)} series: a drift is a slope over the last "
                f"{window} nights, and they have as few as {fewest}")


def analyse(folder: str, nights: Sequence[Night], skipped: Sequence[Skipped],
            settings: HistorySettings | None = None, cache: Cache | None = None) -> History:
    """Change points and drifts of every series; each marked new when the history without its newest night
    does not have it. `cache`: detections made before are reused, the new ones kept."""
    settings, cache = settings or HistorySettings(), cache or Cache(None)
    series = build_series(nights)
    changes = []
    for s in series:
        found = _changes_of(s, nights, settings, cache)
        newest = len(nights) - 1
        if found and s.points[-1].night == newest and len(s.points) > 1:
            cut = Series(cell_id=s.cell_id, axes=s.axes, label=s.label, metric=s.metric, points=s.points[:-1])
            earlier = _changes_of(cut, nights, settings, cache)
            found = [c if _is_known(c, earlier) else replace(c, is_new=True) for c in found]
        changes += found
    changes.sort(key=lambda c: (-c.night, -abs(c.change)))
    return History(folder=folder, nights=tuple(nights), skipped=tuple(skipped), series=tuple(series),
                   changes=tuple(changes), settings=settings, work_steps=work_steps(nights))


def with_confirmations(history: History, confirmations: Mapping[int, tuple[str, str]]) -> History:
    """The history with changes[i] confirmed as confirmations[i] = (confirmation, note)."""
    changes = tuple(replace(c, confirmation=confirmations[i][0], confirmation_note=confirmations[i][1])
                    if i in confirmations else c for i, c in enumerate(history.changes))
    return History(folder=history.folder, nights=history.nights, skipped=history.skipped, series=history.series,
                   changes=changes, settings=history.settings, work_steps=history.work_steps)


def load_history(folder: Path | str, settings: HistorySettings | None = None, *, use_cache: bool = True) -> History:
    """load_nights then analyse; with `use_cache`, what earlier runs computed is read from, and what this one
    computed written to, FOLDER/.nvbench-cache (summaries); the answer is the same either way."""
    cache = Cache(Path(folder) / summaries.CACHE_DIR if use_cache and Path(folder).is_dir() else None)
    nights, skipped = load_nights(folder, cache)
    result = analyse(str(folder), nights, skipped, settings, cache)
    cache.save()
    return result
