"""A comparison in the forms CI and a person at a terminal read: summary.md (a pull-request comment or job summary),
junit.xml (a confirmed regression is a failed test), and the console lines of `nvbench report` and `nvbench ab`
(verdict_lines), made to read like `nvbench run`'s summary: a line per cell a person must look at (regressions,
failures, improvements), every other verdict grouped with its count and its commonest reason, fitted to the
terminal's width without cutting a word. Strings are escaped (wording.esc_md, ElementTree) before they are written."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from harness.analysis.judge.verdict import (ACCURACY_BELOW, FAILED, IMPROVEMENT, INCONCLUSIVE, INSUFFICIENT,
                                             NO_BASELINE, NOT_COMPARABLE, REGRESSION, SKIPPED, SUSPECT_IMPROVEMENT,
                                             SUSPECT_REGRESSION, UNCHANGED, VERDICTS, CellVerdict, Comparison)
from harness.analysis.nights.alarms import Alarm, NightAlarms, Reading
from harness.analysis.pages.render import Markup, macro
from harness.analysis.pages.wording import (
    cell_means,
    change_text,
    drill_banner,
    field_scope,
    floor_text,
    headline_words,
    esc_md,
    method_text,
    num_text,
    self_comparison_note,
    sorted_verdicts,
)
from harness.fit import wrap
from harness.results.env import ENV_KEY_FIELDS
from harness.results.schema import SUPERSEDED
from harness.catalogue import col, reasons


# ---------------------------------------------------------------------------------------------
# Markdown


def _md_row(v: CellVerdict) -> str:
    drill = f" (fire drill +{v.fire_drill_pct:g}%)" if v.fire_drill_pct or v.baseline_fire_drill_pct else ""
    return (f"| {esc_md(v.label)}{esc_md(drill)} | **{esc_md(v.verdict)}** | {esc_md(change_text(v))} | "
            f"{esc_md(num_text(v.mdc_pct, '.1f', '%'))} | {esc_md(floor_text(v))} | {esc_md(v.noise or '-')} | "
            f"{esc_md(v.reason)} |")


def render_markdown(comparison: Comparison) -> str:
    cand = comparison.candidate
    head = "| cell | verdict | change [interval] | MDC | floor | noise | reason |\n|---|---|---|---|---|---|---|"
    lines = [f"## nvbench: {esc_md(comparison.title)}", ""]
    if comparison.sides:  # an A/B: both sides named alike
        lines += [f"- {esc_md(side)}" for side in comparison.sides] + [""]
    banner = drill_banner(comparison)
    if banner:
        lines += [f"> **{esc_md(banner)}**", ""]
    regs = comparison.regressions
    gates = len(comparison.broken_gates)
    quiet = " \u2014 no confirmed regression" + (f", but {gates} cell(s) broke a work gate." if gates else ".")
    lines += [f"**{esc_md(headline_words(comparison))}**" + (quiet if not regs else ""), ""]
    lines += [f"- {esc_md(str(n))}" for n in comparison.notes]
    if cand.cost_text():  # where this run's time went, so that the next cut is obvious
        lines += ["", f"Time: {esc_md(cand.cost_text())} (matrix efficiency: measured window s / run wall s)."]
    if comparison.broken_gates:  # a broken gate fails the cell whatever the timing: said before the tables
        lines += ["", "**Work gates broken** (each fails its cell, whatever its timing):", ""]
        lines += [f"- {esc_md(v.label)}: {esc_md(v.work_gate)}" for v in comparison.broken_gates]
    attention = [v for v in sorted_verdicts(comparison)
                 if v.verdict not in (UNCHANGED, NO_BASELINE, INCONCLUSIVE) or v.is_regression or v.work_gate_broken]
    if attention:
        lines += ["", head, *(_md_row(v) for v in attention)]
    busy = [v for v in sorted_verdicts(comparison) if v.busy and not v.is_regression]
    if busy:
        lines += ["", f"**Not judged, the machine was busy: {len(busy)} cell(s)** (fewer than half of a side's "
                      "windows clean; run them again on a quiet machine):", "", head, *(_md_row(v) for v in busy)]
    open_ = [v for v in sorted_verdicts(comparison)
             if v.verdict == INCONCLUSIVE and not v.is_regression and not v.busy]
    if open_:
        lines += ["", f"**Inconclusive: {len(open_)} cell(s) neither shown changed nor shown inside the "
                      f"{comparison.thresholds.floor_pct:g}% floor** (more repeats would likely decide them):", "",
                  head, *(_md_row(v) for v in open_)]
    every = "\n".join([head, *(_md_row(v) for v in sorted_verdicts(comparison))])
    lines += ["", macro("summary.md:all_cells", len(comparison.verdicts), Markup(every))]
    bad = [r for r in cand.rows if r["status"] not in ("ok", SUPERSEDED)]
    if bad:
        lines += ["", "**Failed and skipped:**", ""]
        lines += [f"- {esc_md(r[col.cell_id])} r{r['repeat']}: {esc_md(r['status'])}: {esc_md(r.get('reason'))}"
                  for r in bad]
    lines += _superseded_lines(comparison)
    if comparison.environment_diff:
        lines += ["", "**Environment differences** (baseline -> this run):", ""]
        lines += [f"- {esc_md(name)} (must match for {esc_md(field_scope(name))}): {esc_md(a)} -> {esc_md(b)}"
                  if name in ENV_KEY_FIELDS else f"- {esc_md(name)}: {esc_md(a)} -> {esc_md(b)}"
                  for name, a, b in comparison.environment_diff]
    if comparison.suspects:
        lines += ["", "**Suspects for a confirmation rerun:** " + ", ".join(esc_md(s) for s in comparison.suspects)]
    lines += ["", macro("summary.md:small", Markup(esc_md(method_text(comparison)))), ""]
    return "\n".join(lines)


def _superseded_lines(comparison: Comparison) -> list[str]:
    """The repeats run again after a start transient, both sides, each with its reason."""
    sides = [("B" if comparison.mode == "ab" else "candidate", comparison.candidate)]
    if comparison.baseline is not None:
        sides.append(("A" if comparison.mode == "ab" else "baseline", comparison.baseline))
    items = [f"- {side} {esc_md(r[col.cell_id])} r{r['repeat']}: {esc_md(r.get('reason'))}"
             for side, run in sides for r in run.rows if r["status"] == SUPERSEDED]
    return ["", "**Re-run after a start transient** (kept, not compared):", "", *items] if items else []


# ---------------------------------------------------------------------------------------------
# JUnit XML


_XML_BAD = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _x(value: Any) -> str:
    """ElementTree escapes markup but not characters XML 1.0 forbids (terminal escapes in a log line)."""
    return _XML_BAD.sub("\ufffd", "" if value is None else str(value))


@dataclass
class _Shown:
    """What a test case shows besides its output: a <failure>, <error> or <skipped> with its message."""

    tag: str
    message: str
    type: str = ""
    text: str = ""


def _shown(v: CellVerdict) -> _Shown | None:
    """A confirmed regression or a broken work gate is a failure, a failed cell an error, a cell not decided or not
    judged skipped with its verdict and reason; None: a pass."""
    if v.is_regression:
        what = "throughput" if v.verdict == REGRESSION else "accuracy"
        message = f"{v.verdict}: {change_text(v)}" if v.verdict == REGRESSION else \
            f"top-1 {v.accuracy_verdict}: {v.top1_change:+.4f} [{v.top1_ci_low:+.4f}, {v.top1_ci_high:+.4f}]"
        return _Shown("failure", message, f"{what}-regression", v.reason)
    if v.work_gate_broken:  # counted work, not timing: fails whatever the timing verdict says
        return _Shown("failure", v.work_gate or "", "work-gate", v.reason)
    if v.verdict == FAILED:
        return _Shown("error", v.reason, "cell-failed", v.reason)
    if v.verdict in (INCONCLUSIVE, SKIPPED, NOT_COMPARABLE, INSUFFICIENT, NO_BASELINE):
        return _Shown("skipped", f"{v.verdict}: {v.reason}")
    return None


def _with_alarms(shown: _Shown | None, out: list[str], alarm: Alarm | None,
                 readings: Sequence[Reading]) -> _Shown | None:
    """A cell's case with tonight's alarms told: a regression that does not fail tonight (open, acknowledged) is
    skipped naming why, one that fails says its status; every other alarm of the cell still open is named in the
    message (a pass becomes skipped: an open alarm is never a pass), the ones tonight ended in the output."""
    if shown is not None and shown.tag == "failure" and alarm is not None:
        shown = _Shown("skipped", f"{alarm.status}: {alarm.text()}") if not alarm.fails else \
            _Shown(shown.tag, f"{alarm.status}: {shown.message}", shown.type, shown.text)
    for r in readings:
        words = f"{r.outcome}: {r.text()}"
        if r.ends:
            out.append(words)
        elif shown is None:
            shown = _Shown("skipped", words)
        else:
            shown = _Shown(shown.tag, f"{words}; {shown.message}", shown.type, shown.text)
    return shown


def _case(suite: ET.Element, attrs: dict[str, str], shown: _Shown | None, out: list[str]) -> None:
    case = ET.SubElement(suite, "testcase", **attrs)
    if shown is not None:
        element = ET.SubElement(case, shown.tag, message=_x(shown.message), **({"type": shown.type} if shown.type else {}))
        if shown.text:
            element.text = _x(shown.text)
    if out:
        ET.SubElement(case, "system-out").text = _x("\n".join(out))


def render_junit(comparison: Comparison, alarms: NightAlarms | None = None) -> bytes:
    """One <testcase> per cell, built from its verdict (and tonight's alarms, the nightly's): a confirmed regression
    or a broken work gate is a <failure>, a failed cell an <error>, and cells that were not decided (inconclusive)
    or could not be judged (skipped, not comparable, insufficient data, no baseline) are <skipped> with the verdict
    and its reason as the message: never a pass. With `alarms` (analysis.nights.alarms.judge_night's), a regression
    that does not fail tonight is skipped naming its status, every other open alarm named in its cell's case (one
    of its own where tonight's report has no such cell), the ones tonight ended in the output."""
    cand = comparison.candidate
    suite = ET.Element("testsuite", name=_x(f"nvbench.{cand.run_id}"),
                       timestamp=_x(cand.created_at), hostname=_x(cand.environment.get("hostname") or ""))
    props = ET.SubElement(suite, "properties")
    th = asdict(comparison.thresholds)
    for name, value in [("baseline", comparison.baseline_label), ("mode", comparison.mode),
                        (col.fire_drill_pct, comparison.fire_drill_pct), *th.items()]:
        ET.SubElement(props, "property", name=_x(name), value=_x(value))
    by_cell = {a.change.cell_id: a for a in alarms.alarms} if alarms is not None else {}
    read: dict[str, list[Reading]] = {}
    for r in (alarms.readings if alarms is not None else ()):
        read.setdefault(r.alarm.change.cell_id, []).append(r)
    durations = cell_means(cand.rows, col.duration_s)
    for v in sorted(comparison.verdicts, key=lambda v: v.cell_id):
        drill = f" [FIRE DRILL +{v.fire_drill_pct:g}%]" if v.fire_drill_pct or v.baseline_fire_drill_pct else ""
        out = [f"{v.verdict}: {v.reason}"]
        shown = _with_alarms(_shown(v), out, by_cell.get(v.cell_id), read.pop(v.cell_id, []))
        _case(suite, {"classname": _x(f"nvbench.{v.backend}.{v.precision}"), "name": _x(v.cell_id + drill),
                      "time": f"{durations.get(v.cell_id, 0.0):.3f}"}, shown, out)
    for cid, readings in read.items():  # open alarms of cells tonight's report does not judge
        out: list[str] = []
        _case(suite, {"classname": "nvbench.alarms", "name": _x(cid), "time": "0.000"},
              _with_alarms(None, out, None, readings), out)
    cases = list(suite.iter("testcase"))
    counts = {"tests": len(cases)} | {key: sum(case.find(tag) is not None for case in cases)
                                      for tag, key in (("failure", "failures"), ("error", "errors"),
                                                       ("skipped", "skipped"))}
    for key, value in counts.items():
        suite.set(key, str(value))
    root = ET.Element("testsuites", name="nvbench", **{k: str(v) for k, v in counts.items()})
    root.append(suite)
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"


# ---------------------------------------------------------------------------------------------
# the console

ONE_LINE_EACH = (REGRESSION, SUSPECT_REGRESSION, FAILED, IMPROVEMENT, SUSPECT_IMPROVEMENT)
"""Verdicts listed cell by cell; every other verdict is a group."""

_ROW_REASONS = (reasons.CELL_FAILED, reasons.CELL_SKIPPED)
"""Reason codes whose words are the cell rows' own (why it failed or was skipped): the console groups by them."""
BUSY_GROUP = "busy"
"""The console's group of cells not judged because the machine was busy (CellVerdict.busy)."""


def _why(v: CellVerdict) -> str:
    """The reason without the figures that lead it (CellVerdict.cause), its first line: what cells of one reason
    code share, in words."""
    return (v.cause or "no reason recorded").strip().splitlines()[0]


def _kind(v: CellVerdict) -> tuple[str, str]:
    """What groups a cell with others of its verdict: its reason code, and for a cell not run (failed, skipped)
    the row's own reason as written (its code says only that the cell did not run)."""
    return (v.reason_code, "" if v.reason_code not in _ROW_REASONS else v.cause)


def _single(v: CellVerdict) -> bool:
    return v.verdict in ONE_LINE_EACH or v.is_regression or bool(v.work_gate_broken)


def _cell_line(v: CellVerdict, width: int) -> list[str]:
    word = "regression" if v.is_regression else v.verdict
    word += ", work gate broken" if v.work_gate_broken else ""
    below = "; top-1 below its band" if v.accuracy_verdict == ACCURACY_BELOW else ""
    return wrap(f"{v.reason or '-'}{below}", width, first=f"{word}: {v.label}: ", indent="    ")


def _group_lines(word: str, members: Sequence[CellVerdict], width: int) -> list[str]:
    """'unchanged: 30 cells' and under it how many share the commonest reason, and the reason itself (one
    cell's words, 'e.g.' when the group's numbers differ)."""
    n = len(members)
    cells = f"{n} cell{'s' if n != 1 else ''}"
    head = (f"INCONCLUSIVE: {cells} neither shown changed nor shown unchanged, not a pass" if word == INCONCLUSIVE
            else f"NOT JUDGED: {cells}, the machine was busy, not a pass" if word == BUSY_GROUP
            else f"{word}: {cells}")
    kinds = Counter(_kind(v) for v in members)
    kind, k = kinds.most_common(1)[0]
    whys = [_why(v) for v in members if _kind(v) == kind]
    why = whys[0] if len(set(whys)) == 1 else f"e.g. {whys[0]}"
    share = f"  {k} of {n}" + (" (the commonest reason)" if len(kinds) > 1 else "") + ": "
    return wrap(head, width, indent="  ") + wrap(why, width, first=share, indent="    ")


def verdict_lines(comparison: Comparison, width: int) -> list[str]:
    """The console's verdict lines at `width` columns: the note when a run is compared with itself, a line per
    regression, failed cell and improvement (suspects of a history screen too), then each other verdict in
    the reports' order with its count and commonest reason; a word longer than a line (a path) stays whole."""
    lines = wrap(note, width, indent="  ") if (note := self_comparison_note(comparison)) else []
    singles = [v for v in comparison.verdicts if _single(v)]
    order = {name: i for i, name in enumerate(VERDICTS)}
    for v in sorted(singles, key=lambda v: (not v.is_regression, order.get(v.verdict, 99), v.cell_id)):
        lines += _cell_line(v, width)
    for word in VERDICTS:
        members = [v for v in comparison.verdicts if v.verdict == word and not _single(v) and not v.busy]
        if members:
            lines += _group_lines(word, members, width)
    if busy := [v for v in comparison.verdicts if v.busy and not _single(v)]:
        lines += _group_lines(BUSY_GROUP, busy, width)
    return lines
