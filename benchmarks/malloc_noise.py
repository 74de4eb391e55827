"""Why run.malloc = "stable" exists: how much of the process-to-process spread of a CPU training loop is
glibc malloc handing memory back to the kernel and faulting it in again every step.

    python benchmarks/malloc_noise.py --processes 6 --steps 150

Runs --processes fresh interpreters per setting, alternating the settings in a seeded random order so
drift hits all alike: `system` (the C library's defaults) and `stable` (harness.orchestrate.session.job.STABLE_MALLOC via
GLIBC_TUNABLES, what nvbench gives its cells), and on request the variants in SETTINGS. Each process
trains resnet18 (32 px, batch 16, one thread, synthetic data) for --steps timed steps after 10 untimed
ones and reports its mean step time, minor page faults and kernel CPU time. Prints one line per process and a table per setting: mean step time, the CV
of the process means (the noise a comparison of repeats sees), faults and kernel time per process.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.orchestrate.session.job import with_stable_malloc  # noqa: E402

STABLE = with_stable_malloc(None)
SETTINGS = {"system": (None, []), "stable": (STABLE, []),
            "stable-thp": (with_stable_malloc("glibc.malloc.hugetlb=1"), []),
            "stable-noaslr": (STABLE, ["setarch", "-R"]),
            "stable-cpu0": (STABLE, ["taskset", "-c", "0"]), "stable-cpu1": (STABLE, ["taskset", "-c", "1"])}
"""Per setting: GLIBC_TUNABLES (None: unset) and the launcher the process runs under. stable-thp also
asks for transparent huge pages (madvise), stable-noaslr turns address-space randomisation off, stable-cpuN
pins the process to CPU N."""


def child(steps: int) -> None:
    import resource
    import time

    import torch

    from harness.models import build_model

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = build_model("resnet18", num_classes=10)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(16, 3, 32, 32), torch.randint(0, 10, (16,))
    times = []
    for i in range(steps + 10):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        if i >= 10:
            times.append(time.perf_counter() - t0)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"step_s": statistics.fmean(times), "minflt": usage.ru_minflt, "sys_s": usage.ru_stime}))


def run(setting: str, steps: int) -> dict:
    tunables, launcher = SETTINGS[setting]
    env = dict(os.environ)
    env.pop("GLIBC_TUNABLES", None)
    if tunables:
        env["GLIBC_TUNABLES"] = tunables
    argv = [*launcher, sys.executable, __file__, "--child", "--steps", str(steps)]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--processes", type=int, default=6, help="fresh processes per setting (default 6)")
    p.add_argument("--steps", type=int, default=150, help="timed steps per process (default 150)")
    p.add_argument("--settings", default="system,stable",
                   help=f"comma-separated, from {','.join(SETTINGS)} (default system,stable)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args.steps)
        return
    rng = random.Random(args.seed)
    settings = args.settings.split(",")
    unknown = [s for s in settings if s not in SETTINGS]
    if unknown:
        p.error(f"--settings: unknown {', '.join(unknown)}")
    order = [s for _ in range(args.processes) for s in rng.sample(settings, len(settings))]
    results: dict[str, list[dict]] = {s: [] for s in settings}
    for setting in order:
        r = run(setting, args.steps)
        results[setting].append(r)
        print(f"{setting:>13}: {1000 * r['step_s']:6.1f} ms/step  {r['minflt']:>9,} minor faults  "
              f"{r['sys_s']:5.2f} s kernel", file=sys.stderr, flush=True)
    print("\n| malloc | processes | mean step | CV of process means | minor faults / process | kernel s / process |")
    print("|---|---|---|---|---|---|")
    for setting, rs in results.items():
        means = [r["step_s"] for r in rs]
        print(f"| {setting} | {len(rs)} | {1000 * statistics.fmean(means):.1f} ms | "
              f"{100 * statistics.stdev(means) / statistics.fmean(means):.1f}% | "
              f"{statistics.fmean(r['minflt'] for r in rs):,.0f} | {statistics.fmean(r['sys_s'] for r in rs):.2f} |")


if __name__ == "__main__":
    main()
