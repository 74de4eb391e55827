"""nvbench's change-point detector (harness.stats.changepoint, as `nvbench history` runs it) beside Apache Otava's
on the same series: simulated nights with known steps and noise drawn from this machine's recorded repeats,
and the series of real nightly run folders.

    python benchmarks/changepoints.py --pool RUN [RUN ...] [--history DIR] [--series 200] [--repeats 10]
    python benchmarks/changepoints.py --cv 5 --series 200      # normal noise at the CV docs/performance.md records

Otava runs in its own virtual environment, made on first use under benchmarks/.otava/venv (gitignored):
`pip install apache-otava` (0.8.0 pins numpy 2.2 and brings BigQuery, Postgres and Slack clients, which is why it
is never a dependency of nvbench). Both tools get the same practical floor (3 %) on the same series; nvbench
works on log throughput, Otava on throughput (its magnitude is relative).

Noise: every ok repeat of every cell of the --pool runs, as its log deviation from its run's cell mean (scaled by
sqrt(n / (n - 1)) to undo the centring); a simulated night is the mean of --repeats such deviations drawn with
replacement (the nightly's default: 10 repeats), plus --night-sd of night-to-night noise (default 0: the pool
has no nights to measure it from). What it does not capture: the machine's drift between nights
(docs/performance.md: several % within an hour at times), which no iid draw reproduces.

Printed for each tool and setting: change points found, recall (a true step found within one night),
precision (found points within one night of a true step), false change points per 100 A/A nights.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.analysis import history  # noqa: E402
from harness.analysis.runs import load_run  # noqa: E402
from harness.stats import changepoint  # noqa: E402

OTAVA_DIR = Path(__file__).resolve().parent / ".otava"
FLOOR_PCT = 3.0


def otava_python() -> Path:
    """The interpreter of Otava's own virtual environment, made (pip install apache-otava) when missing."""
    python = OTAVA_DIR / "venv" / "bin" / "python"
    if not python.is_file():
        subprocess.run([sys.executable, "-m", "venv", str(OTAVA_DIR / "venv")], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "apache-otava"], check=True)
    return python


def pool_deviations(runs: list[str]) -> np.ndarray:
    """Log deviations of every ok repeat from its run's cell mean, scaled to the spread of a single repeat."""
    out = []
    for path in runs:
        run = load_run(path)
        cells: dict[str, list[float]] = {}
        for row in run.rows:
            if row["status"] == "ok" and (row.get("throughput_img_per_s") or 0) > 0:
                cells.setdefault(row["cell_id"], []).append(math.log(row["throughput_img_per_s"]))
        for values in cells.values():
            if len(values) >= 2:
                x = np.array(values)
                out += list((x - x.mean()) * math.sqrt(x.size / (x.size - 1)))
    if len(out) < 6:
        raise SystemExit(f"--pool: {len(out)} usable repeats; need at least 6 (cells with 2+ ok repeats)")
    return np.array(out)


def simulate(deviations: np.ndarray, rng: np.random.Generator, *, num: int, nights: int, repeats: int,
             night_sd: float, step_at: int | None, step_pct: float) -> np.ndarray:
    """num series of nights of throughput around 1000 img/s, a step of step_pct % from index step_at on."""
    draws = rng.choice(deviations, size=(num, nights, repeats))
    log_night = np.log(np.exp(draws).mean(axis=2)) + rng.normal(0.0, night_sd, (num, nights))
    if step_at is not None:
        log_night[:, step_at:] += math.log1p(step_pct / 100)
    return 1000.0 * np.exp(log_night)


def nvbench_points(series: np.ndarray, alpha: float) -> list[list[int]]:
    floor = math.log1p(FLOOR_PCT / 100)
    return [[c.index for c in changepoint.change_points(np.log(s), min_magnitude=floor, alpha=alpha, seed=k)]
            for k, s in enumerate(series)]


def otava_points(series: np.ndarray, max_pvalue: float) -> list[list[int]]:
    job = {"series": series.tolist(), "max_pvalue": max_pvalue, "min_magnitude": FLOOR_PCT / 100, "window_len": 50}
    proc = subprocess.run([str(otava_python()), str(Path(__file__).with_name("otava_runner.py"))],
                          input=json.dumps(job), capture_output=True, text=True, check=True)
    return json.loads(proc.stdout)


def score(found: list[list[int]], truth: int | None, nights: int) -> dict[str, float]:
    total = sum(len(f) for f in found)
    if truth is None:
        return {"found": total, "fp_per_100": 100 * total / (len(found) * nights)}
    hits = sum(any(abs(i - truth) <= 1 for i in f) for f in found)
    near = sum(sum(abs(i - truth) <= 1 for i in f) for f in found)
    return {"found": total, "recall": hits / len(found), "precision": near / total if total else float("nan")}


