"""`nvbench report` on real tiny runs: a self-contained HTML page, Markdown, JUnit and Parquet that
independent readers accept, escaping of every result string, exit codes, fire drills and history."""

from __future__ import annotations

import html
import json
import math
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from browser import Browser, chromium_path
from conftest import TINY, constructed_quiet, nvbench, own_cores
from report_checks import (
    VERDICTS_V7_COLUMNS, charts, check_html, chromium_or_skip, copy_run, figures, first_screen, junit, mission_smoke_like)

from harness.analysis.judge import compare
from harness.analysis.pages import report, wording
from harness.analysis.product import pipeline
from harness.catalogue.verdicts import VERDICTS_VERSION
from harness.analysis.load import verdicts_file
from harness.analysis.load.runs import load_run
from harness.analysis.judge.verdict import DEFAULT_FLOOR_PCT, Thresholds
from harness.commands.common import EXIT_INCONCLUSIVE, print_report
from harness.results import store
from harness.results.accuracy import top1_text

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _matrix(folder: Path, name: str, axes: str, repeats: int) -> Path:
    path = folder / f"{name}.toml"
    path.write_text(TINY.format(axes=axes, repeats=repeats, timeout=120, cache=folder / "cache", nvtx="false",
                                device="cpu"))
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A: a real run (synthetic + pytorch, one repeat each); D: a real fire drill (+900 %) of the synthetic
    cell. Tests that need more repeats deal A's real rows into them (copy_run)."""
    root = tmp_path_factory.mktemp("report")
    both = _matrix(root, "both", 'backend = ["synthetic", "pytorch"]', repeats=1)
    one = _matrix(root, "one", 'backend = ["synthetic"]', repeats=1)
    a, d = root / "A", root / "D"
    cores = own_cores(2)  # two run folders, one core each: half the wall time; one after the other on one core
    # the reports' subject is what a report says of its rows, not this machine's neighbours: the runs see it quiet
    with constructed_quiet(root) as quiet, ThreadPoolExecutor(2 if cores else 1) as pool:
        runs = [pool.submit(nvbench, "run", str(both), "--out", "A", "--no-progress", cwd=root,
                            env={"COLUMNS": "80"} | quiet, cores=cores and cores[0]),
                pool.submit(nvbench, "run", str(one), "--out", str(d), "--quiet", "--fire-drill", "900",
                            env=quiet, cores=cores and cores[1])]
        for proc in (r.result() for r in runs):
            assert proc.returncode == 0, proc.stdout + proc.stderr
    (root / "A.stdout").write_text(runs[0].result().stdout)  # the summary `nvbench run` printed, for its test
    (root / "A.stderr").write_text(runs[0].result().stderr)  # and its progress
    (root / "D.out").write_text(runs[1].result().stdout + "\0" + runs[1].result().stderr)  # --quiet
    return root, a, d


def test_a_run_ends_with_a_summary_that_fits_80_columns(runs):
    root, a, _ = runs
    stdout, stderr = (root / "A.stdout").read_text(), (root / "A.stderr").read_text()
    assert stdout.startswith("ran: 2 cells") and "ran: " not in stderr  # results on stdout, progress on stderr
    assert "run folder: A" in stderr and " ok synthetic_nchw_fp32_ws1_ga1" in " ".join(stderr.split())
    summary = stdout.splitlines()
    assert max(map(len, summary)) <= 80
    lines = {line.split()[0]: line.split() for line in summary if line.startswith(("synthetic_", "pytorch_"))}
    rows = {r["backend"]: r for r in store.read_cells(a).to_pylist()}
    for backend, row in rows.items():  # the label, then the row's figures as the run wrote them
        # the label column gives way (cut with an ellipsis) when a one-repeat interval is wide: its start names it
        parts = next(v for k, v in lines.items() if f"{backend}_nchw_fp32_ws1_ga1".startswith(k.rstrip("…")))
        label, img_s, interval, top1, wait, status = *parts[:3], " ".join(parts[3:-2]), *parts[-2:]
        assert float(img_s) == pytest.approx(row["throughput_img_per_s"], abs=0.051) and status == "ok"
        half = (row["throughput_ci_high_img_per_s"] - row["throughput_ci_low_img_per_s"]) / 2
        # three steps may leave the interval unbounded above: the summary then shows none
        assert interval == (f"±{100 * half / row['throughput_img_per_s']:.1f}%" if math.isfinite(half) else "-")
        assert top1 == top1_text([row], short=True)  # "n/a: N img" below 100 validation images, never 0.000
        assert wait == f"{row['exposed_data_wait_frac']:.1%}"
    assert summary[-3:] == ["2 rows: 2 ok", "results: A", "next:    nvbench report A"]
    quiet_out, quiet_err = (root / "D.out").read_text().split("\0")  # --quiet: the summary alone
    assert "results: " in quiet_out and "run folder:" not in quiet_err and " ok " not in quiet_err


