"""Where a user looks: `nvbench report A B --kernels` over two run folders holding profiled repeats, and a
changed cell's verdict line naming its operators in the console's words, summary.md, junit.xml and report.html."""

from __future__ import annotations

import dataclasses
import re
import shutil

import numpy as np
import pytest
import pyarrow.parquet as pq

from browser import Browser, chromium_path
from conftest import nvbench
from report_checks import charts
from harness.analysis.pages import ci_formats, kernel_report
from harness.analysis.pages.report import write_report
from harness.analysis.product.extras import Kernels, attach_kernels, kernel_diffs
from harness.analysis.product.pipeline import make_report
from harness.analysis.judge.verdict import REGRESSION, CellVerdict
from harness.results import kernels, store


def _with_kernels(run, folder, extra_s: float, seed: int):
    """A copy of the finished run `run` with a kernels.parquet: five profiled repeats of its first ok cell, the
    forward's aten::addmm `extra_s` slower."""
    shutil.copytree(run, folder)
    cell = next(r["cell_id"] for r in pq.read_table(run / "cells").to_pylist() if r["status"] == "ok")
    rng, rows = np.random.default_rng(seed), []
    for rep in range(5):
        for phase, op, kernel, s in (("forward", "aten::linear", "aten::addmm", 0.004 + extra_s),
                                     ("forward", "aten::conv2d", "aten::mkldnn_convolution", 0.020),
                                     ("backward", "aten::convolution_backward", "aten::convolution_backward", 0.040)):
            rows.append({"cell_id": cell, "repeat": rep, "rank": 0, "device": "cpu", "phase": phase, "operator": op,
                         "kernel": kernel, "graph_replay": False, "calls_per_step": 1.0,
                         "time_per_step_s": s + rng.normal(0, 1e-4), "profiled_steps": 10, "step_time_s": 0.07})
    store.write_table(folder / kernels.KERNELS_FILE, kernels.kernels_table(rows))
    return folder, cell


def test_report_a_b_kernels_diffs_the_two_folders_and_says_what_it_lacks(shared_cpu_run, tmp_path):
    a, _ = _with_kernels(shared_cpu_run, tmp_path / "a", 0.0, 1)
    b, cell = _with_kernels(shared_cpu_run, tmp_path / "b", 0.003, 2)
    proc = nvbench("report", str(a), str(b), "--kernels", "--out", str(tmp_path / "rep"))
    assert proc.returncode in (0, 3), proc.stdout + proc.stderr
    assert re.search(rf"kernels {cell}: forward \+3\.0 ms: aten::linear \+(2\.9|3\.0)\d ms \[", proc.stderr)
    text = (tmp_path / "rep" / kernel_report.KERNELS_MD).read_text()
    assert "aten::linear" in text and "regression" in text and str(tmp_path / "rep" / "kernels.html") in proc.stdout
    bad = nvbench("report", str(shared_cpu_run), str(b), "--kernels", "--out", str(tmp_path / "rep2"))
    assert bad.returncode == 2 and bad.stderr.strip().endswith("no kernels.parquet (profiled repeats: nvbench ab "
                                                               "--kernels)"), bad.stderr
    assert not (tmp_path / "rep2").exists()


def test_a_changed_cells_line_names_its_operators_everywhere_it_is_shown(shared_cpu_run, tmp_path):
    a, _ = _with_kernels(shared_cpu_run, tmp_path / "a", 0.0, 1)
    b, cell = _with_kernels(shared_cpu_run, tmp_path / "b", 0.003, 2)
    comparison = make_report(b, baseline=a, out_dir=tmp_path / "plain").comparison
    # the timed verdict of a run against its own copy is no change: call it one, to see where the line goes
    comparison = dataclasses.replace(comparison, verdicts=tuple(
        dataclasses.replace(v, verdict=REGRESSION) if v.cell_id == cell else v for v in comparison.verdicts))
    diffs = kernel_diffs(comparison, a, b)
    named = attach_kernels(comparison, diffs)
    changed = next(v for v in named.verdicts if v.cell_id == cell)
    reason = changed.reason
    assert re.search(r"; operators: forward \+3\.0 ms: aten::linear \+(2\.9|3\.0)\d ms", reason)
    assert "explained +3.0 of" in reason
    assert reason.endswith(f"; operators: {changed.operators}")  # its own field, which verdicts.parquet keeps
    assert changed.operators.startswith("forward +3.0 ms: aten::linear")
    assert CellVerdict.from_row(changed.to_row()).operators == changed.operators
    assert {v.operators for v in named.verdicts if v.cell_id != cell} == {None}
    assert "operators: forward" in ci_formats.render_markdown(named)
    assert b"operators: forward" in ci_formats.render_junit(named)
    sections = kernel_report.render_sections(diffs, kernel_report.changed_cells(named))
    page = (write_report(named, tmp_path / "rep", sections={"kernels": sections}).out_dir / "report.html").read_text()
    assert Kernels().sections(named, diffs) == sections  # the extra's sections, as the pipeline places them
    assert page.index(f'id="kernels-{cell}"') < page.index('id="cells"')  # under the headline, above the table
    section = page[page.index(f'id="kernels-{cell}"'):page.index('id="cells"')]
    chart = charts(section)[f"kernels-chart-{cell}"]  # the operators' changes as the chart draws them
    slower = {y: x for trace in chart["data"] if trace["name"] == REGRESSION for x, y in zip(trace["x"], trace["y"])}
    assert slower["forward aten::linear"] == pytest.approx(1e3 * next(
        o.change_s for o in diffs[cell].operators if o.operator == "aten::linear" and o.phase == "forward"))
    assert next(t["marker"]["color"] for t in chart["data"] if t["name"] == REGRESSION) == "#cf222e"  # slower: red
    if chromium_path() is None:
        return  # README's test command installs Debian's chromium; without it the page is not rendered
    with Browser() as browser:
        browser.viewport(1280, 800)
        load = browser.load(tmp_path / "rep" / "report.html")
        assert load.errors == []
        browser.evaluate(f"location.hash = 'kernels-{cell}'")  # where a link to the section lands
        section = f"document.getElementById('kernels-{cell}')"
        assert browser.wait(f"{section}.querySelector('.plot[data-ready]') !== null")
        seen = browser.evaluate(f"""(() => {{
            const box = e => e.getBoundingClientRect(), s = {section}, table = s.querySelector('table');
            const first = table.rows[1], plot = s.querySelector('.plot .main-svg');
            return {{top: box(s).top, table: box(table).bottom, bar: box(plot).bottom, width: box(plot).width,
                     op: first.cells[1].innerText, fold: innerHeight}};
        }})()""")
    # the section's top at the top of the window, its table and its chart whole above the fold
    assert abs(seen["top"]) < 2 and seen["table"] <= seen["fold"] and seen["bar"] <= seen["fold"], seen
    assert seen["op"] == "aten::linear" and seen["width"] > 300, seen
