"""A comparison (harness.analysis.judge.compare) rendered and written as report.html (templates/page.html with its
sections from templates/report_sections.html, cells.html, heatmap.html and work.html; its charts plotly.js figures
drawn by the plotly.min.js written beside it: no network, no server), summary.md, junit.xml and verdicts.parquet; this
module hands each section its data and writes every file together (loading, comparing and the extras:
analysis.product.pipeline). No statistics here:
every number comes from compare or the rows; no markup here: the templates hold it.

Every string that comes from results or matrices is escaped before it is written: by the templates' autoescaping and
their `esc` filter (pages.render), ElementTree for XML and wording.esc_md for Markdown.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping, Sequence

from harness.analysis.pages import ci_formats, heatmap
from harness.analysis.load import verdicts_file
from harness.analysis.judge.verdict import (
    ACCURACY_BELOW,
    FAILED,
    IMPROVEMENT,
    INCONCLUSIVE,
    INSUFFICIENT,
    NOT_COMPARABLE,
    REGRESSION,
    SKIPPED,
    SUSPECT_IMPROVEMENT,
    SUSPECT_REGRESSION,
    Comparison,
    metric_change_text,
)
from harness.analysis.load.step_times import StepSeries, load_steps
from harness.analysis.pages.charts import (
    accuracy_chart,
    bar_chart,
    change_chart,
    step_details,
    throughput_charts,
)
from harness.analysis.pages.render import Markup, place_assets, macro, render, text
from harness.analysis.pages.report_table import render_table, row_anchors
from harness.analysis.pages.wording import (
    cell_labels,
    cell_means,
    drill_banner,
    field_scope,
    human_time,
    method_text,
    num_text,
    self_comparison_note,
)
from harness.results import store
from harness.results.schema import SUPERSEDED
from harness.catalogue.cells import row_label
from harness.catalogue import col
from harness.results.env import short_commit

REPORT_FILES = ("report.html", "summary.md", "verdicts.parquet", "junit.xml")


@dataclass(frozen=True, slots=True, kw_only=True)
class ReportResult:
    out_dir: Path
    files: tuple[Path, ...]
    comparison: Comparison
    lines: tuple[str, ...] = ()
    """What the extras say on stderr (analysis.product.pipeline): their warnings and their top lines."""


# ---------------------------------------------------------------------------------------------
# the writer: every file rendered, then written together


EXTRA_SLOTS = ("work", "kernels")
"""Where the extras' sections go on report.html, in order, under the headline (analysis.product.extras)."""


def write_report(comparison: Comparison, out_dir: Path, *, sections: Mapping[str, Markup] | None = None,
                 extra_files: Mapping[Path, bytes] | None = None) -> ReportResult:
    """Render every file first, then write them together, the extras' files (kernels.md, ...) with them: a report is
    never half new, half old. `sections`: each extra's sections of report.html by its name (EXTRA_SLOTS)."""
    steps = load_steps(Path(comparison.candidate.path)) if Path(comparison.candidate.path).is_dir() else {}
    shown = [(sections or {}).get(name, Markup("")) for name in EXTRA_SLOTS]
    contents = [render_html(comparison, steps, shown).encode(), ci_formats.render_markdown(comparison).encode(),
                store.table_bytes(verdicts_file.verdict_table(comparison)), ci_formats.render_junit(comparison)]
    files = [out_dir / name for name in REPORT_FILES]
    if comparison.mode == "history":
        files.append(out_dir / "suspects.json")
        contents.append((json.dumps(suspects(comparison), indent=2, sort_keys=True, default=str) + "\n").encode())
    written = dict(zip(files, contents)) | dict(extra_files or {})
    files += [f for f in (extra_files or {}) if f not in files]
    place_assets(out_dir)
    store.write_all(written)
    if comparison.mode != "history":  # a history screen's suspects must not outlive it in this folder
        (out_dir / "suspects.json").unlink(missing_ok=True)
    return ReportResult(out_dir=out_dir, files=tuple(files), comparison=comparison)


def suspects(comparison: Comparison) -> list[dict[str, Any]]:
    """History mode: what a confirmation rerun should target, with the `--only` filters that select it."""
    out = []
    for v in comparison.verdicts:
        if v.cell_id in comparison.suspects:
            out.append({col.cell_id: v.cell_id, "verdict": v.verdict, col.effect_pct: v.throughput.effect_pct,
                        col.robust_z: v.robust_z, "only": v.axis_filters()})
    return out


# ---------------------------------------------------------------------------------------------
# the HTML page


