"""Issue 18's GPU targets: how much torch.compile and CUDA graphs buy, and how much of a matrix measures.

Runs the GPU slice of matrices/compile.toml (synthetic and dali-gpu, nhwc, fp16 and bf16, world size 1,
accumulation 1 and 2, compile = eager, inductor, cudagraph) as one nvbench run, then reports:
- per (backend, precision, accumulation): each mode's throughput over its eager twin, and the fastest
  correct cell (ok, and its training loss within --loss-tolerance of the eager twin's);
- the run's matrix efficiency (measured windows over wall time, manifest.json) and where the rest went.
Targets (one H100): the fastest correct cell >= 1.15x its eager twin; matrix efficiency >= 0.6.

    python benchmarks/compile_targets.py --out reports/compile-targets       # on a GPU machine
    python benchmarks/compile_targets.py --summarize reports/compile-targets # re-read a finished run

Exit 0 when both targets hold, 1 otherwise (or when the run failed), 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SLICE = ["--only", "backend=synthetic", "--only", "backend=dali-gpu", "--only", "memory_format=nhwc",
         "--only", "precision=fp16", "--only", "precision=bf16", "--only", "world_size=1"]
SPEEDUP_TARGET = 1.15
EFFICIENCY_TARGET = 0.6


def twins(rows: list[dict]) -> dict[tuple, dict[str, dict]]:
    """(backend, precision, grad_accum) -> {compile mode: row}."""
    out: dict[tuple, dict[str, dict]] = {}
    for r in rows:
        out.setdefault((r["backend"], r["precision"], r["grad_accum"]), {})[r["compile"] or "eager"] = r
    return out


def judge(rows: list[dict], manifest: dict, loss_tolerance: float) -> dict:
    groups = []
    for (backend, precision, accum), modes in sorted(twins(rows).items()):
        eager = modes.get("eager")
        base = eager["throughput_img_per_s"] if eager and eager["status"] == "ok" else None
        entries = {}
        for mode, r in modes.items():
            ok = r["status"] == "ok"
            correct = ok and base is not None and abs(r["train_loss"] / eager["train_loss"] - 1) <= loss_tolerance
            entries[mode] = {"status": r["status"], "reason": r["reason"] or "",
                             "img_per_s": r["throughput_img_per_s"] if ok else None,
                             "vs_eager": r["throughput_img_per_s"] / base if ok and base else None,
                             "correct": correct, "compile_s": r.get("compile_s"),
                             "warmup_steps_used": r.get("warmup_steps_used"), "train_loss": r["train_loss"]}
        fastest = max((m for m, e in entries.items() if e["correct"]), key=lambda m: entries[m]["img_per_s"],
                      default=None)
        groups.append({"backend": backend, "precision": precision, "grad_accum": accum, "modes": entries,
                       "fastest_correct": fastest,
                       "speedup": entries[fastest]["vs_eager"] if fastest else None})
    best = max((g["speedup"] for g in groups if g["speedup"]), default=None)
    efficiency = manifest.get("matrix_efficiency")
    return {"groups": groups, "best_speedup": best, "matrix_efficiency": efficiency,
            "time_breakdown_s": manifest.get("time_breakdown_s"), "wall_s": manifest.get("wall_s"),
            "speedup_target": SPEEDUP_TARGET, "efficiency_target": EFFICIENCY_TARGET,
            "targets_met": bool(best and best >= SPEEDUP_TARGET and efficiency and efficiency >= EFFICIENCY_TARGET)}


def markdown(result: dict) -> str:
    lines = ["| backend | precision | accum | eager img/s | inductor | cudagraph | fastest correct |",
             "|---|---|---|---|---|---|---|"]
    for g in result["groups"]:
        def cell(mode: str) -> str:
            e = g["modes"].get(mode)
            if e is None:
                return "-"
            if e["img_per_s"] is None:
                return f"{e['status']}: {e['reason'][:60]}"
            ratio = f" ({e['vs_eager']:.3f}x)" if e["vs_eager"] and mode != "eager" else ""
            return f"{e['img_per_s']:.0f}{ratio}{'' if e['correct'] else ' (loss off)'}"
        lines.append(f"| {g['backend']} | {g['precision']} | {g['grad_accum']} | {cell('eager')} | "
                     f"{cell('inductor')} | {cell('cudagraph')} | {g['fastest_correct'] or '-'} |")
    eff = result["matrix_efficiency"]
    lines += ["", f"best fastest-correct / eager: {result['best_speedup'] or float('nan'):.3f} "
              f"(target >= {SPEEDUP_TARGET}); matrix efficiency: {eff if eff is None else round(eff, 3)} "
              f"(target >= {EFFICIENCY_TARGET}); time: {json.dumps(result['time_breakdown_s'])}"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", help="run folder to create (then summarised)")
    p.add_argument("--summarize", metavar="RUN_DIR", help="summarise a finished run instead of running")
    p.add_argument("--matrix", default=str(ROOT / "matrices" / "compile.toml"))
    p.add_argument("--loss-tolerance", type=float, default=0.05,
                   help="a mode is correct when its training loss is within this of the eager twin's (default 0.05)")
    args = p.parse_args(argv)
    if bool(args.out) == bool(args.summarize):
        p.error("give --out (run) or --summarize RUN_DIR")
    run_dir = Path(args.summarize or args.out)
    if args.out:
        done = subprocess.run([sys.executable, "-m", "harness", "run", args.matrix, *SLICE, "--out", args.out,
                               "--no-progress"], cwd=ROOT)
        if done.returncode not in (0, 1):
            return 1
    import pyarrow.parquet as pq

    rows = pq.read_table(run_dir / "cells").to_pylist()
    result = judge(rows, json.loads((run_dir / "manifest.json").read_text()), args.loss_tolerance)
    (run_dir / "compile-targets.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(markdown(result))
    return 0 if result["targets_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