@pytest.mark.documented("nvbench report reports/<run_id> --baseline reports/baselines/current --fail-on-regression",
                        bound_s=180)
def test_report_of_a_run_against_itself(runs, documented_run):
    root, a, _ = runs
    out = root / "self"
    proc = documented_run(["report", str(a), "--baseline", str(a), "--out", str(out), "--fail-on-regression"])
    assert proc.returncode == 3, proc.stderr  # nothing regressed, nothing was shown unchanged either
    files = len(report.REPORT_FILES)
    assert proc.stdout.splitlines()[:files] == [str(out / name) for name in report.REPORT_FILES]
    # the verdict lines follow on stdout (where `> log` keeps them); the warning stays on stderr
    assert proc.stdout.splitlines()[files] == "A vs run A: 2 inconclusive"  # one repeat a side
    assert proc.stderr.startswith("warning: 2 cell(s) have fewer usable repeats than a permutation test needs")
    # the console groups the cells as `nvbench run` does, and says the run was compared with itself
    assert "\nnote: this run is compared with itself (the same folder): no cell can change" in proc.stdout
    assert "\nINCONCLUSIVE: 2 cells neither shown changed nor shown unchanged, not a pass\n  2 of 2: " in proc.stdout
    assert "needs ~5 repeats a side" in proc.stdout and "\ninconclusive: " not in proc.stdout
    html_text = check_html(out / "report.html")
    for heading in ("Headline", "Cells, sorted by effect", "Change vs baseline", "Throughput by backend",
                    "Top-1 accuracy", "Exposed data wait", "Loader efficiency", "Environment differences",
                    "Failed and skipped cells"):
        assert heading in html_text, heading
    assert "None: both sides ran in the same recorded environment." in html_text
    created = json.loads((a / "manifest.json").read_text())["created_at"]  # microseconds and all
    assert f"created {wording.human_time(created)} \u00b7" in html_text and created not in html_text
    assert wording.human_time("2026-11-27T04:25:38.123456+00:00") == "2026-11-27 04:25 UTC"
    assert wording.human_time("2026-11-27T05:25:38.5+01:00") == "2026-11-27 04:25 UTC"
    assert wording.human_time(None) == "?"
    assert "<p>note: this run is compared with itself (the same folder)" in html_text
    md = (out / "summary.md").read_text()
    assert md.startswith("## nvbench: A vs run A") and "no confirmed regression" in md
    suite = junit(out / "junit.xml")
    assert [suite.get(k) for k in ("tests", "failures", "errors", "skipped")] == ["2", "0", "0", "2"]
    table = pq.read_table(out / "verdicts.parquet")
    assert table.schema.metadata[b"nvbench.verdicts_version"] == str(VERDICTS_VERSION).encode()
    assert set(VERDICTS_V7_COLUMNS) <= set(table.column_names)  # a reader of version 7 finds every column
    assert set(table.column_names) - set(VERDICTS_V7_COLUMNS) == {
        "floor_source", "throughput_verdict", "fast_verdict", "energy_verdict", "energy_effect_pct", "energy_ci_low_pct",
        "energy_ci_high_pct", "energy_p_value", "candidate_img_per_joule", "baseline_img_per_joule", "work",
        "work_changed", "work_gate", "busy", "operators", "reason_code", "reason_figure", "floor_kind", "work_gate_broken",
        "cell_label"}
    assert {(r["cell_label"], r["reason_code"]) for r in table.to_pylist()} == {  # the labels the rows recorded
        ("synthetic_nchw_fp32_ws1_ga1", "cannot_reach"), ("pytorch_nchw_fp32_ws1_ga1", "cannot_reach")}
    # every column says its unit and meaning to a reader of the file alone (DuckDB, pandas, nvbench columns)
    assert [f.name for f in pq.read_schema(out / "verdicts.parquet") if b"unit" not in (f.metadata or {})
            or not f.metadata.get(b"doc")] == []
    assert {(r["compile"], r["model"]) for r in table.to_pylist()} == {("eager", "resnet18")}  # every axis
    assert {(r["floor_pct"], r["floor_source"]) for r in table.to_pylist()} == {(3.0, "default")}
    thresholds = json.loads(table.schema.metadata[b"nvbench.thresholds"])
    assert thresholds["min_repeats"] == 5 and thresholds["speed_adjust"] is True
    plain = root / "plain"
    proc = nvbench("report", str(a), "--baseline", str(a), "--out", str(plain), "--no-speed-adjust")
    assert proc.returncode == 0, proc.stderr
    meta = pq.read_table(plain / "verdicts.parquet").schema.metadata
    assert json.loads(meta[b"nvbench.thresholds"])["speed_adjust"] is False
    rows = table.to_pylist()
    assert [r["verdict"] for r in rows] == ["inconclusive"] * 2 and [r["repeats_needed"] for r in rows] == [5, 5]
    pytorch = next(r for r in rows if r["backend"] == "pytorch")
    # the tiny cell validates on 4 images: its top-1 is noise, not judged (and the report says "n/a: 4 images")
    assert pytorch["candidate_top1"] is None and pytorch["accuracy_verdict"] == "n/a"
    assert "n/a: 4 images" in (out / "report.html").read_text()
    # The same real rows dealt into 6 repeats a side: enough to judge, and nothing changed.
    six = copy_run(a, root / "six", repeats=6)
    result = pipeline.make_report(six, baseline=six, out_dir=root / "six-report")
    assert {v.verdict for v in result.comparison.verdicts} == {"unchanged"}
    assert all(v.throughput.effect_pct == pytest.approx(0.0, abs=1e-9) for v in result.comparison.verdicts)
    assert all(v.fast_step.effect_pct == pytest.approx(0.0, abs=1e-9) for v in result.comparison.verdicts)
    check_html(result.out_dir / "report.html")
    assert verdicts_file.read_verdicts(result.out_dir / "verdicts.parquet") == list(result.comparison.verdicts)
    # another folder holding the same run id is the run itself too; a different run is not
    again = copy_run(a, root / "again", run_id="A")
    note = wording.self_comparison_note(compare.compare_runs(load_run(a), load_run(again)))
    assert note.startswith("note: this run is compared with itself (the same run id A)")
    assert wording.self_comparison_note(compare.compare_runs(load_run(six), load_run(a))) is None


