"""Tonight's alarms (harness.analysis.nights.alarms) in the forms CI reads: a section of summary.md that lists the new,
worse, open and acknowledged regressions apart, then every other alarm still open with tonight's reading and
the ones tonight ended (gone or fixed); and junit.xml where only a new or worse regression is a failure (an
open or acknowledged one is a skipped test whose message says so: shown, never a pass)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from harness.analysis.nights.alarms import ACKNOWLEDGED, FIXED, GONE, NEW, OPEN, WORSE, NightAlarms, Reading
from harness.analysis.pages.wording import esc_md

_TITLES = ((NEW, "New tonight (fail the job)"), (WORSE, "Worse than when they opened (fail the job)"),
           (OPEN, "Still open (alarmed before; not failing again)"),
           (ACKNOWLEDGED, "Acknowledged (accepted changes: shown, not failing)"))


_ENDED = ((GONE, "Gone tonight (tonight's interval wholly above the regression's: closed, recovered but not "
                  "shown equal to the baseline)"),
          (FIXED, "Fixed tonight (the cell unchanged or improved against the baseline: closed)"))


def summary_section(judged: NightAlarms, night: str) -> str:
    """### Regressions: each status its own list, then the alarms open from earlier nights that tonight did not see
    as regressions (with tonight's reading), then the ones tonight ended. "No alarm open" only when none is."""
    lines = ["", f"### Regressions of {esc_md(night)}: new, worse, open, acknowledged", ""]
    if not judged.alarms and not judged.readings:
        return "\n".join(lines + ["None: no confirmed regression tonight, no alarm open.", ""])
    for status, title in _TITLES:
        mine = [a for a in judged.alarms if a.status == status]
        if mine:
            lines += [f"**{title}: {len(mine)}**", ""] + [f"- {esc_md(a.text())}" for a in mine] + [""]
    if judged.kept:
        lines += [f"**Still open, not a regression tonight (neither gone nor fixed): {len(judged.kept)}**", ""]
        lines += [f"- {esc_md(r.text())}" for r in judged.kept] + [""]
    for outcome, title in _ENDED:
        mine = [r for r in judged.closed if r.outcome == outcome]
        if mine:
            lines += [f"**{title}: {len(mine)}**", ""] + [f"- {esc_md(r.text())}" for r in mine] + [""]
    return "\n".join(lines)


def rewrite_junit(data: bytes, judged: NightAlarms) -> bytes:
    """junit.xml with the failure of every regression that does not fail tonight (open, acknowledged) turned into
    <skipped> naming why; every other alarm still open named in its cell's message (a cell that passed, or has
    no test case tonight, becomes a skipped one: an open alarm is never a pass), the ones tonight ended in its
    output; the counts redone."""
    root = ET.fromstring(data)
    quiet = {a.change.cell_id: a for a in judged.alarms if not a.fails}
    loud = {a.change.cell_id: a for a in judged.alarms if a.fails}
    read: dict[str, list[Reading]] = {}
    for r in judged.readings:
        read.setdefault(r.alarm.change.cell_id, []).append(r)
    suites = list(root.iter("testsuite")) or [root]
    for suite in suites:
        for case in suite.iter("testcase"):
            cid = (case.get("name") or "").split(" [FIRE DRILL")[0]
            failure = case.find("failure")
            if failure is not None and cid in quiet:
                case.remove(failure)
                _insert(case, ET.Element("skipped", message=f"{quiet[cid].status}: {quiet[cid].text()}"))
            elif failure is not None and cid in loud:
                failure.set("message", f"{loud[cid].status}: {failure.get('message', '')}")
            for r in read.pop(cid, []):
                _note(case, r)
    for cid, readings in read.items():  # open alarms of cells tonight's report does not judge
        case = ET.SubElement(suites[0], "testcase", classname="nvbench.alarms", name=cid, time="0.000")
        for r in readings:
            _note(case, r)
    for suite in root.iter("testsuite"):
        _recount(suite)
    totals = {k: sum(int(s.get(k) or 0) for s in root.iter("testsuite")) for k in ("tests", "failures", "errors",
                                                                                  "skipped")}
    if root.tag == "testsuites":
        for key, value in totals.items():
            root.set(key, str(value))
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"


def _insert(case: ET.Element, element: ET.Element) -> None:
    """`element` before the case's <system-out>, where JUnit's schema wants it."""
    out = case.find("system-out")
    case.insert(list(case).index(out) if out is not None else len(case), element)


def _note(case: ET.Element, r: Reading) -> None:
    """An alarm tonight did not see as a regression, told in its cell's test case."""
    words = f"{r.outcome}: {r.text()}"
    if r.ends:
        out = case.find("system-out")
        if out is None:
            out = ET.SubElement(case, "system-out")
        out.text = f"{out.text}\n{words}" if out.text else words
        return
    shown = next((case.find(tag) for tag in ("failure", "error", "skipped") if case.find(tag) is not None), None)
    if shown is None:
        _insert(case, ET.Element("skipped", message=words))
    else:
        shown.set("message", f"{words}; {shown.get('message', '')}")


def _recount(suite: ET.Element) -> None:
    cases = list(suite.iter("testcase"))
    suite.set("tests", str(len(cases)))
    for tag, key in (("failure", "failures"), ("error", "errors"), ("skipped", "skipped")):
        suite.set(key, str(sum(case.find(tag) is not None for case in cases)))
