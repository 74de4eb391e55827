"""What a year of nights costs the reader: `nvbench history` cold and incremental, `nvbench report --history`,
`nvbench report A --baseline B`, each in a fresh process (wall seconds, peak RSS), on run folders that
benchmarks/history_data.py generates (folded, as a finished run leaves them). Targets (issue 53, on the
2-core CPU machine): history 365 x 96 x 3 cold < 10 s, incremental < 2 s; report --history of 100 nights
< 5 s; report A B of 1000 cells x 10 repeats a side < 10 s; peak memory < 1 GB each.

    python benchmarks/history_scale.py WORK   # the full figures; generating (one cells table a night) once per WORK
    python benchmarks/history_scale.py WORK --nights 8 --report-nights 6 --ab-cells 20 --ab-repeats 3  # tiny
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import history_data  # noqa: E402

RUNNER = ("import resource, sys\nfrom harness import cli\nrc = cli.main(sys.argv[1:])\n"
          "print('MAXRSS_KB', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\nsys.exit(rc)")
"""One command in a fresh interpreter, its own peak RSS at the end (imports included, as a user pays them)."""


def timed(*args: str) -> tuple[float, float]:
    """(wall seconds, peak MB) of `nvbench ARGS` in its own process; a failing command stops the benchmark."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", RUNNER, *args], capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"nvbench {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    kb = next(int(line.split()[1]) for line in proc.stderr.splitlines() if line.startswith("MAXRSS_KB"))
    return wall, kb / 1024


def history_figures(work: Path, scale: history_data.Scale) -> list[tuple[str, float, float]]:
    """Cold (no cache), then last night's history warm, then tonight's added: what the nightly pays."""
    folder = work / f"history-{scale.nights}"
    if not folder.is_dir():
        history_data.generate(folder, scale)
    shutil.rmtree(folder / ".nvbench-cache", ignore_errors=True)
    out = work / "out"
    rows = [("history cold", *timed("history", str(folder), "--no-cache", "--out", str(out / "cold")))]
    newest = sorted(p for p in folder.iterdir() if not p.name.startswith("."))[-1]
    aside = work / "tonight"
    shutil.rmtree(aside, ignore_errors=True)
    shutil.move(newest, aside)
    timed("history", str(folder), "--out", str(out / "yesterday"))  # fills the cache, as last night did
    shutil.move(aside, newest)
    rows.append(("history incremental (one new night)", *timed("history", str(folder), "--out", str(out / "inc"))))
    return rows


def report_figures(work: Path, nights: int, cells: int, repeats: int) -> list[tuple[str, float, float]]:
    folder = work / f"report-history-{nights}"
    if not folder.is_dir():
        history_data.generate(folder, history_data.Scale(nights=nights + 1, step_pct=0.0))
    tonight = sorted(p for p in folder.iterdir() if not p.name.startswith("."))[-1]
    rows = [(f"report --history ({nights} nights)",
             *timed("report", str(tonight), "--history", str(folder), "--out", str(work / "out" / "screen")))]
    ab = work / f"ab-{cells}x{repeats}"
    if not ab.is_dir():
        history_data.generate(ab, history_data.Scale(nights=2, cells=cells, ok_cells=cells, repeats=repeats,
                                                     step_pct=0.0))
    a, b = sorted(p for p in ab.iterdir() if not p.name.startswith("."))
    rows.append((f"report A --baseline B ({cells} cells x {repeats} repeats a side)",
                 *timed("report", str(b), "--baseline", str(a), "--out", str(work / "out" / "ab"))))
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("work", type=Path, help="where generated nights are kept (reused by the next call)")
    for name, default in (("nights", 365), ("cells", 96), ("ok-cells", 36), ("repeats", 3), ("report-nights", 100),
                          ("ab-cells", 1000), ("ab-repeats", 10)):
        p.add_argument(f"--{name}", type=int, default=default, help=f"(default: {default})")
    a = p.parse_args(argv)
    scale = history_data.Scale(nights=a.nights, cells=a.cells, ok_cells=a.ok_cells, repeats=a.repeats)
    rows = history_figures(a.work, scale) + report_figures(a.work, a.report_nights, a.ab_cells, a.ab_repeats)
    print(f"| command ({a.nights} nights x {a.cells} cells x {a.repeats} repeats) | wall | peak memory |")
    print("|---|---|---|")
    for what, wall, mb in rows:
        print(f"| {what} | {wall:.1f} s | {mb:.0f} MB |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