def test_a_confirmed_regression_fails_junit_and_the_exit_code(runs):
    root, a, _ = runs
    cand = copy_run(a, root / "cand6", repeats=6)
    faster = copy_run(a, root / "faster", scale=10.0, repeats=6)  # 10x faster baseline: certain under any noise
    out = root / "regressed"
    args = ("report", str(cand), "--baseline", str(faster), "--out", str(out))
    proc = nvbench(*args, "--fail-on-regression")
    assert proc.returncode == 1, proc.stderr
    assert "\nregression: synthetic_nchw_fp32_ws1_ga1: throughput -90.0% [" in proc.stdout  # a line per cell
    assert "compared with itself" not in proc.stdout
    assert nvbench(*args).returncode == 0  # without the flag a regression is reported, not fatal
    suite = junit(out / "junit.xml")
    assert suite.get("failures") == "2"
    failure = suite.find("testcase/failure")
    assert failure.get("type") == "throughput-regression" and failure.get("message").startswith("regression: -90.0% [")
    md = (out / "summary.md").read_text()
    assert "**2 regressions**" in md and "| **regression** | -90.0% \\[" in md
    rows = pq.read_table(out / "verdicts.parquet").to_pylist()
    assert {r["verdict"] for r in rows} == {"regression"}
    assert all(r["ci_high_pct"] < 0 and r["floor_pct"] == DEFAULT_FLOOR_PCT for r in rows)
    # both metrics were tested on the real rows' fast-step rates, and both fell by the constructed 90 %
    assert all(r["fast_effect_pct"] == pytest.approx(-90.0, abs=0.5) and r["fast_ci_high_pct"] < 0 for r in rows)
    assert all(r["decided_by"] in ("throughput", "fast steps") for r in rows)
    assert "; fast steps -90.0% \\[" in md


