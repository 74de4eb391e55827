"""Change-point detectors on the same series of nights: nvbench's (harness.stats.changepoint as `nvbench history`
runs it, with its settings varied), the permutation test it replaced, and Apache Otava's; simulated series with
known steps, and the series of real nightly run folders.

    python benchmarks/changepoints.py                              # the table of docs/performance.md
    python benchmarks/changepoints.py --nights 8 --cvs 3 --series 50 --aa-series 200   # a quick look
    python benchmarks/changepoints.py --history DIR --no-simulation  # a real history's series, every tool
    python benchmarks/changepoints.py --make-nights DIR [--drill-pct 25]  # 8 real nights of a tiny CPU cell

A simulated night is `--repeats` repeats (default 3) of throughput around 1000 img/s; its value varies from
night to night with a CV of c (--cvs: 1, 3, 5 %), a share --night-share of that variance (default 0.5) from a
night effect shared by its repeats, the rest from the repeats' own spread (each repeat at a CV of
c * sqrt((1 - share) * repeats)). A step of s % (--steps) starts at a given night (the positions below; the
first night of the new level, 1-based). Every tool gets the same series and the same 3 % practical floor;
nvbench works on each night's log repeats, the permutation test and Otava on each night's mean (the value
the trend page plots). Otava runs in its own virtual environment, made on first use under
benchmarks/.otava/venv (gitignored): `pip install apache-otava` (0.8.0 pins numpy 2.2 and brings BigQuery,
Postgres and Slack clients, which is why it is never a dependency of nvbench), at window_len 50 (the whole
series).

--make-nights runs eight real `nvbench run` nights of a tiny CPU cell (resnet18 at 16 px, batch 4, 2 repeats of
30 steps), as tests/analysis/test_history_e2e.py does (all at once, each finished night replaced by a busy loop
until the last is done), the last four with --fire-drill PCT when asked, their manifests dated a day apart,
into DIR/history.

Printed: each design's p floor at each length; false change points per 100 A/A series; and per length, CV,
step and position, each tool's recall (a change point within one night of the step) and placement error
(mean |found - true| nights of the nearest change point, over the series that have one).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.analysis.nights import history
from harness.stats import changepoint, nightsplit

OTAVA_DIR = Path(__file__).resolve().parent / ".otava"
FLOOR_PCT = 3.0
POSITIONS = {8: (3, 4, 5, 6, 7), 14: (3, 5, 8, 11, 12, 13), 30: (3, 8, 16, 27, 28, 29)}
"""First night of the step (1-based) per length: early, middle, and the last nights (what is new tonight)."""


def otava_python() -> Path:
    """The interpreter of Otava's own virtual environment, made (pip install apache-otava) when missing."""
    python = OTAVA_DIR / "venv" / "bin" / "python"
    if not python.is_file():
        subprocess.run([sys.executable, "-m", "venv", str(OTAVA_DIR / "venv")], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "apache-otava"], check=True)
    return python


def simulate(rng: np.random.Generator, *, num: int, nights: int, repeats: int, cv: float, night_share: float,
             step_at: int | None, step_pct: float) -> np.ndarray:
    """(num, nights, repeats) log throughput around log(1000); a step of step_pct % from index step_at on."""
    tau, sigma = cv * math.sqrt(night_share), cv * math.sqrt((1 - night_share) * repeats)
    x = math.log(1000.0) + rng.normal(0, tau, (num, nights, 1)) + rng.normal(0, sigma, (num, nights, repeats))
    if step_at is not None:
        x[:, step_at:, :] += math.log1p(step_pct / 100)
    return x


@dataclass(frozen=True)
class Tool:
    name: str
    find: Callable[[list[np.ndarray]], list[list[int]]]
    """Change points (0-based first night of each new level) of every series of a batch."""
    floor: Callable[[int], float]
    """The smallest p its test can report on a series of n nights."""


def nvbench_tool(alpha: float, min_segment: int, *, means_only: bool = False) -> Tool:
    floor = math.log1p(FLOOR_PCT / 100)

    def find(batch: list[np.ndarray]) -> list[list[int]]:
        out = []
        for k, s in enumerate(batch):
            nights = s.mean(axis=1) if means_only else list(s)
            out.append([c.index for c in changepoint.change_points(nights, min_segment=min_segment,
                                                                   min_magnitude=floor, alpha=alpha, seed=k)])
        return out

    label = f"nvbench two-level alpha={alpha:g} m={min_segment}" + (" (night means only)" if means_only else "")
    return Tool(label, find, lambda n: 1 / (nightsplit.simulations_for(alpha) + 1))