def _cards(comparison: Comparison) -> Markup:
    kinds = {REGRESSION: "bad", FAILED: "bad", SUSPECT_REGRESSION: "bad", IMPROVEMENT: "good",
             SUSPECT_IMPROVEMENT: "good", NOT_COMPARABLE: "warn", INSUFFICIENT: "warn", INCONCLUSIVE: "warn"}
    cards = [(kinds.get(name, ""), n, name) for name, n in comparison.counts().items()]
    acc = sum(v.accuracy_verdict == ACCURACY_BELOW for v in comparison.verdicts)
    if acc:
        cards.append(("bad", acc, "accuracy below band"))
    itself = self_comparison_note(comparison)
    regressed = [v.cell_id for v in comparison.verdicts if v.verdict in (REGRESSION, SUSPECT_REGRESSION)]
    chart = change_chart(comparison, regressed, chart_id="chart-regressed",
                         caption="What regressed, with intervals") if regressed else None
    return macro("report_sections.html:headline", {
        "cards": cards, "sides": list(comparison.sides), "baseline_label": comparison.baseline_label,
        "notes": [*comparison.notes, *([itself] if itself else [])], "chart": chart})


SETUP_ROWS = (("device", None), ("driver", "driver_version"), ("CUDA", "cuda_runtime"), ("cuDNN", "cudnn_version"),
              ("torch", "torch_version"), ("DALI", "dali_version"), ("nvbench", None))
"""The setup table's rows: what each side ran on, in words (None: composed from several fields)."""


def _device(env: Mapping[str, Any]) -> str:
    if env.get("gpu_name"):
        count = env.get("gpu_count") or 1
        return f"{env['gpu_name']}" + (f" x{count}" if count != 1 else "")
    cores = f", {env['cpu_count']} cores" if env.get("cpu_count") else ""
    return f"CPU: {env.get('cpu_model') or '?'}{cores}"


def _setup_value(env: Mapping[str, Any] | None, name: str, field_: str | None) -> str:
    if env is None:
        return "-"
    if name == "device":
        return _device(env)
    if name == "nvbench":
        sha = env.get("nvbench_git_sha")
        dirty = " (uncommitted changes)" if env.get("nvbench_git_dirty") else ""
        return f"{env.get(col.nvbench_version) or '?'} git {short_commit(sha) if sha else 'not recorded'}{dirty}"
    return "-" if env.get(field_) is None else str(env[field_])


def _setup(comparison: Comparison) -> Markup:
    """Both sides' device, driver, CUDA, cuDNN, torch, DALI and git revision, and the matrix efficiency where
    the run's manifest records it: a table folded under one line (the page's first screen is the verdicts)."""
    sides = [("this run", comparison.candidate.environment, comparison.candidate.matrix_efficiency)]
    if comparison.baseline_environment is not None:
        base = comparison.baseline
        sides.append(("baseline", comparison.baseline_environment, base.matrix_efficiency if base else None))
    values = [[_setup_value(env, name, field_) for _, env, _ in sides] for name, field_ in SETUP_ROWS]
    efficiency: list[str] = []
    cuts: list[str] = []
    if any(eff is not None for _, _, eff in sides):
        efficiency = [num_text(eff, ".2f") for _, _, eff in sides]
        runs = [comparison.candidate] + ([comparison.baseline] if len(sides) > 1 else [])
        cuts = [(run.cut_text() if run else None) or "-" for run in runs]
    # folded under the heatmap: one line says where this run ran and whether the baseline ran alike
    same = "" if len(sides) == 1 else "; the baseline the same" if all(len(set(row)) == 1 for row in values) \
        else "; the baseline differs"
    this = {name: row[0] for (name, _), row in zip(SETUP_ROWS, values)}
    return macro("report_sections.html:setup", {
        "where": f"{this['device']} \u00b7 torch {this['torch']}{same}", "sides": [name for name, _, _ in sides],
        "rows": [(name, row) for (name, _), row in zip(SETUP_ROWS, values)], "efficiency": efficiency, "cuts": cuts})


def _environment(comparison: Comparison) -> Markup:
    return macro("report_sections.html:environment", {
        "has_baseline": comparison.baseline_environment is not None,
        "diff": [(name, field_scope(name), a, b) for name, a, b in comparison.environment_diff],
        "fields": list(comparison.candidate.environment.items())})


def _repeat(r: Mapping[str, Any], **more: Any) -> dict[str, Any]:
    """A row of a repeat that did not count, as the failures' tables show it."""
    return {col.cell_id: r[col.cell_id], "label": row_label(r), "repeat": r["repeat"],
            "reason": r.get("reason"), **more}