def test_bad_input_exits_2(runs, tmp_path):
    _, a, _ = runs
    proc = nvbench("report", str(tmp_path / "nothing"), "--baseline", str(tmp_path))
    assert proc.returncode == 2
    assert proc.stderr.count("not an nvbench run folder") == 2  # both problems, reported together
    proc = nvbench("report", str(a), "--floor", "-1", "--out", str(tmp_path / "r"))
    assert proc.returncode == 2 and "floor_pct=-1.0: must be in [0, 100)" in proc.stderr
    assert not (tmp_path / "r").exists()
    matrix = _matrix(tmp_path, "m", 'backend = ["synthetic"]', repeats=1)
    proc = nvbench("run", str(matrix), "--fire-drill", "0", "--out", str(tmp_path / "run"))
    assert proc.returncode == 2 and "--fire-drill 0: must be a percentage in (0, 1000]" in proc.stderr
    proc = nvbench("run", "--resume", str(a), "--fire-drill", "5")
    assert proc.returncode == 2 and "--resume takes the run folder alone" in proc.stderr
    assert not (tmp_path / "run").exists()


def test_every_string_from_results_is_escaped(runs):
    root, a, _ = runs
    evil = "<script>window.pwned = 'reason'</script> | `rm` *bold* & \x1b[31m"
    row = store.read_cells(a).to_pylist()[0] | {
        "cell_id": "synthetic_nchw_fp32_ws1_ga9_<b>x&y", "repeat": 0, "status": "failed", "reason": evil,
        "throughput_img_per_s": None}
    hostile = copy_run(a, root / "hostile", extra_rows=[row])
    manifest = store.read_json(hostile / "manifest.json")
    manifest["environment"]["hostname"] = "<img src=x onerror=\"window.pwned = 'host'\">"
    store.write_json(hostile / "manifest.json", manifest)
    result = pipeline.make_report(hostile, baseline=a, out_dir=root / "hostile-report",
                                thresholds=Thresholds(min_repeats=2))
    text = check_html(result.out_dir / "report.html")
    scripts = re.findall(r"<script[^>]*>", text)  # the page's own: plotly, its two scripts and each chart's data
    assert scripts.count("<script>") == 2 and scripts.count('<script src="plotly.min.js">') == 1
    data = '<script type="application/json" class="nvbench-figure" data-for="'  # JSON, never run
    assert [s for s in scripts if s not in ("<script>", '<script src="plotly.min.js">') and not s.startswith(data)] == []
    assert "&lt;script&gt;window.pwned = &#x27;reason&#x27;&lt;/script&gt;" in text
    assert "<b>x" not in text and "&lt;b&gt;x&amp;y" in text and "<img" not in text
    if chromium_path() is not None:  # inert in a browser too: nothing the results carried ran
        with Browser() as browser:
            assert browser.load(result.out_dir / "report.html").errors == []
            assert browser.evaluate("typeof window.pwned") == "undefined"
    suite = junit(result.out_dir / "junit.xml")  # parses: markup escaped, the terminal escape replaced
    error = suite.find("testcase/error")
    assert error.get("type") == "cell-failed" and "<script>" in error.get("message")
    md = (result.out_dir / "summary.md").read_text()
    assert "&lt;script&gt;" in md and "\\| \\`rm\\` \\*bold\\*" in md and "<script>" not in md


