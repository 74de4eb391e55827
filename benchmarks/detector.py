"""How often the regression detector cries wolf, and how often it catches a known slowdown, measured on
this machine with real cell processes.

    python benchmarks/detector.py --out reports/detector            # collect (~30 min here) + analyse
    python benchmarks/detector.py --analyze reports/detector        # analyse an existing collection again

Collect: one cell (resnet18, synthetic data, 32 px, batch 16, one CPU thread, --measure-steps timed
steps, run.malloc = --malloc) runs as five pools of --repeats real repeats each, every repeat its own
process as in `nvbench run`: two pools of the code as it is (a1, a2) and one fire-drill pool per --drills
percentage (`nvbench run --fire-drill`: calibrated extra work in every measured step, rows flagged). The
pools are interleaved (harness.orchestrate.workflows.ab.run_interleaved): round k runs the k-th repeat of every pool in a random
order, so drift of the machine lands on all pools alike.

Analyse: --trials comparisons per setting drawn from the pools, each judged by harness.analysis.judge.compare exactly
as `nvbench report` judges two runs with n repeats per side (default thresholds, so adjusted for the
machine-speed probe and testing throughput and the fast-step rate; --no-speed-adjust / --no-fast-steps
judge as `nvbench report` does with those flags, and pools collected before the rows recorded the
fast-step rate get it from their step files; the floor is applied afterwards, so one set of trials gives
the rates for every floor in --floors):
  A/A:        2n distinct repeats of the unchanged code, split n | n at random: any verdict other than
              `unchanged` is a false alarm;
  A/A drift:  n repeats from the later half of the session against n from the earlier half: the same
              code, but time has passed, as between a baseline and a nightly run;
  A/B:        n unchanged repeats as baseline, n of a fire-drill pool as candidate: `regression` is a
              detection.
  nightly:    ci/nightly.sh's pipeline where the code changed: a screen (n later-half candidate repeats
              against n earlier-half unchanged ones), then an interleaved A/B of --confirm-repeats
              rounds not used by the screen; the job fails on a regression the A/B confirms. Reported
              for a strict screen (`regression`) and the nightly's loose one (harness.orchestrate.workflows.nightly).
The realised slowdown of each drill pool (its mean vs the unchanged pools) is printed next to the nominal,
with how well the probe tracks each pool (correlation of log throughput with log probe time, and the CV
left after regressing it out), and for each n the smallest floor that keeps both A/A settings at <= 1 %
alarms.

What this captures: real processes, real step-time noise of this box under whatever else it runs (other
engineers' tests and training jobs), the real verdict code. What it does not: (1) trials resample a finite
pool, so they are not independent; a rate's uncertainty is closer to that of pool / (2n) independent
comparisons than of --trials; (2) the random A/A split is exchangeable by construction, which is exactly
the case where the permutation test's guarantee holds; real baselines are older than their candidates,
and the A/A drift split is the only glimpse of that here (one session, not days: thermal state, driver
updates, another node are not in it); (3) one cell and one model; a GPU's noise is a different animal;
(4) the drill's slowdown is exact by construction on CPU (each step adds PCT % of its own time), so the
realised change printed per pool measures the noise of the pools, not the drill.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.analysis.judge import compare
from harness.analysis.judge.evidence import holm_within# noqa: E402
from harness.analysis.load.runs import load_run# noqa: E402
from harness.analysis.judge.run import RunData
from harness.analysis.judge.verdict import Thresholds# noqa: E402
from harness.orchestrate.session import capabilities, runfolder  # noqa: E402
from harness.orchestrate.workflows.nightly import SCREEN_P  # noqa: E402  the nightly's loose screen
from harness.stats import window

MATRIX = """\
# benchmarks/detector.py: one small cell, repeated in pools.
version = 1
[benchmark]
name = "detector"
model = "resnet18"
num_classes = 10
image_size = 32
batch_size = 16
warmup_steps = 5
measure_steps = {measure_steps}
val_steps = 1
timeout_s = 300
[data]
workers = 0
[axes]
backend = ["synthetic"]
[run]
repeats = {repeats}
order = "sequential"
threads_per_process = 1
nvtx = false
malloc = "{malloc}"
"""

BASE_POOLS = ("a1", "a2")


def _pools(drills: list[float]) -> dict[str, float]:
    return {**{name: 0.0 for name in BASE_POOLS}, **{f"fd{d:g}": d for d in drills}}


# ---------------------------------------------------------------------------------------------
# collect


def collect(out: Path, *, repeats: int, drills: list[float], measure_steps: int, malloc: str, seed: int) -> None:
    from harness.orchestrate.workflows import ab
    from harness.results.env import collect_env, env_key
    from harness.matrix.cells import expand
    from harness.matrix.parse import load_matrix

    out.mkdir(parents=True, exist_ok=True)
    matrix_path = out / "detector.toml"
    if not matrix_path.exists():
        matrix_path.write_text(MATRIX.format(repeats=repeats, measure_steps=measure_steps, malloc=malloc))
    matrix = load_matrix(matrix_path)
    cells = expand(matrix)
    env = collect_env()
    key = env_key(env)
    caps = capabilities.probe_capabilities(matrix.run.device, env)
    sides = []
    for name, pct in _pools(drills).items():
        if not (out / name / runfolder.PLAN).exists():
            runfolder.create_run(matrix, cells, run_dir=out / name, reports_root=out, smoke=False, only=[], env=env,
                                 fire_drill_pct=pct)
        sides.append(ab.side_for(out / name, caps=caps, env=env, env_key=key, notify=_log))
    total = sum(len(s.jobs) for s in sides)
    started, done = time.monotonic(), [0]

    def progress(side: str, row: dict) -> None:
        done[0] += 1
        value = f"{row['throughput_img_per_s']:.1f} img/s" if row["status"] == "ok" else row["reason"]
        elapsed = time.monotonic() - started
        _log(f"[{done[0]}/{total} {elapsed / 60:.1f} min] {side:>5} r{row['repeat']:<3} {row['status']} {value}")

    _log(f"collecting {total} jobs into {out} (pools: {', '.join(s.name for s in sides)})")
    ab.run_interleaved(sides, seed=seed, on_done=progress)
    _log(f"collected in {(time.monotonic() - started) / 60:.1f} min")


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# analyse


def _rows(run: RunData) -> list[dict]:
    """The ok rows of a pool; rows from before nvbench recorded the fast-step rate get it from their step
    file, computed as the worker computes it (window.fast_step_rate over the measured steps)."""
    rows = [dict(r) for r in run.rows if r["status"] == "ok"]
    for r in rows:
        if not (r.get("fast_step_img_per_s") or 0) > 0:
            steps = pq.read_table(Path(run.path) / "steps" / f"{r['cell_id']}-r{r['repeat']}.parquet").to_pandas()
            measured = steps[~steps["is_warmup"] & (steps["rank"] == 0)]["step_time_s"].to_numpy()
            r["fast_step_img_per_s"] = window.fast_step_rate(measured, r["images_measured"] / r["num_measure_steps"])
    return rows


def _as_run(rows: list[dict], run_id: str, env: dict) -> RunData:
    return RunData(path=run_id, run_id=run_id, created_at="", environment=env, rows=tuple(rows))


TRIAL = ("throughput change %", "throughput significant", "fast-step change %", "fast-step significant",
         "cell p-value", "decided change %")
"""What one trial keeps: the verdict's ingredients before the floor is applied (fast-step columns NaN /
0 when the comparison tested throughput alone)."""


def _trial(base_rows: list[dict], cand_rows: list[dict], env: dict, th: Thresholds) -> tuple[float, ...]:
    """One comparison judged by compare.compare_runs, as TRIAL. A metric is significant as in
    evidence._decide (Holm within the cell at the level of a one-cell family, fdr_q) with its interval
    excluding 0, so one set of trials serves every floor: `regression` at floor F = some metric
    significant with change <= -F, exactly the rule of evidence._decide."""
    comparison = compare.compare_runs(_as_run(cand_rows, "cand", env), _as_run(base_rows, "base", env),
                                      dataclasses.replace(th, floor_pct=0.0))
    (v,) = comparison.verdicts
    metrics = [m for m in (v.throughput, v.fast_step) if m is not None and m.p_value is not None]
    held = holm_within([m.p_value for m in metrics], th.fdr_q)
    sig = [h and (m.ci_high_pct < 0 or m.ci_low_pct > 0) for h, m in zip(held, metrics)]
    fast = (metrics[1].effect_pct, sig[1]) if len(metrics) > 1 else (np.nan, False)
    return v.throughput.effect_pct, sig[0], *fast, v.p_value, v.decided_effect_pct


def _relabel(rows: list[dict]) -> list[dict]:
    return [r | {"repeat": i} for i, r in enumerate(rows)]


def _draws(rng, base_pool: list[dict], cand_pool: list[dict] | None, n: int, trials: int, env: dict,
           th: Thresholds) -> np.ndarray:
    """trials x TRIAL. cand_pool None: A/A, 2n distinct repeats of base_pool split n | n."""
    out = np.empty((trials, len(TRIAL)))
    for t in range(trials):
        if cand_pool is None:
            pick = rng.choice(len(base_pool), 2 * n, replace=False)
            base, cand = [base_pool[i] for i in pick[:n]], [base_pool[i] for i in pick[n:]]
        else:
            base = [base_pool[i] for i in rng.choice(len(base_pool), n, replace=False)]
            cand = [cand_pool[i] for i in rng.choice(len(cand_pool), n, replace=False)]
        out[t] = _trial(_relabel(base), _relabel(cand), env, dataclasses.replace(th, seed=t))
    return out


def _pipeline_draws(rng, a_rows: list[dict], x_rows: list[dict] | None, n: int, m: int, trials: int, env: dict,
                    th: Thresholds) -> np.ndarray | None:
    """trials x (TRIAL of the screen, TRIAL of the confirmation): ci/nightly.sh
    with an A/B confirmation. The screen judges n candidate repeats from the later half of the session
    against n unchanged repeats from the earlier half (a baseline from an earlier night). The confirmation
    is an interleaved A/B: m rounds of the collection (every round ran one repeat of every pool, in random
    order), each giving a candidate repeat and an unchanged one from the same round, none used by the
    screen. x_rows None: the candidate is the unchanged code too (a1 against a2 of a round, sides drawn
    at random), so a confirmed regression is a false alarm. None when the pools have too few rounds (a
    draw whose screen leaves fewer than m usable rounds is drawn again, up to 10 x trials attempts)."""
    a_by_round: dict[int, list[dict]] = {}
    for r in a_rows:
        a_by_round.setdefault(r["repeat"], []).append(r)
    early, late = _halves(a_rows)
    cand_pool = late if x_rows is None else _halves(x_rows)[1]
    x_by_round = {r["repeat"]: r for r in x_rows} if x_rows is not None else {}
    width = len(TRIAL)
    out = np.empty((trials, 2 * width))
    t = attempts = 0
    while t < trials:
        attempts += 1
        if attempts > 10 * trials:
            return None
        base = [early[i] for i in rng.choice(len(early), n, replace=False)]
        cand = [cand_pool[i] for i in rng.choice(len(cand_pool), n, replace=False)]
        used = {id(r) for r in base + cand}
        pairs = []
        for k in rng.permutation(sorted(a_by_round)):
            free = [r for r in a_by_round[k] if id(r) not in used]
            if x_rows is None and len(free) >= 2:
                pairs.append(tuple(free[i] for i in rng.permutation(len(free))[:2]))
            elif x_rows is not None and free and k in x_by_round and id(x_by_round[k]) not in used:
                pairs.append((free[rng.integers(len(free))], x_by_round[k]))
            if len(pairs) == m:
                break
        if len(pairs) < m:  # the screen took both unchanged repeats of too many rounds: draw again
            continue
        th_t = dataclasses.replace(th, seed=t)
        out[t, :width] = _trial(_relabel(base), _relabel(cand), env, th_t)
        out[t, width:] = _trial(_relabel([a for a, _ in pairs]), _relabel([x for _, x in pairs]), env, th_t)
        t += 1
    return out


def _halves(rows: list[dict]) -> tuple[list[dict], list[dict]]:
    by_time = sorted(rows, key=lambda r: r["started_at"])
    return by_time[: len(by_time) // 2], by_time[len(by_time) // 2:]


def _calls(trial: np.ndarray, floor_pct: float) -> tuple[np.ndarray, np.ndarray]:
    """(any verdict other than unchanged, a regression) per trial at this floor."""
    alarm = np.zeros(trial.shape[0], dtype=bool)
    regression = alarm.copy()
    for effect, significant in ((trial[:, 0], trial[:, 1]), (trial[:, 2], trial[:, 3])):
        significant = significant.astype(bool)
        with np.errstate(invalid="ignore"):  # NaN: the metric was not tested
            alarm |= significant & (np.abs(effect) >= floor_pct)
            regression |= significant & (effect <= -floor_pct)
    return alarm, regression


def rates(draws: np.ndarray, floor_pct: float) -> dict[str, float]:
    k = len(TRIAL)
    alarm, regression = _calls(draws[:, :k], floor_pct)
    out = {"alarm": float(np.mean(alarm)), "regression": float(np.mean(regression))}
    if draws.shape[1] == 2 * k:  # a nightly pipeline: the job fails on a regression confirmed by the A/B
        strict = regression
        loose = strict | ((draws[:, 5] < 0) & (draws[:, 4] <= SCREEN_P))  # as harness.orchestrate.workflows.nightly.targets
        confirmed = _calls(draws[:, k:], floor_pct)[1]
        out |= {"screen_strict": float(np.mean(strict)), "screen_loose": float(np.mean(loose)),
                "fail_strict": float(np.mean(strict & confirmed)), "fail_loose": float(np.mean(loose & confirmed))}
    return out


def simulate(a_rows: list[dict], drill_rows: dict[str, list[dict]], env: dict, *, n: int, trials: int,
             th: Thresholds, seed: int, confirm: int = 0) -> dict:
    """Per-trial outcomes with n repeats per side: A/A random split, A/A later-vs-earlier half (drift
    within the session), A/B for every drill pool, and the nightly pipeline (screen against an earlier
    baseline, then an A/B confirmation of `confirm` repeats a side, 0: n) for the unchanged code and
    every drill pool where the pools have rounds enough."""
    rng = np.random.default_rng(seed)
    early, late = _halves(a_rows)
    out = {"aa": _draws(rng, a_rows, None, n, trials, env, th)}
    if min(len(early), len(late)) >= n:
        out["aa_drift"] = _draws(rng, early, late, n, trials, env, th)
    for name, rows in drill_rows.items():
        if len(rows) >= n:
            out[name] = _draws(rng, a_rows, rows, n, trials, env, th)
    m = confirm or n
    if min(len(early), len(late)) >= n:
        for name, rows in {"aa": None, **drill_rows}.items():
            if rows is None or len(rows) - len(rows) // 2 >= n:
                draws = _pipeline_draws(rng, a_rows, rows, n, m, trials, env, th)
                if draws is not None:
                    out[f"nightly_{name}"] = draws
    return out


def speed_explained(rows: list[dict]) -> tuple[float, float] | tuple[None, None]:
    """(correlation of log throughput with log probe time, residual CV after regressing it out) over a
    pool's repeats; Nones when the rows carry no probe."""
    probe = np.array([r.get("speed_probe_s") or np.nan for r in rows], dtype=float)
    if len(rows) < 3 or not np.all(probe > 0):
        return None, None
    y, x = np.log([r["throughput_img_per_s"] for r in rows]), np.log(probe)
    slope, intercept = np.polyfit(x, y, 1)
    return float(np.corrcoef(x, y)[0, 1]), float(np.std(y - slope * x - intercept, ddof=2))


