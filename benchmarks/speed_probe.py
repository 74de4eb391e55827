"""Where the CPU box's noise lives, and how much of it the machine-speed probe sees.

    python benchmarks/speed_probe.py --steps 3000                     # one long process (~5 min here)
    python benchmarks/speed_probe.py --steps 2000 --pair              # two at once, on CPU 0 and CPU 1
    python benchmarks/speed_probe.py --steps 250 --processes 14       # candidate probes across processes
    python benchmarks/speed_probe.py --steps 3000 --drill-check       # does the fire drill move the probe?

Every process trains resnet18 (32 px, batch 16, one thread, synthetic data, nvbench's stable malloc
setting) for --steps timed steps after 10 untimed ones, and after every step, outside the step's time,
runs probes as a CPU cell of `nvbench run` does.

One process (default) or two at once (--pair, pinned to CPU 0 and CPU 1) run harness.cell.instruments.probe's probe.
Printed per window length (steps): the CV of the windows' mean step time within a process; the
correlation of log mean step time with log median probe time over the windows; the CV left once the
probe is regressed out. With --pair also the correlation of the two processes' window means (do both
CPUs slow down together?).

--processes N runs N processes one after another, each timing four candidate probes after every step (in
rotating order): harness.cell.instruments.probe's (sha256 + numpy multiply-adds), a torch 192x192 matmul, a small torch
conv2d and a 4 MiB copy. Printed per candidate: across processes, the correlation of log mean step time
with the log median probe and the CV left after regressing it out, which is what a comparison of
repeats gains; within processes (25-step chunks), the same correlation.

--drill-check asks whether a change to the step can move the probe, which would make an adjustment for it
unsound. One process runs the fire drill of `nvbench run --fire-drill 10` (harness.cell.faults.FireDrill) after
every other step, and after each step times one candidate in rotation, so each candidate is timed right
after a drilled step and right after the plain step before it: harness.cell.instruments.probe's probe as it is (flush,
then the timed computation), the flush read itself, the computation without a flush (probe version /1),
and the computation run twice with the second run timed (warm). Printed per candidate: the drill's
effect on it (median of the paired log ratios, bootstrap 95 % interval) and, per window length, the
correlation of window mean step time with window median probe and the CV left after regressing it out.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.orchestrate.session.job import with_stable_malloc  # noqa: E402

WINDOWS = (20, 100, 300)


def _candidates(torch) -> dict:
    from harness.cell.instruments import probe

    a, b, c = torch.randn(192, 192), torch.randn(192, 192), torch.empty(192, 192)
    image, weight = torch.randn(8, 32, 16, 16), torch.randn(32, 32, 3, 3)
    big = bytearray(4 << 20)
    return {"probe_s": probe._work, "torch_mm_s": lambda: torch.mm(a, b, out=c),
            "torch_conv_s": lambda: torch.nn.functional.conv2d(image, weight, padding=1),
            "copy_4mib_s": lambda: bytes(big)}


def child(steps: int, out: str, candidates: bool) -> None:
    import time

    import torch

    from harness.cell.instruments import probe
    from harness.models import build_model

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = build_model("resnet18", num_classes=10)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(16, 3, 32, 32), torch.randint(0, 10, (16,))
    work = _candidates(torch) if candidates else {"probe_s": probe._work}
    names = list(work)
    rec = {name: np.empty(steps) for name in ["step_s", *names]}
    for i in range(steps + 10):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        step = time.perf_counter() - t0
        k = i % len(names)
        for name in names[k:] + names[:k]:  # rotate, so no candidate always runs first after the step
            t0 = time.perf_counter()
            work[name]()
            if i >= 10:
                rec[name][i - 10] = time.perf_counter() - t0
        if i >= 10:
            rec["step_s"][i - 10] = step
    np.savez(out, **rec)


def drill_child(steps: int, out: str) -> None:
    import time

    import torch

    from harness.cell.instruments import probe
    from harness.cell.faults import FireDrill
    from harness.models import build_model

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = build_model("resnet18", num_classes=10)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(16, 3, 32, 32), torch.randint(0, 10, (16,))
    drill = FireDrill(torch.device("cpu"), 10.0, np.array([]))
    probe._flush_buffer()

    def unflushed():
        t0 = time.perf_counter()
        probe._work()
        return time.perf_counter() - t0

    def warm():
        probe._work()
        return unflushed()

    names = ["probe_s", "flush_read_s", "unflushed_s", "warm_s"]
    rotation = ["probe_s", "unflushed_s", "warm_s"]  # the flush read is timed by the probe's own run
    rec = {name: np.full(steps, np.nan) for name in names}
    rec["step_s"], rec["drilled"] = np.empty(steps), np.zeros(steps, dtype=bool)
    for i in range(steps + 20):  # the first 20 are not recorded
        drilled = i % 2 == 1
        t0 = time.perf_counter()
        drill.begin()
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        step = time.perf_counter() - t0
        if drilled:
            drill()
        name = rotation[(i // 2) % len(rotation)]  # the same candidate after a plain step and the drilled one next
        if name == "probe_s":
            seconds, cost = probe.run_once()
            values = {"probe_s": seconds, "flush_read_s": cost - seconds}
        else:
            values = {name: unflushed() if name == "unflushed_s" else warm()}
        if i >= 20:
            for key, value in values.items():
                rec[key][i - 20] = value
            rec["step_s"][i - 20], rec["drilled"][i - 20] = step, drilled
    np.savez(out, **rec)


def drill_effects(d: dict, seed: int = 0) -> dict:
    """Per candidate: the drill's effect (paired: each drilled step against the plain step before it) and how
    well the candidate tracks the step time over windows."""
    rng = np.random.default_rng(seed)
    step, drilled = d["step_s"], d["drilled"]
    out = {}
    for name in (k for k in d if k not in ("step_s", "drilled")):
        v = d[name]
        plain = np.flatnonzero(~np.isnan(v) & ~drilled)
        plain = plain[(plain + 1 < v.size)]
        plain = plain[drilled[plain + 1] & ~np.isnan(v[plain + 1])]
        ratio = np.log(v[plain + 1] / v[plain])
        boot = np.median(rng.choice(ratio, (2000, ratio.size)), axis=1)
        res = {"median_s": float(np.nanmedian(v)), "pairs": int(ratio.size),
               "drill_effect": float(np.median(ratio)),
               "drill_interval": [float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5))]}
        for size in (100, 300):
            w = windows(step, v, size)
            res[size] = {key: w[key] for key in ("cv", "corr", "cv_after")}
        out[name] = res
    return out


def across_processes(data: list[dict]) -> dict:
    y = np.log([d["step_s"].mean() for d in data])
    out = {"processes": len(data), "step_cv": float(y.std(ddof=1))}
    for name in (k for k in data[0] if k != "step_s"):
        x = np.log([np.median(d[name]) for d in data])
        slope, intercept = np.polyfit(x, y, 1)
        chunks = [windows(d["step_s"], d[name], 25) for d in data]
        wy = np.concatenate([c["y"] - c["y"].mean() for c in chunks])
        wx = np.concatenate([c["x"] - c["x"].mean() for c in chunks])
        out[name] = {"median_s": float(np.median(np.exp(x))), "corr": float(np.corrcoef(x, y)[0, 1]),
                     "cv_after": float((y - slope * x - intercept).std(ddof=2)),
                     "within_corr": float(np.corrcoef(wx, wy)[0, 1])}
    return out


def windows(step_s: np.ndarray, probe_s: np.ndarray, size: int) -> dict:
    """Per window of `size` steps: log mean step time (y) and log median probe time (x, NaN = no probe after
    that step), and their fit."""
    n = step_s.size // size * size
    y = np.log(step_s[:n].reshape(-1, size).mean(1))
    x = np.log(np.nanmedian(probe_s[:n].reshape(-1, size), 1))
    slope, intercept = np.polyfit(x, y, 1)
    return {"windows": int(y.size), "cv": float(y.std(ddof=1)), "corr": float(np.corrcoef(x, y)[0, 1]),
            "cv_after": float((y - slope * x - intercept).std(ddof=2)), "mean_step_s": float(step_s.mean()),
            "probe_median_s": float(np.nanmedian(probe_s)), "x": x, "y": y}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--pair", action="store_true", help="two processes at once, pinned to CPU 0 and CPU 1")
    p.add_argument("--processes", type=int, default=0, help="N processes in a row, four candidate probes each")
    p.add_argument("--drill-check", action="store_true", help="does a 10 %% fire drill move the probe? (one process)")
    p.add_argument("--candidates", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--out", type=Path, default=Path("/tmp/nvbench-speed-probe"))
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        if args.drill_check:
            drill_child(args.steps, args.child)
        else:
            child(args.steps, args.child, args.candidates)
        return
    args.out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, GLIBC_TUNABLES=with_stable_malloc(os.environ.get("GLIBC_TUNABLES")))
    if args.drill_check:
        subprocess.run([sys.executable, __file__, "--steps", str(args.steps), "--drill-check",
                        "--child", str(args.out / "drill.npz")], env=env, check=True)
        res = drill_effects(dict(np.load(args.out / "drill.npz")))
        print("| candidate | median | drill effect [95 %] | 100-step windows: corr, CV -> after | 300-step windows |")
        print("|---|---|---|---|---|")
        for name, r in res.items():
            lo, hi = r["drill_interval"]
            cols = [f"{r[w]['corr']:+.2f}, {100 * r[w]['cv']:.2f}% -> {100 * r[w]['cv_after']:.2f}%"
                    for w in (100, 300)]
            print(f"| {name} | {1e3 * r['median_s']:.3f} ms | {100 * r['drill_effect']:+.2f}% [{100 * lo:+.2f}, "
                  f"{100 * hi:+.2f}] | {cols[0]} | {cols[1]} |")
        (args.out / "drill.json").write_text(json.dumps(res, indent=2) + "\n")
        return
    if args.processes:
        for i in range(args.processes):
            cmd = [sys.executable, __file__, "--steps", str(args.steps), "--candidates",
                   "--child", str(args.out / f"process{i}.npz")]
            subprocess.run(cmd, env=env, check=True)
        res = across_processes([dict(np.load(args.out / f"process{i}.npz")) for i in range(args.processes)])
        print(f"{res['processes']} processes, CV of their mean step times {100 * res['step_cv']:.2f}%")
        print("| probe | median | corr across processes | CV after | corr within (25-step chunks) |")
        print("|---|---|---|---|---|")
        for name, r in res.items():
            if isinstance(r, dict):
                print(f"| {name} | {1e3 * r['median_s']:.3f} ms | {r['corr']:+.2f} | {100 * r['cv_after']:.2f}% | "
                      f"{r['within_corr']:+.2f} |")
        (args.out / "results.json").write_text(json.dumps(res, indent=2) + "\n")
        return
    names = ["cpu0", "cpu1"] if args.pair else ["solo"]
    procs = []
    for i, name in enumerate(names):
        cmd = [sys.executable, __file__, "--steps", str(args.steps), "--child", str(args.out / f"{name}.npz")]
        procs.append(subprocess.Popen((["taskset", "-c", str(i)] if args.pair else []) + cmd, env=env))
    if any(proc.wait() for proc in procs):
        raise SystemExit("a child process failed")
    data = {name: np.load(args.out / f"{name}.npz") for name in names}
    results: dict = {"steps": args.steps, "pair": args.pair}
    print("| process | window (steps) | windows | CV of window means | corr with probe | CV after probe |")
    print("|---|---|---|---|---|---|")
    for name, d in data.items():
        results[name] = {size: windows(d["step_s"], d["probe_s"], size) for size in WINDOWS}
        for w in results[name].values():
            del w["x"], w["y"]
        for size, w in results[name].items():
            print(f"| {name} | {size} | {w['windows']} | {100 * w['cv']:.2f}% | {w['corr']:+.2f} | "
                  f"{100 * w['cv_after']:.2f}% |")
    if args.pair:
        a, b = data["cpu0"]["step_s"], data["cpu1"]["step_s"]
        for size in WINDOWS:
            n = a.size // size * size
            r = np.corrcoef(a[:n].reshape(-1, size).mean(1), b[:n].reshape(-1, size).mean(1))[0, 1]
            results.setdefault("pair_corr", {})[size] = float(r)
            print(f"CPU 0 vs CPU 1, {size}-step windows: correlation of mean step times {r:+.2f}")
    (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