def test_fire_drill_rows_are_flagged_and_the_report_says_so(runs):
    root, a, d = runs
    (row,) = store.read_cells(d).to_pylist()
    assert row["fire_drill_pct"] == 900.0 and row["status"] == "ok"
    assert all(r["fire_drill_pct"] == 0.0 for r in store.read_cells(a).to_pylist())
    assert store.read_json(d / "plan.json")["fire_drill_pct"] == 900.0
    assert "fire drill: +900%" in (d / row["log_path"]).read_text()
    steps, plain = store.read_steps(d).to_pandas(), store.read_steps(a).to_pandas()
    plain = plain[(plain.cell_id == row["cell_id"]) & ~plain.is_warmup]  # the same cell, run beside it undrilled
    measured = steps[~steps.is_warmup].step_time_s.median()
    # 10x the work; generous for noise. (Not against the drill's own warmup: a first step's one-time set-up
    # made it as slow as 0.4 s on the shared box.)
    assert measured > 3 * plain.step_time_s.median()
    result = pipeline.make_report(d, baseline=a, out_dir=root / "drill-report")
    text = check_html(result.out_dir / "report.html")
    assert 'class="banner">FIRE DRILL: 1 cell(s) ran with calibrated extra work (up to +900% per step' in text
    (v,) = result.comparison.verdicts
    assert v.fire_drill_pct == 900.0 and v.reason.startswith("FIRE DRILL (candidate +900%, baseline +0%")
    assert "[FIRE DRILL +900%]" in junit(result.out_dir / "junit.xml").find("testcase").get("name")
    assert "> **FIRE DRILL" in (result.out_dir / "summary.md").read_text()


def test_cpu_fire_drill_adds_its_share_of_each_step():
    import time

    import torch

    from harness.cell.faults import FireDrill

    drill = FireDrill(torch.device("cpu"), 20.0, np.array([]))  # CPU needs no warm-up calibration
    own = extra = 0.0
    for _ in range(10):
        drill.begin()
        time.sleep(0.03)  # the step's own work
        end = time.perf_counter()
        drill()
        own, extra = own + end - drill._t0, extra + time.perf_counter() - end
    # +20 % of the steps' own time over the window; an overrun of the last matmul is owed back
    assert extra / own == pytest.approx(0.2, abs=0.04)


@pytest.mark.documented("nvbench report reports/<run_id> --history reports/history", bound_s=180)
def test_history_screening_names_suspects_but_does_not_fail(runs, documented_run):
    root, a, _ = runs
    hist = root / "history"
    hist.mkdir()
    for i, scale in enumerate(np.linspace(0.99, 1.01, 6)):
        copy_run(a, hist / f"past{i}", scale=float(scale), created_at=f"2026-01-0{i + 1}T00:00:00+00:00")
    slow = copy_run(a, root / "slow", scale=0.7)
    out = root / "history-report"
    proc = documented_run(["report", str(slow), "--history", str(hist), "--out", str(out), "--fail-on-regression"])
    assert proc.returncode == 0, proc.stderr  # suspects are not confirmed regressions
    assert "2 suspect regressions" in proc.stdout
    suspects = json.loads((out / "suspects.json").read_text())
    assert {s["verdict"] for s in suspects} == {"suspect regression"}
    assert {tuple(s["only"][:2]) for s in suspects} == {("model=resnet18", "backend=synthetic"),
                                                         ("model=resnet18", "backend=pytorch")}  # AXES' order
    assert all("compile=eager" in s["only"] for s in suspects)  # the rerun targets this compile mode only
    check_html(out / "report.html")
    rows = pq.read_table(out / "verdicts.parquet").to_pylist()
    assert all(r["num_history_runs"] == 6 and r["effect_pct"] == pytest.approx(-30.0, abs=0.5) for r in rows)


