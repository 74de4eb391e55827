"""What every report format says the same way: escaping for Markdown (HTML is escaped by the templates,
pages.render), the number format, a cell's change, the headline, the fire-drill banner, the method paragraph, and
each cell's mean of a row column."""

from __future__ import annotations

import html
import math
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from harness.catalogue.judged import JUDGED
from harness.analysis.judge.verdict import (
    ACCURACY_BELOW,
    IMPROVEMENT,
    REGRESSION,
    VERDICTS,
    CellVerdict,
    Comparison,
    Thresholds,
    metric_change_text,
)
from harness.results import env as env_fields
from harness.catalogue import col
from harness.catalogue.cells import row_label


def human_time(iso: str | None) -> str:
    """An ISO 8601 timestamp as a person reads it, to the minute in UTC ('2026-11-27 04:25 UTC'); '?' when
    there is none, the text itself when it is no timestamp."""
    from datetime import datetime, timezone

    if not iso:
        return "?"
    try:
        when = datetime.fromisoformat(iso)
    except ValueError:
        return iso
    when = when.astimezone(timezone.utc) if when.tzinfo else when.replace(tzinfo=timezone.utc)
    return when.strftime("%Y-%m-%d %H:%M UTC")


def num_text(value: float | None, spec: str = ".1f", suffix: str = "") -> str:
    return "-" if value is None or (isinstance(value, float) and not math.isfinite(value)) else \
        f"{format(value, spec)}{suffix}"


def esc_md(value: Any) -> str:
    """Text safe inside a Markdown table cell: HTML escaped, pipes and emphasis characters neutralised."""
    text = html.escape("" if value is None else str(value), quote=False)
    text = re.sub(r"([\\`*_\[\]|#~])", r"\\\1", text)
    return " ".join(text.split())


def change_text(v: CellVerdict) -> str:
    """'-3.1% [-3.8, -2.4]', '-3.1% (z -4.2)' in history mode, or '-'; with the fast-step rate's change
    after it where the comparison tested it ('...; fast steps -5.0% [-6.1, -3.9]'), the metric the
    verdict rests on marked with '*'; for a regression or improvement, the phase whose time changed most
    ('...; optimizer +20.3 ms [+18.9, +21.6] of +21.0 ms per step')."""
    text = metric_change_text(v)
    if v.attribution and v.verdict in (REGRESSION, IMPROVEMENT):  # where in the step the change sits
        text += f"; {v.attribution}"
    return text


def css_class(verdict: str) -> str:
    return verdict.replace(" ", "-")


def sorted_verdicts(comparison: Comparison) -> list[CellVerdict]:
    """In groups by verdict, in VERDICTS order (what needs a person first: inconclusive cells before
    unchanged ones); within a group by the change of the metric each verdict rests on, most negative first,
    cells without an effect last."""
    order = {name: i for i, name in enumerate(VERDICTS)}
    return sorted(comparison.verdicts, key=lambda v: (order.get(v.verdict, 99), v.decided_effect_pct is None,
                                                      v.decided_effect_pct or 0.0, v.cell_id))


def headline_words(comparison: Comparison) -> str:
    counts = comparison.counts()
    parts = [f"{n} {name}{'s' if n != 1 and name.endswith(('regression', 'improvement')) else ''}"
             for name, n in counts.items()]
    acc = sum(v.accuracy_verdict == ACCURACY_BELOW for v in comparison.verdicts)
    if acc:
        parts.append(f"{acc} accuracy below band")
    return ", ".join(parts) or "no cells"


def self_comparison_note(comparison: Comparison) -> str | None:
    """One line when the baseline is the run itself (the same folder, or the same run id): nothing can change,
    so the report shows what a comparison looks like, not whether anything changed."""
    base, cand = comparison.baseline, comparison.candidate
    if base is None or comparison.mode == "history":
        return None
    same_folder = Path(base.path).resolve() == Path(cand.path).resolve()
    if not same_folder and base.run_id != cand.run_id:
        return None
    how = "the same folder" if same_folder else f"the same run id {base.run_id}"
    return (f"note: this run is compared with itself ({how}): no cell can change; give another run as "
            "--baseline to judge a change")


def drill_banner(comparison: Comparison) -> str | None:
    drilled = [v for v in comparison.verdicts if v.fire_drill_pct or v.baseline_fire_drill_pct]
    if not drilled:
        return None
    pct = max(max(v.fire_drill_pct, v.baseline_fire_drill_pct) for v in drilled)
    return (f"FIRE DRILL: {len(drilled)} cell(s) ran with calibrated extra work (up to +{pct:g}% per step, "
            "nvbench run --fire-drill). These verdicts test the detector; they are not results.")