def _failures(comparison: Comparison) -> Markup:
    """Every repeat that did not finish, with its reason and log; skipped cells are counted here and listed by
    reason under the cell table; the repeats an A/B ran again because their window opened in a start transient
    (kept, never compared)."""
    bad = sorted((r for r in comparison.candidate.rows if r["status"] not in ("ok", "skipped", SUPERSEDED)),
                 key=lambda r: (r[col.cell_id], r["repeat"]))
    runs = [("B" if comparison.mode == "ab" else "candidate", comparison.candidate)]
    if comparison.baseline is not None:
        runs.append(("A" if comparison.mode == "ab" else "baseline", comparison.baseline))
    return macro("report_sections.html:failures", {
        "failed": [_repeat(r, status=r["status"], log=r.get(col.log_path) or "-") for r in bad],
        "skipped": sum(v.verdict == SKIPPED for v in comparison.verdicts),
        "superseded": [_repeat(r, side=side) for side, run in runs for r in run.rows if r["status"] == SUPERSEDED]})


def _heatmap(comparison: Comparison) -> Markup:
    rates = {v.cell_id: v.throughput.candidate_value for v in comparison.verdicts
             if v.throughput.candidate_value is not None}
    rates = cell_means(comparison.candidate.rows, col.throughput_img_per_s) | rates
    return heatmap.render(comparison, rates=rates, row_anchor=row_anchors(comparison), change=metric_change_text)


def page_values(title: str, subtitle: str, method: str, *, css: Sequence[str] = ("report.css",),
                scripts: Sequence[str] = (), charts: bool = True) -> dict[str, Any]:
    """What base.html needs of every page: the plain words (escaped there) and this package's style and scripts
    (templates/, as they are); `charts`: the page draws plotly charts (charts.js and plotly.min.js beside it)."""
    return {"title": title, "subtitle": subtitle, "method": method, "charts": charts,
            "css": Markup("\n".join(text(name) for name in css)),
            "scripts": [Markup(text(name)) for name in (*scripts, *(("charts.js",) if charts else ()))]}


def render_html(comparison: Comparison, steps: Mapping[str, Sequence[StepSeries]] | None = None,
                extra_sections: Sequence[Markup] = (Markup(""), Markup(""))) -> str:
    """The report page; `steps` (load_steps of the candidate) gives each cell its step-time plot; `extra_sections`
    the extras' sections under the headline, one a slot of EXTRA_SLOTS."""
    cand = comparison.candidate
    banner = drill_banner(comparison)
    charts = [change_chart(comparison), *throughput_charts(comparison), accuracy_chart(comparison),
             bar_chart(comparison, col.exposed_data_wait_frac, "Exposed data wait",
                      "% of the window the GPU waited for data",
                      "The time the training stream sat idle waiting for a batch (CUDA events around each fetch; "
                      "on CPU the host's wait), over the window. Lower is better; good: 0, the loader never stalled "
                      "the GPU. The host's own time in next() (host_data_wait_frac) overlaps queued GPU work and is "
                      "not shown here.", percent=True, at_least=0.05),
             bar_chart(comparison, col.loader_efficiency, "Loader efficiency", "throughput / synthetic twin (ratio)",
                      "Real-data cells with a synthetic twin: their throughput over the twin's. Higher is better; "
                      "good: 1.0, the loader keeps up with the compute.")]
    env = cand.environment
    subtitle = (f"{comparison.title} \u00b7 created {human_time(cand.created_at)} \u00b7 "
                f"host {env.get('hostname') or '?'}")
    return render("page.html", **page_values(
        f"nvbench report: {cand.run_id}", subtitle,
        f"{method_text(comparison)} Written {human_time(datetime.now(timezone.utc).isoformat())}.",
        scripts=("report.js",)), banner=banner, sections=[
        ("headline", "Headline", _cards(comparison)),
        *(("", "", section) for section in extra_sections),
        ("matrix", "The matrix at a glance", _heatmap(comparison)),
        ("setup", "", _setup(comparison)),
        ("cells", "Cells, sorted by effect", render_table(comparison)),
        ("plots", "Plots", macro("plots", charts)),
        ("steps", "Step times, cell by cell", step_details(steps or {}, cell_labels(comparison.candidate.rows))),
        ("environment", "Environment differences", _environment(comparison)),
        ("failures", "Failed and skipped cells", _failures(comparison))])