def test_the_report_names_both_sides_offers_the_gpu_columns_and_every_plot_has_units_and_a_good_value(runs):
    root, a, _ = runs
    six = copy_run(a, root / "six-b", repeats=6)
    manifest = store.read_json(six / "manifest.json") | {"matrix_efficiency": 0.8312}
    store.write_json(six / "manifest.json", manifest)
    text = check_html(pipeline.make_report(six, baseline=a, out_dir=root / "six-b-report").out_dir / "report.html")
    env = manifest["environment"]
    start = text.index('<table class="setup">')
    setup = text[start:text.index("</table>", start)]
    for name in ("device", "driver", "CUDA", "cuDNN", "torch", "DALI", "nvbench", "matrix efficiency",
                 "largest other part"):
        assert f">{name}</th>" in setup, name
    baseline_efficiency = store.read_json(a / "manifest.json")["matrix_efficiency"]  # the runner records it
    assert setup.count(html.escape(f"{env['torch_version']}")) == 2
    assert f"<td>0.83</td><td>{baseline_efficiency:.2f}</td>" in setup
    assert re.search(r"largest other part</th><td>[^<]*</td><td>\w+ [\d.]+ s \(\d+% of the wall\)</td>", setup)
    assert setup.count(f"git {env['nvbench_git_sha'][:12]}" if env["nvbench_git_sha"] else "git not recorded") == 2
    for heading in ("MFU %", "power W", "img/J", "data wait"):  # in each cell's detail row
        assert f"<dt>{heading}" in text, heading
    plots = figures(text)
    assert len(plots) >= 6 and any(c.startswith("Step times: ") for c, _, _ in plots)
    for caption, axis, note in plots:  # a unit on the axis, and what a good value looks like
        assert re.search(r"%|/s|ms|ratio|fraction", axis), (caption, axis)
        assert re.search(r"[Hh]igher is better|[Ll]ower is better|good:", note), (caption, note)
    steps = text[text.index('<section id="steps">'):text.index('<section id="environment">')]
    drawn = charts(steps)
    assert steps.count("<details ") == 2 and len(drawn) == 2
    for chart in drawn.values():  # the warmup shaded, step time in ms up the side
        assert chart["layout"]["yaxis"]["title"]["text"] == "step time, ms"
        assert [s["fillcolor"] for s in chart["layout"]["shapes"] if s["type"] == "rect"] == ["#fff8c5"]
    dashed = [s for c in drawn.values() for s in c["layout"]["shapes"] if s["line"].get("dash") == "dash"]
    assert dashed  # the pytorch cell's first step opens its data epoch


def test_the_report_renders_in_a_real_browser_without_a_console_error(runs, tmp_path):
    binary = chromium_or_skip()
    root, a, _ = runs
    result = pipeline.make_report(copy_run(a, tmp_path / "six", repeats=6), baseline=copy_run(a, tmp_path / "base",
                                scale=1.1, repeats=6), out_dir=tmp_path / "report")
    page = result.out_dir / "report.html"
    # the change chart shows each cell's change as verdicts.parquet has it (read back from the page)
    drawn = {c[0]: x for trace in charts(page.read_text())["chart-change"]["data"] if trace["name"] != "fast-step rate"
             for x, c in zip(trace["x"], trace["customdata"])}
    written = {r["cell_id"]: r["effect_pct"] for r in pq.read_table(result.out_dir / "verdicts.parquet").to_pylist()
               if r["effect_pct"] is not None}
    assert drawn == pytest.approx(written, rel=1e-12) and len(drawn) == 2
    broken = tmp_path / "broken.html"  # the same page with one deliberate error: the capture must see it
    broken.write_text(page.read_text().replace("</body>", "<script>window.noSuchFunction();</script></body>"))
    with Browser(binary) as browser:
        assert any(e.startswith("exception: TypeError: window.noSuchFunction") for e in browser.load(broken).errors)
        load = browser.load(page)
        plotly = (page.parent / "plotly.min.js").resolve().as_uri()
        assert load.errors == [] and load.requests == [page.resolve().as_uri(), plotly]  # the page and its charts
        first_screen(browser, page)  # the heatmap and the regressed cell's chart above the fold, drawn
        browser.evaluate("document.getElementById('chart-change').scrollIntoView()")  # a chart is drawn when seen
        assert browser.wait("document.querySelector('#chart-change[data-ready]') !== null")
        sorted_by = "Array.from(document.querySelectorAll('table.cells tr.main')).map(r => r.cells[3].dataset.sort)"
        browser.evaluate("document.querySelectorAll('table.cells th')[3].click()")  # img/s: ascending
        up = [float(x) for x in browser.evaluate(sorted_by)]
        browser.evaluate("document.querySelectorAll('table.cells th')[3].click()")  # again: descending
        assert up == sorted(up) and [float(x) for x in browser.evaluate(sorted_by)] == sorted(up, reverse=True)
        browser.evaluate("(d => { d.open = true; d.scrollIntoView(); })(document.querySelector('#steps details'))")
        assert browser.wait("document.querySelector('#steps details .plot[data-ready]') !== null")
        height = "document.querySelector('#steps details .plot .main-svg').getBoundingClientRect().height"
        assert browser.evaluate(height) > 100  # a reader who opens a cell sees its step-time chart
        assert browser.load(page).errors == []


