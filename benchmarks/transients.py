"""How often each rule flags a start transient, and how often it flags a clean window: today's steadiness test
(Mann-Kendall + Pettitt on 30 batch means), the MSER truncation rule alone (MSER-5 on the window: it truncates
anything; MSER-1 on warm-up + window: the settling point lies inside the window), the start-transient check cells
run (harness.stats.settle.start_transient) and two variants of it (MSER-5 for the settling point; the settled
steps' spread as their MAD instead of their step-to-step noise), and what a cell records (check or today's test).

    python benchmarks/transients.py --synthetic 500                     # synthetic series only (~1 min)
    python benchmarks/transients.py --collect reports/transients --repeats 10   # real runs (~15 min here) + tables
    python benchmarks/transients.py --runs reports/transients/w*/ other/w*/   # tables from run folders (same names pooled)

Synthetic: --synthetic series per setting of a 3-step warm-up (its first step 5x, as a process's first step
is) and a 30-step window of i.i.d. step times at a CV of 1, 2, 5 or 10 % (normal; --noise lognormal for a
right-skewed noise), with 1, 3 or 6 slow steps at 1.5-10x either at the window's start or in its middle
(steps 12-17), or without any.

Real: every window of the run folders' steps files (rank 0), taken as it ran. --collect makes them: one
synthetic-data resnet18 cell (16 px, batch 4, one thread: tests/conftest.py's tiny cell with a 30-step
window), --repeats processes for each warm-up setting (0, 1, 3, 5 steps and auto), each setting its own
`nvbench run`. A window after 0 warm-up steps holds the process's first step, a real start transient; after
5 steps or auto the window should start settled, so a flag there is a false alarm or a real hiccup. Each
clean window (5 steps or auto, or of any run folder given to --runs but w0, w1 and w3) is also checked with
its first 1 or 3 steps scaled by 2 or 3 (the rest of the series as it ran): detection on this machine's own
noise.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.stats import settle, window

WARMUP = np.array([5.0, 1.0, 1.0])
"""Synthetic warm-up steps, in units of the settled step time: a slow first step, then settled."""
WINDOW_STEPS = 30
CVS = (0.01, 0.02, 0.05, 0.10)
COUNTS = (1, 3, 6)
RATIOS = (1.5, 2.0, 3.0, 10.0)
MID = 12
"""Where a mid-window transient starts (window step index)."""

Rule = Callable[[np.ndarray, np.ndarray], bool]
RULES: dict[str, Rule] = {
    "today (MK + Pettitt)": lambda warm, win: not window.steadiness(win).is_steady,
    "MSER-5, window": lambda warm, win: settle.mser(win, batch=5) > 0,
    "MSER-1, series": lambda warm, win: settle.mser(np.concatenate([warm, win]), most=warm.size + win.size // 2)
    > warm.size,
    "check, MSER-5": lambda warm, win: settle.start_transient(warm, win, batch=5).found,
    "check, MAD spread": lambda warm, win: settle.start_transient(warm, win, local=False).found,
    "check": lambda warm, win: settle.start_transient(warm, win).found,
    "cell: check or today": lambda warm, win: settle.start_transient(warm, win).found
    or not window.steadiness(win).is_steady,
}


def noise(rng: np.random.Generator, cv: float, size: int, kind: str) -> np.ndarray:
    """Settled step times around 1 at coefficient of variation `cv`."""
    if kind == "lognormal":
        sigma = np.sqrt(np.log1p(cv * cv))
        return rng.lognormal(-sigma * sigma / 2, sigma, size)
    return np.maximum(rng.normal(1.0, cv, size), 0.05)


def synthetic_rates(num: int, kind: str, seed: int = 0) -> dict[tuple, dict[str, float]]:
    """(place, count, ratio, cv) -> rule -> fraction of `num` series flagged; place 'clean' has count 0."""
    rng = np.random.default_rng(seed)
    settings = [("clean", 0, 1.0)] + [(place, k, r) for place in ("start", "mid") for k in COUNTS for r in RATIOS]
    out = {}
    for place, k, r in settings:
        for cv in CVS:
            flags = dict.fromkeys(RULES, 0)
            for _ in range(num):
                warm = WARMUP * noise(rng, cv, WARMUP.size, kind)
                win = noise(rng, cv, WINDOW_STEPS, kind)
                at = 0 if place == "start" else MID
                win[at:at + k] *= r
                for name, rule in RULES.items():
                    flags[name] += rule(warm, win)
            out[(place, k, r, cv)] = {name: n / num for name, n in flags.items()}
    return out


def print_synthetic(rates: dict[tuple, dict[str, float]], num: int, kind: str) -> None:
    cvs = " / ".join(f"{100 * cv:g}" for cv in CVS)
    print(f"\n### Synthetic series ({num} per setting, {kind} noise): % flagged at step CV {cvs} %\n")
    print(f"| series | {' | '.join(RULES)} |\n|---|{'---|' * len(RULES)}")
    for place, k, r in sorted({key[:3] for key in rates}, key=lambda s: (s[0] != "clean", s[0] != "start", s[1:])):
        label = "no transient" if place == "clean" else f"{place}: {k} step(s) at {r:g}x"
        cells = [" / ".join(f"{100 * rates[(place, k, r, cv)][name]:.0f}" for cv in CVS) for name in RULES]
        print(f"| {label} | {' | '.join(cells)} |")


# ---------------------------------------------------------------------------------------------
# real series


CELL = """
version = 1
[benchmark]
name = "transients-w{warmup}"
model = "resnet18"
num_classes = 10
image_size = 16
batch_size = 4
warmup_steps = {warmup_toml}
measure_steps = {steps}
val_steps = 0
timeout_s = 300
[axes]
backend = ["synthetic"]
[run]
repeats = {repeats}
threads_per_process = 1
"""

WARMUPS = ("0", "1", "3", "5", "auto")
SHORT_WARMUPS = ("w0", "w1", "w3")
"""Collected runs whose windows may open cold: never scaled as settled windows."""


def collect(out: Path, repeats: int, steps: int) -> list[Path]:
    """One real `nvbench run` per warm-up setting into OUT/w<setting>; returns the run folders."""
    runs = []
    for warmup in WARMUPS:
        run = out / f"w{warmup}"
        if not (run / "cells").is_dir():
            matrix = out / f"w{warmup}.toml"
            out.mkdir(parents=True, exist_ok=True)
            toml = '"auto"' if warmup == "auto" else warmup
            matrix.write_text(textwrap.dedent(CELL.format(warmup=warmup, warmup_toml=toml, steps=steps,
                                                          repeats=repeats)))
            print(f"collecting {run} ...", file=sys.stderr, flush=True)
            subprocess.run([sys.executable, "-m", "harness", "run", str(matrix), "--out", str(run), "--no-progress"],
                           cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
        runs.append(run)
    return runs


def windows_of(run: Path) -> list[tuple[np.ndarray, np.ndarray]]:
    """(warm-up, window) step times of every repeat of a run (rank 0), as they ran."""
    steps = pq.read_table(run / "steps", columns=["cell_id", "repeat", "rank", "step", "is_warmup",
                                                  "step_time_s"]).to_pandas()
    out = []
    for _, g in steps[steps["rank"] == 0].sort_values("step").groupby(["cell_id", "repeat"]):
        t = g["step_time_s"].to_numpy()
        warm = g["is_warmup"].to_numpy()
        out.append((t[warm], t[~warm]))
    return out


def print_real(runs: list[Path]) -> None:
    """Runs of the same folder name (w0, w5, ... of several collections) are pooled into one line."""
    print("\n### Real series: % flagged (windows)\n")
    names = list(RULES)
    print(f"| run | windows | {' | '.join(names)} |\n|---|---|{'---|' * len(names)}")
    pooled: dict[str, list] = {}
    for run in runs:
        pooled.setdefault(run.name, []).extend(windows_of(run))
    clean = []
    for name, series in pooled.items():
        if not series:
            continue
        warm = [w.size for w, _ in series]
        label = f"{name} (warm-up {min(warm)}{f'-{max(warm)}' if max(warm) > min(warm) else ''} steps)"
        if name not in SHORT_WARMUPS:  # w5, wauto, or a run of some other matrix (its own warm-up, e.g. a GPU's)
            clean += series
        rates = [100 * np.mean([RULES[n](w, x) for w, x in series]) for n in names]
        print(f"| {label} | {len(series)} | {' | '.join(f'{r:.0f}' for r in rates)} |")
    for k, r in ((1, 2.0), (1, 3.0), (3, 2.0), (3, 3.0)):
        if clean:
            flagged = [100 * np.mean([RULES[n](w, _scaled(x, k, r)) for w, x in clean]) for n in names]
            print(f"| settled windows, first {k} step(s) x{r:g} | {len(clean)} | "
                  f"{' | '.join(f'{f:.0f}' for f in flagged)} |")


def _scaled(x: np.ndarray, k: int, r: float) -> np.ndarray:
    y = x.copy()
    y[:k] *= r
    return y


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--synthetic", type=int, metavar="N", help="N synthetic series per setting")
    p.add_argument("--noise", choices=("normal", "lognormal"), default="normal")
    p.add_argument("--collect", metavar="DIR", help="make the real runs here (kept; collected ones are reused)")
    p.add_argument("--repeats", type=int, default=10, help="processes per warm-up setting (--collect)")
    p.add_argument("--steps", type=int, default=WINDOW_STEPS, help="measured steps per window (--collect)")
    p.add_argument("--runs", nargs="*", default=[], metavar="RUN", help="run folders to read real series from")
    args = p.parse_args()
    if args.synthetic:
        print_synthetic(synthetic_rates(args.synthetic, args.noise), args.synthetic, args.noise)
    runs = [Path(r) for r in args.runs]
    if args.collect:
        runs += collect(Path(args.collect), args.repeats, args.steps)
    if runs:
        print_real(runs)


if __name__ == "__main__":
    main()
