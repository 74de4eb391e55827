"""`nvbench dashboard` over 100 generated nights of 8 cells (benchmarks/history_data.py: real run folders), one cell
stepping down 20 % five nights before the end with its alarm open, another's alarm acknowledged, and a `<script>` in
the model's name and in the acknowledgement's words: the page's states, its charts' numbers against the Parquet rows,
and, in headless Chromium, hover, filter, the alarm's link and the first screen."""

from __future__ import annotations

import importlib.util
import io
import os
import re
import sys
from pathlib import Path

import pytest
from PIL import Image

from harness.analysis.nights import baselines
from harness.analysis.nights.alarms import Ack, MetricChange, OpenAlarm
from harness.analysis.pages import dashboard, render
from harness.results import store

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from browser import Browser, chromium_path  # noqa: E402
from conftest import nvbench  # noqa: E402
from report_checks import charts, check_html  # noqa: E402

_spec = importlib.util.spec_from_file_location("history_data", ROOT / "benchmarks" / "history_data.py")
history_data = sys.modules.setdefault("history_data", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(history_data)

SCALE = history_data.Scale(nights=100, cells=8, ok_cells=8, repeats=3, step_pct=-20.0)
EVIL_MODEL = "<script>window.pwned = 'model'</script>resnet50"
EVIL_NOTE = "<img src=x onerror=\"window.pwned = 'note'\"> known"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """REPORTS (history/ and baselines/) and the dashboard `nvbench dashboard` wrote of it."""
    reports = tmp_path_factory.mktemp("dash") / "reports"
    templates = [dict(t, model=EVIL_MODEL) for t in history_data.template_rows(SCALE)]
    nights = [history_data.write_night(reports / "history", SCALE, templates, n) for n in range(SCALE.nights)]
    stepped, acked = templates[0]["cell_id"], templates[1]["cell_id"]
    change = MetricChange(cell_id=stepped, metric="throughput", effect=-20.0, low=-21.0, high=-19.0, floor=3.0)
    other = MetricChange(cell_id=acked, metric="throughput", effect=-4.0, low=-5.5, high=-2.5, floor=3.0)
    since = [p.name for p in nights][SCALE.step_at]
    baselines.write_open(reports, [OpenAlarm(change=change, since=since, nights=5, last=nights[-1].name),
                                   OpenAlarm(change=other, since=nights[90].name, nights=10, acknowledged="2026-04-02")])
    baselines.add_acks(reports, [Ack(change=other, reason=EVIL_NOTE, who="me", when="2026-04-02T10:00:00+00:00")])
    proc = nvbench("dashboard", str(reports), "--out", str(reports.parent / "site"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[:-1] == [str(reports.parent / "site" / "index.html")]  # then the summary line
    return reports, reports.parent / "site" / "index.html", stepped, acked


def test_each_cell_has_its_latest_state_and_every_value_is_escaped(site):
    reports, page, stepped, acked = site
    text = check_html(page)
    tiles = _states(text)
    assert len(tiles) == SCALE.cells
    assert tiles[stepped] == dashboard.REGRESSION and tiles[acked] == dashboard.ACKNOWLEDGED
    assert set(tiles.values()) == {dashboard.REGRESSION, dashboard.ACKNOWLEDGED, dashboard.OK}
    assert "<script>window.pwned" not in text and "<img src=x" not in text  # the model's name, the ack's words
    assert "&lt;script&gt;window.pwned = &#39;model&#39;&lt;/script&gt;resnet50" in text
    assert "&lt;img src=x onerror=" in text


def _states(text: str) -> dict[str, str]:
    """cell id -> the state its tile shows."""
    return dict(re.findall(r'<a class="dtile [^"]*" href="[^"]*" data-cell="([^"]*)" data-state="([^"]*)"', text))


def test_a_trend_shows_the_nights_as_the_parquet_rows_have_them(site):
    """What a chart shows is read back from the page and compared with the run folders' rows: each night's point
    is the mean of that night's ok repeats, the night's run id on its hover."""
    reports, page, stepped, _ = site
    figure = charts(page.read_text())[f"trend-{stepped}-throughput"]
    points = {x: (y, data[0]) for trace in figure["data"] if trace["name"] == "night"
              for x, y, data in zip(trace["x"], trace["y"], trace["customdata"])}
    assert sorted(points) == list(range(1, SCALE.nights + 1))
    for k, night in enumerate(sorted(reports.glob("history/generated-*"))):
        rows = [r for r in store.read_cells(night).to_pylist() if r["cell_id"] == stepped and r["status"] == "ok"]
        mean = sum(r["throughput_img_per_s"] for r in rows) / len(rows)
        assert points[k + 1][0] == pytest.approx(mean, rel=1e-9) and points[k + 1][1] == night.name


def test_the_dashboard_is_explored_in_a_real_browser(site, tmp_path):
    if chromium_path() is None:
        pytest.skip("no chromium on PATH (README's test command installs Debian's chromium)")
    reports, page, stepped, _ = site
    with Browser() as browser:
        browser.viewport(1280, 800)
        load = browser.load(page)
        assert load.errors == []
        assert load.requests == [page.resolve().as_uri(), (page.parent / "plotly.min.js").resolve().as_uri()]
        # the first screen: the grid and the regressed cell's trend, whole above the fold, drawn
        focus = f"focus-{stepped}"
        assert browser.wait(f"document.querySelector('#{focus}[data-ready]') !== null")
        fold = browser.evaluate(f"""(() => {{ const r = e => e.getBoundingClientRect();
            return {{grid: r(document.querySelector('.grid')).bottom, chart: r(document.getElementById('{focus}')).toJSON(),
                     fold: innerHeight}}; }})()""")
        assert fold["grid"] <= fold["fold"] and fold["chart"]["bottom"] <= fold["fold"], fold
        shot = Image.open(io.BytesIO(browser.screenshot_png(1280, 800))).convert("L")
        box = fold["chart"]
        inside = shot.crop((int(box["left"]) + 60, int(box["top"]) + 10, int(box["right"]) - 10,
                            int(box["bottom"]) - 40))
        assert sum(inside.histogram()[:200]) > 200  # points and axes drawn (pixels darker than 200), not a blank box
        # hovering a point of a trend shows its night and value
        trend = f"trend-{stepped}-throughput"
        browser.evaluate(f"document.getElementById('{trend}').scrollIntoView()")
        assert browser.wait(f"document.querySelector('#{trend}[data-ready]') !== null")
        where = browser.evaluate(f"""(() => {{ const box = document.getElementById('{trend}'), f = box._fullLayout;
            const r = box.getBoundingClientRect(), x = box.data[0].x[42], y = box.data[0].y[42];
            return {{px: r.left + f._size.l + f.xaxis.d2p(x), py: r.top + f._size.t + f.yaxis.d2p(y)}}; }})()""")
        browser.mouse_move(where["px"], where["py"])  # the mouse on night 43's point, as a person hovers it
        assert browser.wait(f"document.querySelector('#{trend} .hoverlayer .hovertext') !== null")
        hover = browser.evaluate(f"""(() => {{ const box = document.getElementById('{trend}');
            return {{text: box.querySelector('.hoverlayer .hovertext').textContent, x: box.data[0].x[42],
                     y: box.data[0].y[42], run: box.data[0].customdata[42][0]}}; }})()""")
        assert hover["text"] and f"night {hover['x']}" in hover["text"] and hover["run"] in hover["text"], hover
        assert f"{hover['y']:.4g}" in hover["text"], hover
        # a filter by one axis value leaves only its cells
        browser.evaluate("(s => { s.value = 'pytorch'; s.dispatchEvent(new Event('change')); })"
                         "(document.querySelector('select[data-axis=backend]'))")
        shown = browser.evaluate("Array.from(document.querySelectorAll('.grid .dtile')).filter(t => !t.hidden)"
                                 ".map(t => t.dataset.backend)")
        everyone = browser.evaluate("document.querySelectorAll('.grid .dtile').length")
        assert shown and set(shown) == {"pytorch"} and len(shown) < everyone
        browser.evaluate("(s => { s.value = ''; s.dispatchEvent(new Event('change')); })"
                         "(document.querySelector('select[data-axis=backend]'))")
        # the link from an alarm lands on its cell's trend, which is drawn there
        browser.evaluate("window.scrollTo(0, 0)")
        browser.evaluate(f"document.querySelector('#alarms a.alarm[href=\"#trend-{stepped}\"]').click()")
        assert browser.wait(f"location.hash === '#trend-{stepped}'")
        top = browser.evaluate(f"document.getElementById('trend-{stepped}').getBoundingClientRect().top")
        assert abs(top) < 2
        assert browser.wait(f"document.querySelector('#{trend}[data-ready]') !== null")
        assert browser.evaluate("typeof window.pwned") == "undefined"  # the injected model and note stayed inert


@pytest.mark.documented("nvbench dashboard reports --out reports/dashboard", bound_s=120)
def test_the_dashboard_is_written_whole_beside_its_one_script_and_bad_input_is_one_line(site, documented_run):
    reports, page, _, _ = site
    out = reports / "dashboard"
    proc = documented_run(["dashboard", str(reports), "--out", str(out)])
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == ["index.html", "plotly.min.js"]
    js, shipped = out / "plotly.min.js", render.plotly_js_path()
    if js.stat().st_dev == shipped.stat().st_dev:  # a link to the package's own file: no byte more a night
        assert os.path.samefile(js, shipped)
    js.unlink()
    js.write_bytes(b"// another plotly")  # a stale or foreign file is replaced, the same one left alone
    assert render.place_assets(out) == [js] and js.read_bytes() == shipped.read_bytes()
    assert render.place_assets(out) == []
    last = proc.stdout.splitlines()[-1]
    assert last.startswith(f"{SCALE.nights} nights, ") and last.endswith(f" of {SCALE.cells} cell(s)"), proc.stdout
    missing = documented_run(["dashboard", str(reports / "nowhere"), "--out", str(reports / "never")])
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "nowhere" in missing.stderr
    assert not (reports / "never").exists()
