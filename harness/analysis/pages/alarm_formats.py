"""Tonight's alarms (harness.analysis.nights.alarms) in the forms CI reads: a section of summary.md that lists the new,
worse, open and acknowledged regressions apart, then every other alarm still open with tonight's reading and
the ones tonight ended (gone or fixed). junit.xml with tonight's alarms is made by ci_formats.render_junit from the
verdicts and the alarms (only a new or worse regression a failure; an open or acknowledged one a skipped test whose
message says so: shown, never a pass)."""

from __future__ import annotations

from harness.analysis.nights.alarms import ACKNOWLEDGED, FIXED, GONE, NEW, OPEN, WORSE, NightAlarms
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
