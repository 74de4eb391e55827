"""What the interference meter and the machine-speed probe see, and how often a window is flagged, on this machine:
quiet, beside a neighbour that takes the cores in bursts, and beside one that slows them uniformly; then the A/B of
issue 50's acceptance (a neighbour from the third pair to the sixth).

    python benchmarks/interference.py flags --out reports/interference --repeats 50   # the flag's rates (~15 min)
    python benchmarks/interference.py flags --out reports/quiet --repeats 50 --settings quiet  # quiet alone
    python benchmarks/interference.py ab --out reports/interference-ab               # the A/B (~5 min)

Run it with nothing else on the machine. `flags` runs tests/conftest.py's tiny cell (resnet18, 16 px, one thread,
a 30-step window) --repeats times per setting, each setting its own `nvbench run`:
- quiet: nothing else;
- bursts: two processes, one per core, each busy 0.3 s then asleep 0.3 s (a torch matmul loop in one of them);
- uniform: two processes, one per core, busy all the time at the lowest priority (nice 19).
For each: the share of windows flagged (foreign_cpu_frac above the threshold), the meter's median and range, the
probe's median, and the throughput's median. `ab`: `nvbench ab` of the same cell against itself, 8 repeats a side,
with the neighbour (bursts' two processes, busy all the time) started when the third pair is done and stopped as
long after as the first three pairs took (three pairs' time: the A/B waits for a neighbour to leave before a
re-run, so counting pairs would keep it there): which rows were flagged, how many ran again, and the verdict.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.catalogue import col  # noqa: E402
from harness.catalogue.cells import INTERFERENCE_THRESHOLD  # noqa: E402

sys.path.insert(0, str(ROOT / "tests"))
from conftest import TINY  # noqa: E402


def matrix(folder: Path, repeats: int) -> Path:
    text = TINY.format(axes='backend = ["synthetic"]', repeats=repeats, timeout=300, cache=folder / "cache",
                       nvtx="false", device="cpu").replace("measure_steps = 3", "measure_steps = 30")
    path = folder / "tiny.toml"
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _busy(core: int, on_s: float, off_s: float, matmul: bool, nice: int) -> None:
    os.sched_setaffinity(0, {core})
    os.nice(nice)
    os.setsid()
    if matmul:
        import torch

        torch.set_num_threads(2)
        a = torch.randn(256, 256)
    while True:
        end = time.perf_counter() + on_s
        while time.perf_counter() < end:
            if matmul:
                a @ a
        if off_s:
            time.sleep(off_s)


def neighbour(kind: str) -> list[multiprocessing.Process]:
    """Two busy processes, one per core of this machine's first two."""
    cores = sorted(os.sched_getaffinity(0))[:2]
    on_off, nice = {"bursts": ((0.3, 0.3), 0), "uniform": ((1.0, 0.0), 19), "busy": ((1.0, 0.0), 0)}[kind]
    procs = [multiprocessing.get_context("spawn").Process(target=_busy, args=(c, *on_off, i == 0, nice), daemon=True)
             for i, c in enumerate(cores)]
    for p in procs:
        p.start()
    return procs


def stop(procs: list[multiprocessing.Process]) -> None:
    for p in procs:
        p.terminate()
        p.join()


def rows_of(folder: Path) -> list[dict]:
    return [r for r in pq.read_table(folder / "cells").to_pylist()]


def flags(args: argparse.Namespace) -> None:
    print(f"threshold {INTERFERENCE_THRESHOLD:.0%}; {args.repeats} repeats a setting")
    print("| setting | flagged | meter median [min, max] | probe median ms | img/s median |")
    print("|---|---|---|---|---|")
    for kind in args.settings:
        out = args.out / kind
        path = matrix(args.out, args.repeats)
        procs = neighbour(kind) if kind != "quiet" else []
        try:
            subprocess.run([sys.executable, "-m", "harness", "run", str(path), "--out", str(out), "--quiet"],
                           check=False, cwd=ROOT, stdout=subprocess.DEVNULL)
        finally:
            stop(procs)
        ok = [r for r in rows_of(out) if r["status"] == "ok"]
        share = [r[col.foreign_cpu_frac] for r in ok if r[col.foreign_cpu_frac] is not None]
        hit = sum(s > INTERFERENCE_THRESHOLD for s in share)
        probe = [r[col.speed_probe_s] for r in ok if r[col.speed_probe_s]]
        print(f"| {kind} | {hit} of {len(share)} | {statistics.median(share):.1%} [{min(share):.1%}, "
              f"{max(share):.1%}] | {1e3 * statistics.median(probe):.3f} | "
              f"{statistics.median(r[col.throughput_img_per_s] for r in ok):.1f} |", flush=True)


def ab(args: argparse.Namespace) -> None:
    path = matrix(args.out, 8)
    out = args.out / "ab"
    proc = subprocess.Popen([sys.executable, "-m", "harness", "ab", str(path), "--repeats", "8", "--out", str(out)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    procs: list = []
    pairs, log, started, lasts = 0, [], time.monotonic(), 0.0
    stopper = None

    def stop_later(after_s: float) -> None:  # the neighbour stays as long as three pairs took without it
        time.sleep(after_s)
        stop(procs)
        print(f"-- neighbour stopped after {after_s:.0f} s", flush=True)

    for line in proc.stdout:  # each side's job line as it ends: "A       ok <cell> r3 ..."
        log.append(line)
        sys.stdout.write(line)
        if line.startswith("B ") and " ok " in line and "r" in line:
            pairs += 1
            if pairs == 3 and not procs:
                lasts = time.monotonic() - started
                procs = neighbour("busy")
                print(f"-- neighbour started (three pairs took {lasts:.0f} s)", flush=True)
                stopper = threading.Thread(target=stop_later, args=(lasts,), daemon=True)
                stopper.start()
    proc.wait()
    if stopper is not None:
        stopper.join()
    stop(procs)
    for side in ("a", "b"):
        for r in sorted(rows_of(out / side), key=lambda r: (r["repeat"], r["status"])):
            print(side, r["repeat"], r["status"], f"{r[col.foreign_cpu_frac] or 0:.1%}", r["is_steady"],
                  (r["reason"] or "")[:80])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=("flags", "ab"))
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--repeats", type=int, default=50)
    p.add_argument("--settings", nargs="+", default=["quiet", "bursts", "uniform"],
                   choices=("quiet", "bursts", "uniform"), help="flags: which settings (default: all three)")
    args = p.parse_args()
    (flags if args.what == "flags" else ab)(args)


if __name__ == "__main__":
    main()
