"""What the report's tests share: the verdicts.parquet columns of earlier versions (a reader's contract), a run
copied with its throughput scaled, and the checks of a written page (well-formed HTML, its plots' captions and
units, junit.xml's suite)."""

from __future__ import annotations

import html
import io
import json
import re
import shutil
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest
from browser import Browser, chromium_path
from PIL import Image

from harness.results import store
from harness.results.schema import cell_table
from harness.matrix.cells import job_key

VERDICTS_V5_COLUMNS = (
    "cell_id", "backend", "memory_format", "precision", "world_size", "grad_accum", "compile", "verdict", "reason",
    "method",
    "effect_pct", "ci_low_pct", "ci_high_pct", "ci_level", "p_value", "p_adjusted", "decided_by",
    "throughput_p_value", "fast_effect_pct", "fast_ci_low_pct", "fast_ci_high_pct", "fast_p_value",
    "candidate_fast_img_per_s", "baseline_fast_img_per_s", "floor_pct", "fdr_q", "mdc_pct", "repeats_needed", "num_candidate",
    "num_baseline", "candidate_img_per_s", "baseline_img_per_s", "candidate_cv", "baseline_cv", "num_unsteady",
    "noise", "accuracy_verdict", "candidate_top1", "baseline_top1", "top1_change", "top1_ci_low", "top1_ci_high",
    "accuracy_tolerance", "history_median_img_per_s", "history_mad_img_per_s", "robust_z", "num_history_runs",
    "unadjusted_effect_pct", "speed_probe_change_pct", "speed_slope", "fire_drill_pct", "baseline_fire_drill_pct",
    "is_smoke", "env_diff", "candidate_run_id", "baseline_run_id",
)  # fmt: skip
"""verdicts.parquet version 5 (version 4 and `repeats_needed`): a reader's contract, whatever shape CellVerdict
takes."""
VERDICTS_V6_COLUMNS = VERDICTS_V5_COLUMNS + (
    "phase", "phase_change_ms", "phase_change_low_ms", "phase_change_high_ms", "step_change_ms", "attribution")
"""Version 6: version 5 and the phase attribution (issue 29)."""
VERDICTS_V7_COLUMNS = ("cell_id", "model") + VERDICTS_V6_COLUMNS[1:]
"""Version 7: version 6 and the model axis after cell_id (issue 41)."""
_AT = VERDICTS_V7_COLUMNS.index("floor_pct") + 1
VERDICTS_V8_COLUMNS = VERDICTS_V7_COLUMNS[:_AT] + ("floor_source",) + VERDICTS_V7_COLUMNS[_AT:]
"""Version 8: version 7 and floor_source after floor_pct (issue 52)."""


UNMEASURED_LOAD = {"foreign_cpu_frac": None, "steal_frac": None}
"""A constructed side's rows say nothing of the machine's load: what the fixture run's own load was is not what
a test of the report's rendering and verdicts is about (tests/cell/test_interference.py and test_compare.py test
rows taken under interference)."""


def copy_run(src: Path, dst: Path, *, scale: float = 1.0, run_id: str | None = None, extra_rows=(),
             created_at: str | None = None, repeats: int | None = None) -> Path:
    """A copy of a real run whose throughputs (and fast-step rates) are multiplied by `scale` (a constructed
    other side); `repeats` re-deals the real rows into that many repeats per cell, each 0.5 % apart."""
    shutil.copytree(src, dst)
    manifest = store.read_json(dst / "manifest.json")
    manifest["run_id"] = run_id or dst.name
    if created_at:
        manifest["created_at"] = created_at
    store.write_json(dst / "manifest.json", manifest)
    rows = store.read_cells(src).to_pylist()
    if repeats:
        shutil.rmtree(dst / "cells")
        by_cell = {}
        for row in rows:
            by_cell.setdefault(row["cell_id"], []).append(row)
        rates = ("throughput_img_per_s", "fast_step_img_per_s")
        rows = [dict(same[i % len(same)], repeat=i) | {k: same[i % len(same)][k] * (1 + 0.005 * i) for k in rates}
                for same in by_cell.values() for i in range(repeats)]
    for row in [*rows, *extra_rows]:
        for k in ("throughput_img_per_s", "fast_step_img_per_s"):
            if row.get(k):
                row[k] *= scale
        row["run_id"] = manifest["run_id"]
        row |= UNMEASURED_LOAD
        store.write_table(dst / "cells" / f"{job_key(row['cell_id'], row['repeat'])}.parquet", cell_table([row]))
    return dst


class _Checker(HTMLParser):
    """Tag balance, and anything that would reach the network."""

    VOID = {"meta", "br", "img", "input", "link", "hr", "col", "source", "wbr", "area", "base", "embed"}

    def __init__(self):
        super().__init__()
        self.stack, self.problems, self.tags, self.sources = [], [], set(), []

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        for name, value in attrs:
            beside = tag == "script" and name == "src" and value == "plotly.min.js"  # the one file beside the page
            if (name == "src" and not beside) or (name == "href" and not (value or "").startswith("#")) or \
                    (value or "").startswith(("http:", "https:", "//")):  # a link inside the page is fine
                self.problems.append(f"<{tag} {name}={value!r}>")
            self.sources += [value] if beside else []
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.tags.add(tag)

    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1] != tag:
            self.problems.append(f"</{tag}> closes {self.stack[-1:]}")
        else:
            self.stack.pop()