def permutation_tool(alpha: float, min_segment: int) -> Tool:
    """issue 28's detector: E-divisive's permutation test on the nights' means (log), 499 permutations."""
    floor = math.log1p(FLOOR_PCT / 100)

    def find(batch: list[np.ndarray]) -> list[list[int]]:
        return [[c.index for c in changepoint.change_points(np.log(np.exp(s).mean(axis=1)), min_segment=min_segment,
                                                            min_magnitude=floor, alpha=alpha, test="permutation",
                                                            seed=k)] for k, s in enumerate(batch)]

    return Tool(f"permutation (E-divisive) alpha={alpha:g} m={min_segment}", find,
                lambda n: changepoint.permutation_floor(n, min_segment=min_segment))


def otava_tool(max_pvalue: float) -> Tool:
    def find(batch: list[np.ndarray]) -> list[list[int]]:
        series = [np.exp(s).mean(axis=1).tolist() for s in batch]
        job = {"series": series, "max_pvalue": max_pvalue, "min_magnitude": FLOOR_PCT / 100, "window_len": 50}
        proc = subprocess.run([str(otava_python()), str(Path(__file__).with_name("otava_runner.py"))],
                              input=json.dumps(job), capture_output=True, text=True, check=True)
        return json.loads(proc.stdout)

    return Tool(f"Otava max_pvalue={max_pvalue:g}", find, lambda n: 0.0)


def score(found: list[list[int]], truth: int | None) -> dict[str, float]:
    if truth is None:
        return {"fp_per_100": 100 * sum(len(f) for f in found) / len(found)}
    hits = sum(any(abs(i - truth) <= 1 for i in f) for f in found)
    exact = sum(truth in f for f in found)
    errors = [min(abs(i - truth) for i in f) for f in found if f]
    return {"recall": hits / len(found), "exact": exact / len(found),
            "error": float(np.mean(errors)) if errors else math.nan}