def test_the_report_shows_the_matrix_as_a_heatmap_above_a_table_that_fits_1280_px(runs, tmp_path):
    binary = chromium_or_skip()
    root, a, _ = runs
    base, ran = mission_smoke_like(a, tmp_path / "base", repeats=10, factor=lambda i: 1.0)
    # one regression, one improvement, one failed cell; the rest unchanged (10 repeats a side: enough for BH over
    # 36 cells to reject)
    changes = {0: 0.6, 5: 1.4, 9: None}
    cand, _ = mission_smoke_like(a, tmp_path / "cand", repeats=10, factor=lambda i: changes.get(i, 1.0))
    result = pipeline.make_report(cand, baseline=base, out_dir=tmp_path / "report")
    verdicts = {v.cell_id: v.verdict for v in result.comparison.verdicts}
    assert len(verdicts) == 96 and ran == 36
    assert sorted(verdicts.values()).count("skipped") == 60
    assert {"regression", "improvement", "failed", "unchanged"} <= set(verdicts.values())
    page = result.out_dir / "report.html"
    text = check_html(page)
    assert text.index('class="heatmap"') < text.index('<table class="cells')  # the picture first
    with Browser(binary) as browser:
        browser.viewport(1280, 800)
        load = browser.load(page)
        assert load.errors == [] and load.requests == [page.resolve().as_uri(),
                                                       (page.parent / "plotly.min.js").resolve().as_uri()]
        tiles = browser.evaluate("Array.from(document.querySelectorAll('.heatmap a.tile')).map(t => "
                                 "[t.dataset.cell, t.dataset.verdict, t.getAttribute('href')])")
        assert sorted(c for c, _, _ in tiles) == sorted(verdicts)  # one tile per cell of the matrix
        assert sum(v != "skipped" for _, v, _ in tiles) == ran  # one per cell that ran
        assert all(verdicts[c] == v for c, v, _ in tiles)
        # the first screen at 1280 x 800: the regressed cells' chart whole, the 96 cells' heatmap starting on it
        assert browser.wait("document.querySelector('#chart-regressed[data-ready]') !== null")
        seen = browser.evaluate("""(() => { const r = e => e.getBoundingClientRect().toJSON();
            return {heatmap: r(document.querySelector('.heatmap')), chart: r(document.getElementById('chart-regressed')),
                    fold: innerHeight}; })()""")
        assert seen["heatmap"]["top"] <= seen["fold"] - 200 and seen["chart"]["bottom"] <= seen["fold"], seen
        assert charts(text)["chart-regressed"]["data"][0]["customdata"][0][0] in {
            c for c, v, _ in tiles if v == "regression"}  # the regressed cell, and only regressed cells
        # the page is no wider than the window: no horizontal scroll, not even inside a box
        assert browser.evaluate("document.documentElement.scrollWidth") <= 1280
        wide = "Array.from(document.querySelectorAll('body *')).filter(e => e.scrollWidth > e.clientWidth + 1 " \
               "&& getComputedStyle(e).overflowX !== 'visible').map(e => e.tagName)"
        assert browser.evaluate(wide) == []
        # one line per cell that ran; skipped cells are grouped by reason, not 60 rows
        heights = browser.evaluate("Array.from(document.querySelectorAll('table.cells tr.main'))"
                                   ".map(r => r.getBoundingClientRect().height)")
        assert len(heights) == ran and max(heights) < 1.6 * min(heights)
        assert browser.evaluate("document.querySelectorAll('.skips details').length") == 2
        # a tile leads to its row, and the row opens to show its reason
        regressed = next(c for c, v, _ in tiles if v == "regression")
        browser.evaluate(f"document.querySelector('a.tile[data-cell=\"{regressed}\"]').click()")
        assert browser.evaluate(f"document.getElementById('cell-{regressed}').querySelector('tr.detail').hidden") \
            is False
        assert "regression" in browser.evaluate(f"document.getElementById('cell-{regressed}').innerText")
        skipped = next(h for _, v, h in tiles if v == "skipped")
        browser.evaluate(f"document.querySelector('a.tile[href=\"{skipped}\"]').click()")
        assert browser.evaluate(f"document.getElementById('{skipped[1:]}').open") is True
        assert browser.load(page).errors == []