def check_html(path: Path) -> str:
    """A written page: tags balanced, nothing that reaches the network, its charts' one script file beside it."""
    text = path.read_text()
    checker = _Checker()
    checker.feed(text)
    checker.close()
    assert checker.problems == [] and checker.stack == [], (checker.problems, checker.stack)
    assert {"style", "table", "script", "figure"} <= checker.tags  # every script inline but plotly.min.js's
    assert checker.sources == ["plotly.min.js"] and (path.parent / "plotly.min.js").stat().st_size > 1_000_000
    assert "http://" not in text and "https://" not in text and "@import" not in text
    assert "<svg" not in text  # every chart is drawn by the charting library, none by hand
    return text


_CHART = re.compile(r'<figure class="chart" id="([^"]*)-figure">\s*<figcaption>(.*?)</figcaption>\s*'
                    r'<div class="plot"[^>]*></div>\s*<script type="application/json" class="nvbench-figure" '
                    r'data-for="\1">(.*?)</script>.*?(?:<p>(.*?)</p>\s*)?</figure>', flags=re.S)


def charts(text: str) -> dict[str, dict]:
    """Every chart of a page by its id: the plotly figure (data and layout) the page hands the browser."""
    return {m.group(1): json.loads(m.group(3)) for m in _CHART.finditer(text)}


def figures(text: str) -> list[tuple[str, str, str]]:
    """(caption, the chart's axis titles, its note) of every chart of a page."""
    out = []
    for m in _CHART.finditer(text):
        layout = json.loads(m.group(3))["layout"]
        titles = " / ".join(layout.get(a, {}).get("title", {}).get("text", "") for a in ("xaxis", "yaxis"))
        out.append((html.unescape(m.group(2)), titles, html.unescape(m.group(4) or "")))
    return out


def chromium_or_skip() -> str:
    binary = chromium_path()
    if binary is None:
        pytest.skip("no chromium on PATH (README's test command installs Debian's chromium): the report is not "
                    "rendered in a browser")
    return binary


def junit(path: Path) -> ET.Element:
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites"
    return root.find("testsuite")


def first_screen(browser: Browser, page: Path) -> None:
    """At 1280 x 800 an A/B's report shows its heatmap and its regressed cells' chart whole, the chart drawn (its
    screenshot has its point, interval and axis in it); the screenshot is kept beside the page."""
    browser.viewport(1280, 800)
    assert browser.wait("document.querySelector('#chart-regressed[data-ready]') !== null")
    seen = browser.evaluate("""(() => { const r = e => e.getBoundingClientRect().toJSON();
        return {heatmap: r(document.querySelector('.heatmap')), chart: r(document.getElementById('chart-regressed')),
                fold: innerHeight}; })()""")
    assert seen["heatmap"]["bottom"] <= seen["fold"] and seen["chart"]["bottom"] <= seen["fold"], seen
    png = browser.screenshot_png(1280, 800)
    (page.parent / "first-screen.png").write_bytes(png)
    shot, box = Image.open(io.BytesIO(png)).convert("L"), seen["chart"]
    drawn = shot.crop((int(box["left"]) + 240, int(box["top"]) + 5, int(box["right"]) - 20, int(box["bottom"]) - 5))
    assert sum(drawn.histogram()[:200]) > 100, seen  # not a blank box
    browser.viewport(1200, 1400)


MISSION = Path(__file__).resolve().parents[2] / "matrices" / "resnet50.toml"
"""The mission's matrix, whose --smoke shape mission_smoke_like deals rows into."""


def mission_smoke_like(a: Path, dst: Path, *, repeats: int, factor) -> tuple[Path, int]:
    """A run folder shaped as `nvbench run matrices/resnet50.toml --smoke` leaves it on the 2-core CPU machine
    (96 cells: dali-gpu and world size 8 skipped with the runner's own reasons), each cell that runs dealt the
    real rows of A's cell of its loader (synthetic, else pytorch) into `repeats` repeats 0.5 % apart, times
    `factor(index)` (a number, or None: the cell failed). Returns the folder and how many cells ran."""
    from harness.orchestrate.session.capabilities import Capabilities, skip_reason
    from harness.matrix.cells import expand
    from harness.matrix.parse import load_matrix

    shutil.copytree(a, dst)
    shutil.rmtree(dst / "cells")
    manifest = store.read_json(dst / "manifest.json") | {"run_id": dst.name}
    store.write_json(dst / "manifest.json", manifest)
    real = {r["backend"]: r for r in store.read_cells(a).to_pylist()}
    caps = Capabilities(device="cpu", gpu_count=0, cpu_count=2, device_name="CPU")
    ran = 0
    for i, cell in enumerate(expand(load_matrix(MISSION), smoke=True)):
        base = real["synthetic" if cell.backend == "synthetic" else "pytorch"] | dict(cell.axes) | {
            "cell_id": cell.cell_id, "run_id": dst.name} | UNMEASURED_LOAD
        reason = skip_reason(cell, caps)
        scale = None if reason else factor(ran)
        if reason:
            rows = [base | {"repeat": 0, "status": "skipped", "reason": reason, "throughput_img_per_s": None}]
        elif scale is None:
            rows = [base | {"repeat": k, "status": "failed", "reason": "exit code 1: RuntimeError: boom",
                            "throughput_img_per_s": None} for k in range(repeats)]
        else:
            rows = [base | {"repeat": k} | {m: base[m] * scale * (1 + 0.005 * k)
                                             for m in ("throughput_img_per_s", "fast_step_img_per_s")}
                    for k in range(repeats)]
        ran += not reason
        for row in rows:
            store.write_table(dst / "cells" / f"{job_key(row['cell_id'], row['repeat'])}.parquet", cell_table([row]))
    return dst, ran