def settings(args) -> list[dict]:
    out = []
    for n in args.nights:
        for cv in args.cvs:
            out.append({"nights": n, "cv": cv, "step": 0.0, "at": None, "num": args.aa_series})
            for step in args.steps:
                for at in POSITIONS.get(n, (n // 2 + 1,)):
                    out.append({"nights": n, "cv": cv, "step": -abs(step), "at": at - 1, "num": args.series})
    return out


def run_tools(tools: list[Tool], sets: list[dict], data: list[np.ndarray]) -> dict[str, list[dict]]:
    """Every tool on every setting's series (one batch of all settings per tool), scored."""
    results = {}
    for tool in tools:
        t0 = time.perf_counter()
        flat = [s for d in data for s in d]
        found = tool.find(flat)
        results[tool.name], k = [], 0
        for st, d in zip(sets, data):
            results[tool.name].append(score(found[k:k + len(d)], st["at"]))
            k += len(d)
        print(f"  {tool.name}: {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    return results


def markdown(names: list[str], floors: dict[str, list[float]], sets: list[dict], results: dict[str, list[dict]],
             nights: list[int], cvs: list[float], steps: list[float]) -> str:
    """The tables: p floors, A/A false change points, each tool's recall averaged over the step's positions,
    and, per position, recall and placement error of the first tool beside the first Otava setting."""
    lines = ["p floor (the smallest p each design can report):", "",
             "| design | " + " | ".join(f"{n} nights" for n in nights) + " |", "|---|" + "---|" * len(nights)]
    lines += [f"| {t} | " + " | ".join(f"{f:.2g}" for f in floors[t]) + " |" for t in names]
    aa = [i for i, s in enumerate(sets) if s["at"] is None]
    lines += ["", "False change points per 100 A/A series:", "",
              "| tool | " + " | ".join(f"{sets[i]['nights']} nights CV {sets[i]['cv']:g}%" for i in aa) + " |",
              "|---|" + "---|" * len(aa)]
    lines += [f"| {t} | " + " | ".join(f"{results[t][i]['fp_per_100']:.1f}" for i in aa) + " |" for t in names]

    def where(n: int, cv: float, step: float) -> list[int]:
        return [i for i, s in enumerate(sets) if (s["nights"], s["cv"], s["step"]) == (n, cv, -abs(step))]

    lines += ["", "Recall (a change point within one night of the step), mean over the positions below:", "",
              "| nights | CV | step | " + " | ".join(names) + " |", "|---|---|---|" + "---|" * len(names)]
    for n in nights:
        for cv in cvs:
            for step in steps:
                idx = where(n, cv, step)
                lines.append(f"| {n} | {cv:g}% | -{abs(step):g}% | " + " | ".join(
                    f"{np.mean([results[t][i]['recall'] for i in idx]):.2f}" for t in names) + " |")
    pair = [names[0]] + [t for t in names if t.startswith("Otava")][:1]
    for n in nights:
        positions = POSITIONS.get(n, (n // 2 + 1,))
        lines += ["", f"{n} nights, a step first seen on night ...: recall (mean placement error, nights) of "
                  + " · ".join(pair), "", "| CV | step | " + " | ".join(f"night {p}" for p in positions) + " |",
                  "|---|---|" + "---|" * len(positions)]
        for cv in cvs:
            for step in steps:
                cells = [" · ".join(f"{results[t][i]['recall']:.2f} ({_error(results[t][i]['error'])})" for t in pair)
                         for i in where(n, cv, step)]
                lines.append(f"| {cv:g}% | -{abs(step):g}% | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _error(value: float) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.1f}"


def real_series(folder: str, tools: list[Tool]) -> list[str]:
    """Each tool's change points (1-based nights) in every throughput series of a real history."""
    h = history.load_history(folder)
    lines = []
    for s in h.series:
        if s.metric != "throughput" or len(s.points) < 4:
            continue
        drills = [i + 1 for i, p in enumerate(s.points) if h.nights[p.night].fire_drill_pct]
        batch = [_padded([np.log(np.array(p.repeats)) for p in s.points])]
        text = ", ".join(f"{t.name}: {[i + 1 for i in t.find(batch)[0]]}" for t in tools)
        lines.append(f"  {s.cell_id}: {len(s.points)} nights {[round(p.value, 1) for p in s.points]} img/s, "
                     f"drill on nights {drills or '-'}; {text}")
    return lines


def _padded(nights: list[np.ndarray]) -> np.ndarray:
    """Nights of unequal repeats as a (nights, repeats) array: every night cut to the fewest repeats."""
    fewest = min(len(r) for r in nights)
    return np.array([np.asarray(r)[:fewest] for r in nights])


def build_tools(args) -> list[Tool]:
    tools = [nvbench_tool(a, m) for a in args.alphas for m in args.min_segments]
    if args.means_only:
        tools += [nvbench_tool(args.alphas[0], args.min_segments[0], means_only=True)]
    tools += [permutation_tool(a, 3) for a in args.permutation_alphas]
    tools += [otava_tool(q) for q in args.pvalues]
    return tools


def from_json(path: str, names: list[str] | None) -> int:
    saved = json.loads(Path(path).read_text())
    run = saved["args"]
    names = names or list(saved["results"])
    floors = saved.get("floors") or {t: [nvbench_floor(t, n) for n in run["nights"]] for t in names}
    print(markdown(names, floors, saved["settings"], saved["results"], run["nights"], run["cvs"], run["steps"]))
    return 0


def nvbench_floor(name: str, n: int) -> float:
    """The p floor of a tool named as build_tools names it (a --json file written before floors were kept)."""
    if name.startswith("nvbench"):
        return 1 / (nightsplit.simulations_for(float(name.split("alpha=")[1].split()[0])) + 1)
    if name.startswith("permutation"):
        return changepoint.permutation_floor(n, min_segment=int(name.split("m=")[1].split()[0]))
    return 0.0


TINY = """version = 1
[benchmark]
name = "tiny"
model = "resnet18"
num_classes = 10
image_size = 16
batch_size = 4
warmup_steps = 3
measure_steps = 30
val_steps = 1
timeout_s = 300
[data]
workers = 0
cache_dir = "{cache}"
[axes]
backend = ["synthetic"]
[run]
repeats = 2
threads_per_process = 1
nvtx = false
device = "cpu"
"""
def make_nights(folder: Path, drill_pct: float) -> Path:
    """Eight real nights in folder/history (the last four drilled when drill_pct > 0); returns the history."""
    from concurrent.futures import ThreadPoolExecutor

    from harness.results import store

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tiny.toml").write_text(TINY.format(cache=folder / "cache"))

    hogs: list[subprocess.Popen] = []

    def night(k: int) -> None:
        drill = ["--fire-drill", f"{drill_pct:g}"] if drill_pct and k >= 5 else []
        subprocess.run([sys.executable, "-m", "harness", "run", str(folder / "tiny.toml"), "--out",
                        str(folder / "history" / f"night{k}"), "--no-progress", *drill], check=True,
                       capture_output=True, cwd=ROOT)
        hogs.append(subprocess.Popen([sys.executable, "-c", "while True: pass"]))

    try:
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(night, range(1, 9)))
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    for k in range(1, 9):
        manifest = folder / "history" / f"night{k}" / "manifest.json"
        store.write_json(manifest, json.loads(manifest.read_text()) | {"created_at": f"2026-01-{k:02d}T02:00:00+00:00"})
    return folder / "history"


def _floats(text: str) -> list[float]:
    return [float(v) for v in text.split(",") if v]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nights", type=lambda t: [int(v) for v in t.split(",")], default=[8, 14, 30])
    p.add_argument("--cvs", type=_floats, default=[1.0, 3.0, 5.0], help="per-night CV in %% (default 1,3,5)")
    p.add_argument("--steps", type=_floats, default=[5.0, 10.0, 20.0], help="step sizes in %% (slower)")
    p.add_argument("--series", type=int, default=100, help="series per step setting (default 100)")
    p.add_argument("--aa-series", type=int, default=500, help="A/A series per length and CV (default 500)")
    p.add_argument("--repeats", type=int, default=3, help="repeats per night (default 3)")
    p.add_argument("--night-share", type=float, default=0.5, help="share of a night's variance that its repeats "
                   "share (a night effect); the rest is the repeats' own spread (default 0.5)")
    p.add_argument("--alphas", type=_floats, default=[changepoint.DEFAULT_ALPHA], help="nvbench levels")
    p.add_argument("--min-segments", type=lambda t: [int(v) for v in t.split(",")],
                   default=[changepoint.DEFAULT_MIN_SEGMENT], help="nvbench's fewest nights a side")
    p.add_argument("--means-only", action="store_true", help="also nvbench's test on the nights' means alone")
    p.add_argument("--permutation-alphas", type=_floats, default=[0.05], help="the permutation test's levels "
                   "(issue 28's default 0.05; empty: leave it out)")
    p.add_argument("--pvalues", type=_floats, default=[0.001], help="Otava max_pvalue settings (its default "
                   "0.001; empty: leave Otava out)")
    p.add_argument("--history", metavar="DIR", help="a nightly history: every tool on its real series too")
    p.add_argument("--make-nights", metavar="DIR", help="first run eight real nights into DIR/history (and "
                   "analyse them as --history)")
    p.add_argument("--drill-pct", type=float, default=0.0, help="with --make-nights: fire drill of nights 5-8")
    p.add_argument("--no-simulation", action="store_true", help="only the --history series")
    p.add_argument("--json", metavar="FILE", help="write every setting's scores here")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--from-json", metavar="FILE", help="print the tables of an earlier --json run, TOOLS (comma "
                   "separated names, default all) in that order; nothing is run")
    p.add_argument("--tools", type=lambda t: t.split(","), help="with --from-json: the tools to show")
    args = p.parse_args(argv)
    if args.from_json:
        return from_json(args.from_json, args.tools)
    tools = build_tools(args)
    if args.make_nights:
        t0 = time.perf_counter()
        args.history = str(make_nights(Path(args.make_nights), args.drill_pct))
        print(f"8 nights in {args.history} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    if not args.no_simulation:
        sets = settings(args)
        rng = np.random.default_rng(args.seed)
        data = [list(simulate(rng, num=s["num"], nights=s["nights"], repeats=args.repeats, cv=s["cv"] / 100,
                              night_share=args.night_share, step_at=s["at"], step_pct=s["step"])) for s in sets]
        print(f"{sum(len(d) for d in data)} series; {args.repeats} repeats a night, night share {args.night_share:g}, "
              f"floor {FLOOR_PCT:g}%, seed {args.seed}", flush=True)
        results = run_tools(tools, sets, data)
        floors = {t.name: [t.floor(n) for n in args.nights] for t in tools}
        print(markdown([t.name for t in tools], floors, sets, results, args.nights, args.cvs, args.steps))
        if args.json:
            Path(args.json).write_text(json.dumps({"settings": sets, "results": results, "floors": floors,
                                                   "args": vars(args)}, default=str, indent=1))
    if args.history:
        print(f"\nreal series of {args.history} (throughput per cell, change points as 1-based nights):")
        print("\n".join(real_series(args.history, tools)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