def method_text(comparison: Comparison) -> str:
    th = comparison.thresholds
    if comparison.mode == "history":
        return (f"History screening: per cell, the median and scaled MAD of mean throughput over the last "
                f"{th.history_runs} comparable runs (at least {th.history_min_runs}); a suspect has |robust z| >= "
                f"{th.history_z:g} and a change beyond the {th.floor_pct:g}% floor. Suspects are not confirmed: "
                "rerun them (suspects.json) and compare against a baseline.")
    return (f"Throughput per repeat is a ratio of sums over the measured window. Change = log ratio of mean "
            f"throughput across repeats with a percentile bootstrap interval ({th.num_resamples} resamples of "
            f"repeats, seed {th.seed}); exact permutation test of the same ratio, Benjamini-Hochberg across cells "
            f"at q = {th.fdr_q:g}{_looks_text(th)}, intervals at the FCR-adjusted level 1 - R q / m. Regression: "
            f"BH rejects, the whole interval lies below 0 and the change is beyond the {th.floor_pct:g}% floor. "
            f"Unchanged: every tested metric's interval lies inside +/- {th.floor_pct:g}% (equivalence shown, "
            f"two one-sided tests). Inconclusive: anything else, with about how many repeats per side would "
            f"likely decide it (normal approximation from the observed spread, 80% power); also every cell whose "
            f"repeats cannot reach the level, and every speed-adjusted cell whose probe differed between the "
            f"sides beyond the floor or its own spread. At least "
            f"{th.min_repeats} repeats per side{'; unsteady repeats left out' if th.exclude_unsteady else ''}. "
            f"Top-1: Wald interval of the difference, band +/- {th.accuracy_tolerance:g}. MDC: minimum detectable "
            "change (80% power) at the baseline's repeat-to-repeat spread." + _fast_text(comparison)
            + _adjusted_text(comparison))


def _looks_text(th: Thresholds) -> str:
    return f" split over {th.looks} looks of the adaptive A/B (Bonferroni)" if th.looks > 1 else ""


def _fast_text(comparison: Comparison) -> str:
    """A sentence for every judged metric after the headline that some cell tested (harness.catalogue.judged)."""
    out = ""
    for judged in JUDGED[1:]:
        tested = sum(v.metric(judged.name) is not None for v in comparison.verdicts)
        if tested:
            out += (f" {judged.name.capitalize()} ({tested} cell(s): every repeat on both sides recorded it): "
                    f"{judged.meaning}; tested as throughput is, Bonferroni within the cell (Holm for which metric), "
                    "each interval at its share of the level's error; any judged metric can call a regression "
                    "(* marks the one that did); MDC: the better metric's.")
    return out


def _adjusted_text(comparison: Comparison) -> str:
    adjusted = sum(v.throughput.unadjusted_effect_pct is not None for v in comparison.verdicts)
    if not adjusted:
        return ""
    return (f" Speed-adjusted ({adjusted} cell(s): every repeat on both sides carried a machine-speed probe): "
            "change = difference of mean log throughput at equal probe time (analysis of covariance, t "
            "interval), Freedman-Lane permutation test; MDC at the spread the probe leaves unexplained.")


def field_scope(name: str) -> str:
    """Which cells an environment field must match for (harness.results.env.cell_env_fields)."""
    if name in env_fields.DALI_KEY_FIELDS:
        return "dali-* cells"
    if name in env_fields.COMMS_KEY_FIELDS:
        return "multi-rank GPU cells"
    if name in env_fields.GPU_KEY_FIELDS:
        return "GPU cells"
    return "every cell" if name in env_fields.HOST_KEY_FIELDS else "-"


def cell_labels(rows: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """cell id -> the label its rows recorded (catalogue.cells.row_label): what pages name a cell by."""
    return {r[col.cell_id]: row_label(r) for r in rows}


def cell_means(rows: Sequence[Mapping[str, Any]], column: str) -> dict[str, float]:
    values: dict[str, list[float]] = {}
    for r in rows:
        if r["status"] == "ok" and r.get(column) is not None and math.isfinite(r[column]):
            values.setdefault(r[col.cell_id], []).append(float(r[column]))
    return {cid: float(np.mean(v)) for cid, v in values.items()}


def floor_text(v: Any) -> str:
    """A verdict's practical floor and the rule that set it: `3% (default)`, `6% (judge.override[0] backend=...)`."""
    return f"{v.floor_pct:g}%" + (f" ({v.floor_source})" if v.floor_source else "")


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def coverage_line(c: Any, tail: str = "") -> str:
    """A history's summary line (coverage.Coverage): what it read, what it left out and why, then `tail` (its series
    and changes) or `nothing to judge`. `100 nights, 800 windows: all taken under interference, left out: nothing to
    judge`; `100 nights, 800 windows: 12 of 100 nights busy, left out (96 windows under interference); 8 series: ...`."""
    out = []
    if c.all_busy:
        out.append("all taken under interference, left out")
    elif c.num_busy_nights:
        out.append(f"{c.num_busy_nights} of {_n(c.num_nights, 'night')} busy, left out "
                   f"({_n(c.num_busy_cell_nights, 'cell-night')}; {c.num_busy_windows} windows under interference)")
    elif c.num_busy_windows:
        out.append(f"{c.num_busy_windows} of {_n(c.num_windows, 'window')} taken under interference, left out")
    if c.num_empty_nights:
        out.append(f"{c.num_empty_nights} of {_n(c.num_nights, 'night')} with no ok window, left out")
    if c.num_other_matrix:
        out.append(f"{_n(c.num_other_matrix, 'run folder')} of another matrix, skipped")
    if c.num_unreadable:
        out.append(f"{_n(c.num_unreadable, 'run folder')} unreadable, skipped")
    said = f"{_n(c.num_nights, 'night')}, {_n(c.num_windows, 'window')}: " + (", ".join(out) or "nothing left out")
    return said + (": nothing to judge" if c.nothing_to_judge else f"; {c.num_series} series{tail}")


def gate_line(v: CellVerdict) -> str:
    """`WORK GATE BROKEN: <cell>: work gate host_syncs = "no-rise" broken: <where>`: a broken gate's one line, as
    `nvbench report`, `nvbench ab` and the nightly print it."""
    return f"WORK GATE BROKEN: {v.cell_id}: {v.work_gate}"
