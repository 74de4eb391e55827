"""A cell's repeats as the comparisons read them: rows grouped by cell, the usable ones, their throughputs and
spread, the verdict of a cell without a usable repeat, and whether two sides' environments let them be compared."""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from harness.analysis.judge.verdict import FAILED, INSUFFICIENT, SKIPPED, Thresholds
from harness.results.env import ENV_KEY_FIELDS, cell_env_fields, env_diff, env_key
from harness.results.interference import rerun_cause, row_interference
from harness.results.schema import SUPERSEDED
from harness.matrix.sections import AXES
from harness.catalogue import col, reasons
from harness.catalogue.cells import RERUN_INTERFERENCE

BAD_STATUSES = ("failed", "timeout", "crashed", "cancelled")


def drill_pct(row: Mapping[str, Any]) -> float:
    return float(row.get(col.fire_drill_pct) or 0.0)


def by_cell(rows: Iterable[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    out: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        out.setdefault(row[col.cell_id], []).append(row)
    for cell_rows in out.values():
        cell_rows.sort(key=lambda r: r["repeat"])
    return out


def ok_rows(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [r for r in rows if r["status"] == "ok" and (r.get(col.throughput_img_per_s) or 0) > 0]


def usable_rows(rows: Sequence[Mapping[str, Any]], th: Thresholds) -> list[Mapping[str, Any]]:
    """The ok rows a comparison may use: never one taken under interference (another process's load, not the
    cell's), nor an unsteady one where Thresholds.exclude_unsteady says so."""
    ok = [r for r in ok_rows(rows) if row_interference(r) is None]
    return [r for r in ok if r.get(col.is_steady) is not False] if th.exclude_unsteady else ok


def interference_words(cand_rows: Sequence[Mapping[str, Any]], base_rows: Sequence[Mapping[str, Any]], *,
                       ab: bool) -> str:
    """'; the machine was busy: other processes used 35-71% of the cell's cores in repeats 3, 4 of B and 3 of A
    (left out)', or '' when no ok row was taken under interference: what a verdict's reason adds, so that a cell
    short of repeats says why instead of asking for more."""
    parts, shares = [], []
    for name, rows in (("B" if ab else "the candidate", cand_rows), ("A" if ab else "the baseline", base_rows)):
        hit = [r for r in ok_rows(rows) if row_interference(r) is not None]
        if hit:
            parts.append(f"{', '.join(str(r['repeat']) for r in hit)} of {name}")
            shares += [r.get(col.foreign_cpu_frac) or 0.0 for r in hit]
    if not parts:
        return ""
    low, high = f"{min(shares):.0%}", f"{max(shares):.0%}"
    span = low if low == high else f"{low[:-1]}-{high}"
    return (f"; the machine was busy: other processes used {span} of the cell's cores in repeat(s) "
            f"{' and '.join(parts)} (left out)")


def num_superseded(rows: Iterable[Mapping[str, Any]]) -> int:
    return sum(r["status"] == SUPERSEDED for r in rows)


def rerun_words(cand_rows: Sequence[Mapping[str, Any]], base_rows: Sequence[Mapping[str, Any]], *, ab: bool) -> str:
    """'; 2 repeats re-run after a start transient (A 1, B 1)', or '' when none was: what a verdict's reason
    adds so that its line says how many of the cell's repeats ran twice."""
    cand, base = num_superseded(cand_rows), num_superseded(base_rows)
    if not cand + base:
        return ""
    sides = f"A {base}, B {cand}" if ab else f"baseline {base}, candidate {cand}"
    busy = sum(r["status"] == SUPERSEDED and rerun_cause(r) == RERUN_INTERFERENCE for r in [*cand_rows, *base_rows])
    why = "a start transient" if not busy else "interference" if busy == cand + base else \
        f"a start transient or interference ({busy} interference)"
    return f"; {cand + base} repeat{'s' if cand + base != 1 else ''} re-run after {why} ({sides})"


def throughputs(rows: Sequence[Mapping[str, Any]]) -> np.ndarray:
    return np.array([r[col.throughput_img_per_s] for r in rows], dtype=float)


def cv_of(x: np.ndarray) -> float | None:
    return float(x.std(ddof=1) / x.mean()) if x.size >= 2 else None


def noise_label(cv: float | None, num_unsteady: int) -> str:
    """quiet (< 1 %), moderate (< 3 %), noisy (< 10 %), very noisy: spread of throughput across repeats."""
    if cv is None:
        label = "unknown (one repeat)"
    else:
        label = "quiet" if cv < 0.01 else "moderate" if cv < 0.03 else "noisy" if cv < 0.10 else "very noisy"
    return label + (f", {num_unsteady} unsteady" if num_unsteady else "")


def axes_of(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    return {axis: rows[0].get(axis) for axis in AXES}


def label_of(rows: Sequence[Mapping[str, Any]]) -> str:
    """The cell's label as its rows recorded it (empty where they did not: rows made in memory without one)."""
    return rows[0].get(col.cell_label) or ""


def failure_verdict(rows: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """The verdict, reason and reason code of a cell without a usable repeat in the candidate."""
    bad = [r for r in rows if r["status"] in BAD_STATUSES]
    if bad:
        return {"verdict": FAILED, "reason": f"{len(bad)} of {len(rows)} repeats {bad[0]['status']}: {bad[0]['reason']}",
                col.reason_code: reasons.CELL_FAILED}
    skipped = [r for r in rows if r["status"] == "skipped"]
    if skipped:
        return {"verdict": SKIPPED, "reason": skipped[0]["reason"] or "skipped", col.reason_code: reasons.CELL_SKIPPED}
    return {"verdict": INSUFFICIENT, "reason": "no repeat with a throughput", col.reason_code: reasons.NO_THROUGHPUT}


def format_diff(diff: Sequence[tuple[str, Any, Any]]) -> str:
    return "; ".join(f"{name}: {a} -> {b}" for name, a, b in diff)


def _keys(rows: Sequence[Mapping[str, Any]]) -> set:
    return {r.get(col.env_key) for r in rows}


def env_difference(cand_rows: Sequence[Mapping[str, Any]], base_rows: Sequence[Mapping[str, Any]],
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
                                   world_size=int(first.get(col.world_size) or 1))
        return format_diff(env_diff(base_env, cand_env, fields=relevant))
    return format_diff(env_diff(base_env, cand_env, fields=ENV_KEY_FIELDS)) or \
        f"env_key {sorted(map(str, base_keys))} -> {sorted(map(str, cand_keys))}"
