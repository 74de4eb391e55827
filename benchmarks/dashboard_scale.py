"""The dashboard at a year's scale (issue 59): 365 generated nights of 96 cells (benchmarks/history_data.py, real
run folders), `nvbench dashboard` timed as a whole process (cold: no cache; warm: the history's cache kept), then
the page opened in headless Chromium: the time from navigation to the load event and to the first screen's charts
drawn. Take it with nothing else running.

    python benchmarks/dashboard_scale.py --out /tmp/dash365 [--nights 365 --cells 96 --runs 3]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from browser import Browser  # noqa: E402

_spec = importlib.util.spec_from_file_location("history_data", ROOT / "benchmarks" / "history_data.py")
history_data = sys.modules.setdefault("history_data", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(history_data)


def timed(argv: list[str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
    took = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)}: exit {proc.returncode}\n{proc.stderr}")
    return took


def open_page(page: Path) -> dict[str, float]:
    """Navigation to load event, and to every chart of the first screen drawn, in ms (the page's own clock)."""
    with Browser() as browser:
        browser.viewport(1280, 800)
        start = time.perf_counter()
        load = browser.load(page, settle_s=0.0)
        loaded = time.perf_counter() - start
        if load.errors:
            raise SystemExit(f"{page}: {load.errors}")
        drawn = browser.wait("Array.from(document.querySelectorAll('.plot')).filter(b => { const r = "
                             "b.getBoundingClientRect(); return r.top < innerHeight && r.bottom > 0; })"
                             ".every(b => b.hasAttribute('data-ready'))", timeout_s=30)
        first = time.perf_counter() - start
        nav = browser.evaluate("performance.getEntriesByType('navigation')[0].toJSON()")
    return {"wall_to_load_s": loaded, "wall_to_first_screen_s": first if drawn else float("nan"),
            "dom_content_loaded_ms": nav["domContentLoadedEventEnd"], "load_event_ms": nav["loadEventEnd"]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--nights", type=int, default=365, help="(default: %(default)s)")
    p.add_argument("--cells", type=int, default=96, help="(default: %(default)s)")
    p.add_argument("--ok-cells", type=int, default=96, help="(default: %(default)s)")
    p.add_argument("--runs", type=int, default=3, help="timed runs of each (default: %(default)s)")
    args = p.parse_args(argv)
    reports = args.out / "reports"
    if not (reports / "history").is_dir():
        start = time.perf_counter()
        history_data.generate(reports / "history", history_data.Scale(nights=args.nights, cells=args.cells,
                                                                      ok_cells=args.ok_cells, repeats=3))
        print(f"generated {args.nights} nights x {args.cells} cells in {time.perf_counter() - start:.1f} s")
    command = [sys.executable, "-m", "harness", "dashboard", str(reports), "--out", str(args.out / "site")]
    cold, warm = [], []
    for _ in range(args.runs):
        shutil.rmtree(reports / "history" / ".nvbench-cache", ignore_errors=True)
        cold.append(timed(command + ["--no-cache"]))
    timed(command)  # fills the cache
    warm = [timed(command) for _ in range(args.runs)]
    page = args.out / "site" / "index.html"
    opened = [open_page(page) for _ in range(args.runs)]
    result = {"nights": args.nights, "cells": args.cells, "page_bytes": page.stat().st_size,
              "write_cold_s": cold, "write_warm_s": warm, "open": opened}
    (args.out / "dashboard-scale.json").write_text(json.dumps(result, indent=1))
    med = statistics.median
    print(f"page {page.stat().st_size / 1e6:.1f} MB; nvbench dashboard cold {min(cold):.2f}-{max(cold):.2f} s "
          f"(median {med(cold):.2f}), warm {min(warm):.2f}-{max(warm):.2f} s (median {med(warm):.2f})")
    print("opened in Chromium: load event " + ", ".join(f"{o['load_event_ms'] / 1e3:.2f}" for o in opened)
          + " s; first screen's charts drawn " + ", ".join(f"{o['wall_to_first_screen_s']:.2f}" for o in opened)
          + " s (wall, from navigation)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