def pool_summary(a_rows: list[dict], drill_rows: dict[str, list[dict]]) -> list[dict]:
    a = np.array([r["throughput_img_per_s"] for r in a_rows])
    a_fast = np.array([r["fast_step_img_per_s"] for r in a_rows])
    out = []
    for name, rows in {"a (a1 + a2)": a_rows, **drill_rows}.items():
        x = np.array([r["throughput_img_per_s"] for r in rows])
        fast = np.array([r["fast_step_img_per_s"] for r in rows])
        if x.size < 2:
            continue
        corr, resid_cv = speed_explained(rows)
        out.append({"pool": name, "repeats": x.size, "mean_img_per_s": x.mean(), "cv": x.std(ddof=1) / x.mean(),
                    "realised_pct": 100 * (x.mean() / a.mean() - 1),
                    "fast_cv": fast.std(ddof=1) / fast.mean(),
                    "fast_realised_pct": 100 * (fast.mean() / a_fast.mean() - 1),
                    "unsteady": sum(r["is_steady"] is False for r in rows),
                    "probe_corr": corr, "adjusted_cv": resid_cv})
    return out


def smallest_floor(draws: dict[str, np.ndarray], *, target: float = 0.01, step: float = 0.5) -> float:
    """The smallest floor (a multiple of `step`) at which every A/A setting alarms in <= target of trials."""
    floor = 0.0
    while any(rates(d, floor)["alarm"] > target for k, d in draws.items() if k.startswith("aa")):
        floor += step
    return floor