@pytest.fixture(scope="module")
def one_repeat_mission(runs):
    """What a newcomer's first `nvbench report` meets: the mission's smoke-sized run against another, one repeat
    a side (the candidate 2 % faster), written once. Returns the report and how many cells ran."""
    root, a, _ = runs
    base, ran = mission_smoke_like(a, root / "one-base", repeats=1, factor=lambda i: 1.0)
    cand, _ = mission_smoke_like(a, root / "one-cand", repeats=1, factor=lambda i: 1.02)
    return pipeline.make_report(cand, baseline=base, out_dir=root / "one-report"), ran


def test_the_report_console_groups_cells_by_verdict_and_fits_80_columns_without_cutting_a_word(
        one_repeat_mission, monkeypatch, capsys):
    result, ran = one_repeat_mission
    monkeypatch.setenv("COLUMNS", "80")
    assert print_report(result, fail_on_regression=True) == EXIT_INCONCLUSIVE
    lines = capsys.readouterr().out.splitlines()[len(result.files):]  # the verdict lines after the files' paths
    assert max(map(len, lines)) <= 80 and not any(line.endswith("…") for line in lines)
    # 36 inconclusive and 60 skipped cells: a group each with its count and commonest reason, not 96 lines
    assert len(lines) < 16, lines
    start = lines.index(f"INCONCLUSIVE: {ran} cells neither shown changed nor shown unchanged, not a pass")
    assert lines[start + 1].startswith(f"  {ran} of {ran}: ")
    skipped = lines.index("skipped: 60 cells")
    assert lines[skipped + 1].startswith("  36 of 60 (the commonest reason): world_size 8 exceeds")
    shown = " ".join(line.strip() for line in lines[skipped + 1:])
    reason = next(v.reason for v in result.comparison.verdicts if v.reason.startswith("world_size 8"))
    assert len(reason) > 80 and " ".join(reason.split()) in shown  # wrapped whole, every word in one piece


def test_the_first_screen_shows_the_headline_and_the_heatmap_and_every_row_the_figures_of_its_tile(
        one_repeat_mission):
    binary = chromium_or_skip()
    result, ran = one_repeat_mission
    page = result.out_dir / "report.html"
    text = check_html(page)
    assert text.index('id="headline"') < text.index('class="heatmap"') < text.index('class="setup"')
    rows_js = ("Array.from(document.querySelectorAll('table.cells tbody.cell')).map(b => [b.id.slice(5), "
               "b.querySelector('tr.main').cells[2].innerText, b.querySelector('tr.main').cells[3].innerText, "
               "b.querySelector('tr.main').cells[4].innerText])")
    tiles_js = ("Object.fromEntries(Array.from(document.querySelectorAll('.heatmap a.tile')).map(t => "
                "[t.dataset.cell, [t.querySelector('.rate').innerText, t.querySelector('.chg').innerText]]))")
    with Browser(binary) as browser:
        browser.viewport(1280, 800)
        assert browser.load(page).errors == []
        bottom = "(s => document.querySelector(s).getBoundingClientRect().bottom)"
        assert browser.evaluate(f"{bottom}('.cards')") <= 800  # the headline counts above the fold
        assert browser.evaluate(f"{bottom}('.hm-grid')") <= 800  # and the heatmap's first panel, whole
        assert browser.evaluate("document.querySelector('#setup details').open") is False  # the setup folded
        rows, tiles = browser.evaluate(rows_js), browser.evaluate(tiles_js)
    assert len(rows) == ran
    for cell_id, change, img_s, mdc in rows:  # 1 + 1 repeats: the test cannot run, the figures still show
        this, base = (float(x) for x in re.fullmatch(r"(\d+\.\d) / (\d+\.\d)", img_s).groups())
        rate, tile_change = tiles[cell_id]
        assert float(rate) == pytest.approx(this, rel=0.005, abs=0.051) and this == pytest.approx(1.02 * base, rel=0.01)
        assert tile_change.endswith(f"{change}%") and mdc == "n/a: 1 repeat"