def real_series(folder: str) -> list[tuple[str, np.ndarray, list[int]]]:
    """(label, throughput per night, nights with a fire drill) of every cell of a history's throughput."""
    h = history.load_history(folder)
    out = []
    for s in h.series:
        if s.metric == "throughput" and len(s.points) >= 6:
            drills = [i for i, p in enumerate(s.points) if h.nights[p.night].fire_drill_pct]
            out.append((s.cell_id, np.array([p.value for p in s.points]), drills))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pool", nargs="+", metavar="RUN", help="run folders whose repeats give the noise")
    p.add_argument("--cv", type=float, metavar="PCT", help="instead of --pool: normal noise of this CV per repeat "
                   "(docs/performance.md's recorded repeats: 4.2-8.2 %%)")
    p.add_argument("--history", metavar="DIR", help="a nightly history: both tools on its real series too")
    p.add_argument("--series", type=int, default=200, help="simulated series per setting (default 200)")
    p.add_argument("--nights", type=int, default=30)
    p.add_argument("--step-at", type=int, default=11, help="index of the first night after the step (night 12)")
    p.add_argument("--steps", default="5,3,10", help="step sizes in %% to simulate (negative: slower)")
    p.add_argument("--repeats", type=int, default=10, help="repeats per simulated night (the nightly's default)")
    p.add_argument("--night-sd", type=float, default=0.0, help="extra night-to-night noise, log sd (default 0)")
    p.add_argument("--alphas", default="0.01,0.05,0.1", help="nvbench permutation levels")
    p.add_argument("--pvalues", default="0.001,0.01,0.05,0.1", help="Otava max_pvalue settings")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if bool(args.pool) == (args.cv is not None):
        p.error("give --pool RUN... or --cv PCT")
    dev = pool_deviations(args.pool) if args.pool else np.random.default_rng(2).normal(0, args.cv / 100, 100_000)
    night_cv = float(np.std(np.log(np.exp(np.random.default_rng(1).choice(dev, (20000, args.repeats))).mean(1))))
    print(f"pool: {dev.size} repeats from {len(args.pool or [])} run(s), CV of one repeat {100 * dev.std(ddof=1):.2f}%, "
          f"of a night of {args.repeats} {100 * night_cv:.2f}% (+ night sd {100 * args.night_sd:.2f}%)")
    rng = np.random.default_rng(args.seed)
    sets = {"A/A": (None, 0.0)} | {f"step -{abs(float(s)):g}%": (args.step_at, -abs(float(s))) for s in args.steps.split(",")}
    data = {name: simulate(dev, rng, num=args.series, nights=args.nights, repeats=args.repeats,
                           night_sd=args.night_sd, step_at=at, step_pct=pct) for name, (at, pct) in sets.items()}
    tools = [(f"nvbench alpha={a}", lambda s, a=float(a): nvbench_points(s, a)) for a in args.alphas.split(",")]
    tools += [(f"otava max_pvalue={q}", lambda s, q=float(q): otava_points(s, q)) for q in args.pvalues.split(",")]
    print(f"{args.series} series x {args.nights} nights per set, step at night {args.step_at + 1}, floor {FLOOR_PCT:g}%")
    print(f"| tool | A/A false points / 100 nights | " + " | ".join(f"{n} recall / precision" for n in sets if n != "A/A")
          + " | seconds |")
    print("|---|---|" + "---|" * (len(sets) - 1) + "---|")
    for name, run in tools:
        t0 = time.perf_counter()
        cells = []
        for set_name, (at, _) in sets.items():
            s = score(run(data[set_name]), at, args.nights)
            cells.append(f"{s['fp_per_100']:.2f} ({s['found']})" if at is None
                         else f"{s['recall']:.3f} / {s['precision']:.3f}")
        print(f"| {name} | " + " | ".join(cells) + f" | {time.perf_counter() - t0:.1f} |")
    if args.history:
        print(f"\nreal series of {args.history} (throughput per cell; nights with a fire drill marked):")
        for label, values, drills in real_series(args.history):
            mine = nvbench_points(values[None, :], changepoint.DEFAULT_ALPHA)[0]
            theirs = otava_points(values[None, :], 0.01)[0]
            print(f"  {label}: {len(values)} nights, drill from night {drills[0] + 1 if drills else '-'}: nvbench "
                  f"(alpha {changepoint.DEFAULT_ALPHA}) nights {[i + 1 for i in mine]}, otava (max_pvalue 0.01) "
                  f"nights {[i + 1 for i in theirs]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