def analyze(out: Path, *, sizes: list[int], trials: int, seed: int, th: Thresholds,
            floors: list[float], confirm: int = 0) -> dict:
    pools = {p.name: p for p in (out.iterdir() if out.is_dir() else []) if (p / "manifest.json").exists()}
    if not all(name in pools for name in BASE_POOLS):
        raise SystemExit(f"{out}: no collection here (expected {', '.join(BASE_POOLS)} pools); run without --analyze")
    runs = {name: load_run(path) for name, path in sorted(pools.items())}
    env = runs["a1"].environment
    a_rows = [r for name in BASE_POOLS for r in _rows(runs[name])]
    if th.exclude_unsteady:
        a_rows = [r for r in a_rows if r["is_steady"] is not False]
    drills = sorted((n for n in runs if n not in BASE_POOLS), key=lambda n: float(n[2:]))
    drill_rows = {name: [r for r in _rows(runs[name]) if not th.exclude_unsteady or r["is_steady"] is not False]
                  for name in drills}
    failed = sum(r["status"] != "ok" for run in runs.values() for r in run.rows)
    results = {"thresholds": dataclasses.asdict(th), "trials": trials, "failed_rows": failed, "confirm": confirm,
               "pools": pool_summary(a_rows, drill_rows), "sizes": []}
    for n in sizes:
        if 2 * n > len(a_rows):
            continue
        draws = simulate(a_rows, drill_rows, env, n=n, trials=trials, th=th, seed=seed + n, confirm=confirm)
        results["sizes"].append({
            "n": n, "smallest_floor_for_1pct_pct": smallest_floor(draws),
            "aa_abs_change_p99_pct": float(np.quantile(np.abs(draws["aa"][:, 0]), 0.99)),
            "by_floor": {f"{floor:g}": {k: rates(d, floor) for k, d in draws.items()} for floor in floors}})
    return results


