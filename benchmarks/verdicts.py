"""How the four verdicts behave, by simulation from this machine's own recorded repeats: the false-alarm
rate at A/A, how often a true 10 % slowdown is called `unchanged` (the one answer that must never happen),
how often a 5 % slowdown is detected within the adaptive A/B's budget, and the pairs that takes.

    python benchmarks/verdicts.py --collect reports/verdict-pool --repeats 24   # record repeats (~12 min here)
    python benchmarks/verdicts.py --pool reports/verdict-pool --export benchmarks/data/cpu-repeats.csv
    python benchmarks/verdicts.py --pool benchmarks/data/cpu-repeats.csv --trials 1000   # simulate
    python benchmarks/verdicts.py --synthetic 5 --trials 1000   # the same rule at a stated noise level

Collect: benchmarks/detector.py's cell (resnet18, synthetic data, 32 px, batch 16, one thread) as two
interleaved pools of real repeats, every repeat its own process as in `nvbench run`, each with its
throughput, fast-step rate and machine-speed probe. Export keeps those columns in a small CSV, so that the
simulation can be run again from the same repeats.

Simulate: a trial shuffles the pool and deals it into a baseline side and a candidate side (no repeat on
both sides), the candidate's throughput and fast-step rate scaled by 1 - slowdown (the probe untouched:
slower code, not a slower machine). Each design judges the trial exactly as `nvbench ab` does
(harness.analysis.judge.compare.compare_runs, default thresholds): `fixed N` judges N pairs once; `adaptive
N..M` judges N pairs, and while the cell is inconclusive adds pairs at the planned looks N, 2N, ..., M
with the level split over the looks (harness.orchestrate.workflows.looks.look_schedule), stopping at the first decided
look. Printed per setting and design: the share of each verdict and the mean pairs a side.

What this captures and what it does not: the repeats are real processes on this box, with whatever else
ran beside them (say so when publishing); dealing them at random makes the sides exchangeable, which is
an interleaved A/B at its best (no drift between the sides); the slowdown is multiplicative and exact;
trials reuse one pool, so a rate's uncertainty is closer to that of pool / (2 M) independent comparisons
than of --trials.

Synthetic (`--synthetic CV`): a pool of independent log-normal repeats at the given CV of throughput; the
fast-step rate moves with it at `--fast-share` of its log spread (0.5: on the CPU machine the fast-step
rate's CV was about half of throughput's, docs/performance.md "Two metrics"), the probe is balanced noise of
1 %; large enough that trials rarely share repeats. It shows the decision rule's operating characteristics at a noise level a reader can name (the
quiet CPU machine's recorded repeat-to-repeat CV was 4.9-8.2 %, docs/performance.md); it is not a
measurement of any machine.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.analysis.judge import compare  # noqa: E402
from harness.analysis.load.runs import load_run# noqa: E402
from harness.analysis.judge.run import RunData
from harness.analysis.judge.verdict import IMPROVEMENT, INCONCLUSIVE, REGRESSION, UNCHANGED, Thresholds# noqa: E402
from harness.orchestrate.workflows.looks import decisive_looks, look_schedule  # noqa: E402

COLUMNS = ("pool", "repeat", "throughput_img_per_s", "fast_step_img_per_s", "speed_probe_s", "speed_probe_kind",
           "is_steady")
"""What the simulation needs of a repeat, as exported."""
WORDS = (REGRESSION, IMPROVEMENT, UNCHANGED, INCONCLUSIVE)
CELL = "synthetic_nchw_fp32_ws1_ga1_0000000000"


# ---------------------------------------------------------------------------------------------
# the pool


def collect(out: Path, repeats: int, measure_steps: int, seed: int) -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import detector

    detector.collect(out, repeats=repeats, drills=[], measure_steps=measure_steps, malloc="stable", seed=seed)


def load_pool(path: Path) -> list[dict]:
    """The ok repeats of a collection folder (its a1/ and a2/ run folders) or an exported CSV."""
    if path.is_dir():
        rows = [r | {"pool": name} for name in ("a1", "a2") for r in load_run(path / name).rows]
    else:
        with path.open(newline="") as f:
            rows = [_typed(r) for r in csv.DictReader(f)]
    return [r for r in rows if r.get("status", "ok") == "ok" and (r["throughput_img_per_s"] or 0) > 0]


def _typed(row: dict) -> dict:
    out = {"pool": row["pool"], "repeat": int(row["repeat"]), "speed_probe_kind": row["speed_probe_kind"] or None,
           "is_steady": row["is_steady"] == "True"}
    for name in ("throughput_img_per_s", "fast_step_img_per_s", "speed_probe_s"):
        out[name] = float(row[name]) if row[name] else None
    return out


def synthetic_pool(cv_pct: float, size: int, seed: int, fast_share: float = 0.5) -> list[dict]:
    """`size` independent repeats whose throughput is log-normal with the given CV (see the module doc)."""
    rng = np.random.default_rng(seed)
    sigma = np.sqrt(np.log1p((cv_pct / 100) ** 2))
    speed = np.exp(rng.normal(0.0, sigma, size))
    probe = 2e-4 * np.exp(rng.normal(0.0, 0.01, size))
    return [{"pool": "synthetic", "repeat": i, "throughput_img_per_s": 200.0 * s,
             "fast_step_img_per_s": 210.0 * s ** fast_share,
             "speed_probe_s": float(p), "speed_probe_kind": "synthetic", "is_steady": True}
            for i, (s, p) in enumerate(zip(speed, probe))]


def export(rows: list[dict], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


# ---------------------------------------------------------------------------------------------
# the simulation


def _side(rows: list[dict], slowdown: float, run_id: str) -> RunData:
    scale = 1.0 - slowdown
    cells = []
    for i, r in enumerate(rows):
        cells.append({"cell_id": CELL, "repeat": i, "status": "ok", "reason": "", "backend": "synthetic",
                      "memory_format": "nchw", "precision": "fp32", "world_size": 1, "grad_accum": 1,
                      "compile": "eager", "env_key": "k", "is_smoke": False, "fire_drill_pct": 0.0,
                      "is_steady": r["is_steady"], "speed_probe_s": r["speed_probe_s"],
                      "speed_probe_kind": r["speed_probe_kind"],
                      "throughput_img_per_s": r["throughput_img_per_s"] * scale,
                      "fast_step_img_per_s": r["fast_step_img_per_s"] * scale if r["fast_step_img_per_s"] else None})
    return RunData(path=run_id, run_id=run_id, created_at="", environment={}, rows=tuple(cells))


def judge(base: list[dict], cand: list[dict], slowdown: float, th: Thresholds) -> str:
    (v,) = compare.compare_runs(_side(cand, slowdown, "b"), _side(base, 0.0, "a"), th).verdicts
    return v.verdict


def trial(pool: list[dict], seed: int, slowdown: float, looks: list[int], th: Thresholds) -> tuple[str, int]:
    """(verdict, pairs a side) of one simulated A/B: the pool dealt at random into two sides of looks[-1]."""
    m = looks[-1]
    order = np.random.default_rng(seed).permutation(len(pool))
    base, cand = [pool[i] for i in order[:m]], [pool[i] for i in order[m:2 * m]]
    for n in looks:
        verdict = judge(base[:n], cand[:n], slowdown, th)
        if verdict != INCONCLUSIVE:
            return verdict, n
    return verdict, looks[-1]


def _batch(args: tuple) -> list[tuple[str, int]]:
    pool, seeds, slowdown, looks, th = args
    return [trial(pool, s, slowdown, looks, th) for s in seeds]


def simulate(pool: list[dict], *, designs: dict[str, list[int]], slowdowns: list[float], trials: int, seed: int,
             workers: int, th: Thresholds) -> list[dict]:
    results = []
    for slowdown in slowdowns:
        for name, looks in designs.items():
            if 2 * looks[-1] > len(pool):
                print(f"skip {name}: {2 * looks[-1]} repeats needed, the pool has {len(pool)}", file=sys.stderr)
                continue
            design_th = Thresholds(**{**{f: getattr(th, f) for f in ("floor_pct", "fdr_q", "speed_adjust",
                                                                   "fast_steps", "num_resamples")},
                                      "looks": len(looks)})
            seeds = [seed + 1000 * k for k in range(trials)]
            chunks = [seeds[i::workers] for i in range(workers)]
            t0 = time.monotonic()
            with ProcessPoolExecutor(workers) as ex:
                out = [r for part in ex.map(_batch, [(pool, c, slowdown, looks, design_th) for c in chunks])
                       for r in part]
            verdicts = [v for v, _ in out]
            results.append({"slowdown_pct": 100 * slowdown, "design": name, "looks": looks, "trials": len(out),
                            **{w: verdicts.count(w) / len(out) for w in WORDS},
                            "mean_pairs": float(np.mean([n for _, n in out])), "seconds": time.monotonic() - t0})
            print(_line(results[-1]), file=sys.stderr, flush=True)
    return results


def _line(r: dict) -> str:
    shares = " ".join(f"{w} {100 * r[w]:5.1f}%" for w in WORDS)
    return f"{r['slowdown_pct']:4.0f}%  {r['design']:<16} {shares}  pairs {r['mean_pairs']:5.1f}  ({r['trials']} trials)"


def render(results: list[dict], pool: list[dict]) -> str:
    x = np.array([r["throughput_img_per_s"] for r in pool])
    head = (f"pool: {len(pool)} repeats, throughput CV {100 * x.std(ddof=1) / x.mean():.1f}%\n\n"
            "| true slowdown | design | regression | improvement | unchanged | inconclusive | mean pairs a side |\n"
            "|---|---|---|---|---|---|---|")
    rows = [f"| {r['slowdown_pct']:g}% | {r['design']} | {100 * r['regression']:.1f}% | {100 * r['improvement']:.1f}% "
            f"| {100 * r['unchanged']:.1f}% | {100 * r['inconclusive']:.1f}% | {r['mean_pairs']:.1f} |" for r in results]
    return "\n".join([head, *rows])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--collect", type=Path, metavar="DIR", help="record a pool of real repeats into DIR")
    p.add_argument("--repeats", type=int, default=24, help="repeats per pool when collecting (two pools)")
    p.add_argument("--measure-steps", type=int, default=150, help="measured steps per repeat when collecting")
    p.add_argument("--pool", type=Path, help="a collection folder or an exported CSV to simulate from")
    p.add_argument("--synthetic", type=float, metavar="CV", help="simulate from log-normal repeats at CV %% instead")
    p.add_argument("--synthetic-size", type=int, default=400, help="repeats in the synthetic pool")
    p.add_argument("--fast-share", type=float, default=0.5,
                   help="the synthetic fast-step rate's log spread as a share of throughput's")
    p.add_argument("--export", type=Path, metavar="CSV", help="write the pool's repeats to CSV")
    p.add_argument("--trials", type=int, default=1000)
    p.add_argument("--slowdowns", default="0,5,10", help="true slowdowns in %% (default 0,5,10)")
    p.add_argument("--designs", default="fixed5:5,fixed10:10,fixed20:20,adaptive10-20:10-20",
                   help="NAME:N (fixed) or NAME:N-M (adaptive), comma-separated")
    p.add_argument("--resamples", type=int, default=Thresholds().num_resamples,
                   help="bootstrap resamples and random permutations per comparison (default: nvbench's)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, help="write the table (Markdown) here too")
    args = p.parse_args(argv)
    if args.collect:
        collect(args.collect, args.repeats, args.measure_steps, args.seed)
        args.pool = args.pool or args.collect
    if args.synthetic:
        pool = synthetic_pool(args.synthetic, args.synthetic_size, args.seed, args.fast_share)
    elif args.pool:
        pool = load_pool(args.pool)
    else:
        p.error("give --pool, --collect or --synthetic")
    if args.export:
        export(pool, args.export)
        print(f"{len(pool)} repeats -> {args.export}", file=sys.stderr)
        return 0
    designs = {}
    for item in args.designs.split(","):
        name, spec = item.split(":")
        lo, _, hi = spec.partition("-")
        designs[name] = decisive_looks(look_schedule(int(lo), int(hi or lo)), Thresholds().fdr_q)  # as nvbench ab
    results = simulate(pool, designs=designs, slowdowns=[float(s) / 100 for s in args.slowdowns.split(",")],
                       trials=args.trials, seed=args.seed, workers=args.workers,
                       th=Thresholds(num_resamples=args.resamples))
    table = render(results, pool)
    print(table)
    if args.out:
        args.out.write_text(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