def render(results: dict) -> str:
    th = results["thresholds"]
    lines = ["Pools (realised = pool mean vs the unchanged pools; probe corr and CV after: correlation of log "
             "throughput with log speed-probe time, and the spread left once it is regressed out):", "",
             "| pool | repeats | mean img/s | CV | realised change | fast-step CV | fast-step change | unsteady | "
             "probe corr | CV after |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for p in results["pools"]:
        corr = "-" if p.get("probe_corr") is None else f"{p['probe_corr']:+.2f}"
        after = "-" if p.get("adjusted_cv") is None else f"{100 * p['adjusted_cv']:.1f}%"
        lines.append(f"| {p['pool']} | {p['repeats']} | {p['mean_img_per_s']:.1f} | {100 * p['cv']:.1f}% | "
                     f"{p['realised_pct']:+.1f}% | {100 * p['fast_cv']:.1f}% | {p['fast_realised_pct']:+.1f}% | "
                     f"{p['unsteady']} | {corr} | {after} |")
    adjust = "speed-adjusted where every repeat has a probe" if th.get("speed_adjust") else "not speed-adjusted"
    adjust += "; throughput and the fast-step rate" if th.get("fast_steps") else "; throughput alone"
    lines += ["", f"Verdicts, {results['trials']} trials per number ({adjust}; FDR q {th['fdr_q']:g}, min repeats "
              f"{th['min_repeats']}{', unsteady repeats left out' if th['exclude_unsteady'] else ''}). A/A: any "
              "alarm (regression or improvement); A/A drift: later half of the session vs the earlier half; "
              "fdP: `regression` verdicts against a P % fire drill.", ""]
    for size in results["sizes"]:
        first = next(iter(size["by_floor"].values()))
        names = [k for k in first if not k.startswith("nightly_")]
        lines += [f"n = {size['n']} repeats per side (A/A |change| p99 {size['aa_abs_change_p99_pct']:.1f}%; "
                  f"smallest floor keeping every A/A setting <= 1 %: {size['smallest_floor_for_1pct_pct']:g}%)", "",
                  "| floor | " + " | ".join(("A/A alarms" if k == "aa" else "A/A drift alarms" if k == "aa_drift"
                                               else f"detect {k}") for k in names) + " |",
                  "|---|" + "---|" * len(names)]
        for floor, by in size["by_floor"].items():
            cells = [100 * (by[k]["alarm"] if k.startswith("aa") else by[k]["regression"]) for k in names]
            lines.append(f"| {floor}% | " + " | ".join(f"{c:.1f}%" for c in cells) + " |")
        lines.append("")
        pipeline = [k for k in first if k.startswith("nightly_")]
        if pipeline:
            m = results.get("confirm") or size["n"]
            lines += [f"n = {size['n']}, the nightly pipeline (screen: n later-half repeats against n earlier-half "
                      f"ones; confirmation: an A/B of {m} rounds, each an unchanged and a candidate repeat). "
                      f"Job fails after a strict screen "
                      f"(a `regression` verdict) / a loose one (a slowdown with p <= {SCREEN_P:g}); in brackets "
                      "the share of trials the screen sent to the A/B:", "",
                      "| floor | " + " | ".join("A/A fails" if k == "nightly_aa" else f"detect {k[8:]}"
                                               for k in pipeline) + " |", "|---|" + "---|" * len(pipeline)]
            for floor, by in size["by_floor"].items():
                cells = [f"{100 * by[k]['fail_strict']:.1f} / {100 * by[k]['fail_loose']:.1f}% "
                         f"({100 * by[k]['screen_strict']:.0f} / {100 * by[k]['screen_loose']:.0f}%)" for k in pipeline]
                lines.append(f"| {floor}% | " + " | ".join(cells) + " |")
            lines.append("")
    if results["failed_rows"]:
        lines.append(f"{results['failed_rows']} repeat(s) did not finish ok and were left out.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=ROOT / "reports" / "detector", help="collection folder")
    p.add_argument("--analyze", type=Path, metavar="DIR", help="only analyse an existing collection")
    p.add_argument("--repeats", type=int, default=12, help="repeats per pool (default 12: 60 jobs, ~30 min here)")
    p.add_argument("--drills", default="2,5,10", help="fire-drill percentages, comma-separated (default 2,5,10)")
    p.add_argument("--measure-steps", type=int, default=300,
                   help="measured steps per repeat (default 300: ~25 s here; 30 left the noise of short windows)")
    p.add_argument("--malloc", choices=("stable", "system"), default="stable",
                   help="run.malloc of the cell (default stable, nvbench's default; system: glibc's defaults)")
    p.add_argument("--sizes", default="5,10", help="repeats per side to evaluate (default 5,10)")
    p.add_argument("--trials", type=int, default=1000, help="comparisons per setting (default 1000)")
    p.add_argument("--confirm-repeats", type=int, default=0, metavar="M",
                   help="repeats per side of the nightly pipeline's A/B confirmation (default: n, as the screen)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--floors", default="0,1,2,3,5", help="practical floors (%%) to tabulate (default 0,1,2,3,5)")
    p.add_argument("--exclude-unsteady", action="store_true", help="analyse with unsteady repeats left out")
    p.add_argument("--speed-adjust", action=argparse.BooleanOptionalAction, default=Thresholds().speed_adjust,
                   help="judge adjusted for the machine-speed probe (Thresholds.speed_adjust; default on)")
    p.add_argument("--fast-steps", action=argparse.BooleanOptionalAction, default=Thresholds().fast_steps,
                   help="test the fast-step rate beside throughput (Thresholds.fast_steps; default on)")
    args = p.parse_args(argv)
    out = args.analyze or args.out
    if not args.analyze:
        collect(out, repeats=args.repeats, drills=[float(d) for d in args.drills.split(",")],
                measure_steps=args.measure_steps, malloc=args.malloc, seed=args.seed)
    th = Thresholds(exclude_unsteady=args.exclude_unsteady, speed_adjust=args.speed_adjust, fast_steps=args.fast_steps)
    t0 = time.monotonic()
    results = analyze(out, sizes=[int(x) for x in args.sizes.split(",")], trials=args.trials, seed=args.seed, th=th,
                      floors=[float(x) for x in args.floors.split(",")], confirm=args.confirm_repeats)
    results["analysis_s"] = time.monotonic() - t0
    suffix = (("-steady" if args.exclude_unsteady else "") + ("" if args.speed_adjust else "-unadjusted")
              + ("" if args.fast_steps else "-throughput")
              + (f"-confirm{args.confirm_repeats}" if args.confirm_repeats else ""))
    (out / f"results{suffix}.json").write_text(json.dumps(results, indent=2, default=float) + "\n")
    table = render(results)
    (out / f"results{suffix}.md").write_text(table + "\n")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
