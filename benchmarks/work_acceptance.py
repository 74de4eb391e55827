"""Issue 56's acceptance on the CPU machine: four throwaway checkouts, each against this checkout, one counted
process a side, each A/B run while a busy loop (a neighbour) runs on the machine's other core; the work line each
verdict carries.

    python benchmarks/work_acceptance.py --out /tmp/work-acceptance [--cases a b c d] [--aa 10]
    python benchmarks/work_acceptance.py --out /tmp/work-same-core --same-core   # the neighbour on the cells' core

(a) the optimizer phase calls .item() on the loss once a step; (b) the forward runs 16 extra matmuls; (c) the forward
allocates one new tensor a step; (d) an inductor cell whose forward gains a graph break. `--aa N` then runs N A/As
of this checkout (the smoke matrix's synthetic cells at 24 px) and counts the cells whose work was `same`. Timing may
be inconclusive beside the neighbour; the work line may not change. Prints one line per A/B and writes
results.json; exit 1 when a line is not the expected one."""

from __future__ import annotations

import argparse
import os
import json
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from conftest import TINY  # noqa: E402  (the suite's tiny matrix: one resnet18 cell at 16 px)

ENGINE, RESNET = Path("harness/cell/engine.py"), Path("harness/models/resnet.py")
FORWARD = "        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))\n"
"""ResNet.forward's first residual stage: where (b)-(d) add their work."""


def _edit(root: Path, path: Path, old: str, new: str) -> None:
    text = (root / path).read_text()
    if text.count(old) != 1:
        raise SystemExit(f"{path}: the anchor {old.strip()!r} moved; update benchmarks/work_acceptance.py")
    (root / path).write_text(text.replace(old, new))


def _item(root: Path) -> None:
    keep = "        loss = self.micro_step(images, labels, sync_grads=sync_grads)\n"
    _edit(root, ENGINE, keep, keep + "        self._injected_loss = loss\n")
    read = "            self.optimizer.zero_grad(set_to_none=True)\n"
    _edit(root, ENGINE, read, read + "            self._injected_loss.item()  # injected: a host sync a step\n")


def _matmuls(root: Path) -> None:
    _edit(root, RESNET, "\nclass ResNet(", "\n_EXTRA, _OUT = torch.ones(8, 8), torch.empty(8, 8)\n\n\nclass ResNet(")
    _edit(root, RESNET, FORWARD, "        for _ in range(16):  # injected: 16 matmuls a step, into a kept output\n"
                                 "            torch.mm(_EXTRA, _EXTRA, out=_OUT)\n" + FORWARD)


def _allocation(root: Path) -> None:
    _edit(root, RESNET, FORWARD, "        self._injected = torch.ones(1024)  # injected: a new 4 KiB tensor a step\n"
                                 + FORWARD)


def _graph_break(root: Path) -> None:
    _edit(root, RESNET, FORWARD, "        torch._dynamo.graph_break()  # injected: the forward's graph breaks\n"
                                 + FORWARD)


CASES = {
    "a": (_item, 'backend = ["synthetic"]', r"^work changed: optimizer \+1 host sync per step \(aten::_local_scalar_dense\)$"),
    "b": (_matmuls, 'backend = ["synthetic"]', r"^work changed: forward \+16 aten::mm per step"),
    "c": (_allocation, 'backend = ["synthetic"]', r"^work changed: forward .*\+1 allocation per step \(\+4\.0 KiB"),
    "d": (_graph_break, 'backend = ["synthetic"]\ncompile = ["inductor"]', r"graph break"),
}


EXTRA: list[str] = []
"""Flags every A/B gets (--busy-wait-s)."""
CORES: dict[str, set[int]] = {}
"""Where the neighbour and the A/Bs run (--neighbour-core): apart, or the A/B waits for the neighbour to leave."""


def checkout(out: Path, name: str, change) -> Path:
    root = out / f"checkout-{name}"
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(ROOT / "harness", root / "harness", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    change(root)
    return root


def ab(out: Path, name: str, axes: str, b_checkout: Path | None, *extra: str) -> dict:
    matrix = out / f"{name}.toml"
    matrix.write_text(TINY.format(axes=textwrap.dedent(axes), repeats=3, timeout=600, cache=out / "cache",
                                  nvtx="false", device="cpu"))
    folder = out / f"ab-{name}"
    shutil.rmtree(folder, ignore_errors=True)
    argv = [sys.executable, "-m", "harness", "ab", str(matrix), "--out", str(folder), "--max-repeats", "3",
            "--fdr", "0.1", "--min-repeats", "3", "--max-reruns", "0", "--kernel-repeats", "0", *EXTRA, *extra]
    if b_checkout is not None:
        argv += ["--b-checkout", str(b_checkout)]
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=3600,
                          preexec_fn=(lambda: os.sched_setaffinity(0, CORES["ab"])) if CORES.get("ab") else None)
    verdicts = folder / "report" / "verdicts.parquet"
    rows = pq.read_table(verdicts).to_pylist() if verdicts.exists() else []
    cells = [{"cell_id": r["cell_id"], "verdict": r["verdict"], "effect_pct": r["effect_pct"], "work": r["work"],
              "work_changed": r["work_changed"]} for r in rows]
    if not rows and proc.returncode == 3:  # the wait budget ended it (issue 58): each cell's work line on stdout
        busy = [line for line in proc.stdout.splitlines() if line.startswith("the machine was busy: ")]
        cells = [{"cell_id": cid, "verdict": "not judged (busy)", "effect_pct": None, "work": work, "work_changed": None}
                 for cid, _, work in (line.partition(": ") for line in proc.stdout.splitlines()
                                      if ": work" in line and not line.startswith("the machine"))]
        return {"case": name, "exit": proc.returncode, "busy": busy[-1] if busy else None, "cells": cells,
                "stderr_tail": proc.stderr.strip().splitlines()[-3:]}
    return {"case": name, "exit": proc.returncode, "cells": cells, "stderr_tail": proc.stderr.strip().splitlines()[-3:]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--cases", nargs="*", default=sorted(CASES), choices=sorted(CASES))
    parser.add_argument("--aa", type=int, default=0, help="A/As of this checkout after the cases")
    parser.add_argument("--no-neighbour", action="store_true", help="run without the busy loop beside")
    parser.add_argument("--neighbour-core", type=int, default=0,
                        help="the busy loop's core; the A/Bs keep to the others (default: %(default)s). On the cell's "
                             "own core the A/B re-runs every window it spoils after waiting for it to leave, which a "
                             "busy loop never does (issue 58)")
    parser.add_argument("--same-core", action="store_true",
                        help="run the A/Bs on the neighbour's own core: every window is taken under interference, "
                             "each A/B ends undecided once its --busy-wait-s is spent (exit 3) and its counted "
                             "processes still say what changed (default: the other cores)")
    parser.add_argument("--busy-wait-s", type=float, default=30.0,
                        help="each A/B's budget for waiting on the neighbour (default: %(default)s)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    EXTRA[:] = ["--busy-wait-s", f"{args.busy_wait_s:g}"]
    neighbour = None
    if not args.no_neighbour:
        core = {args.neighbour_core}
        CORES["ab"] = core if args.same_core else (set(os.sched_getaffinity(0)) - core or None)
        neighbour = subprocess.Popen([sys.executable, "-c", "while True: pass"],
                                     preexec_fn=lambda: os.sched_setaffinity(0, core))
    results, ok = [], True
    try:
        for name in args.cases:
            change, axes, expected = CASES[name]
            result = ab(args.out, name, axes, checkout(args.out, name, change))
            works = [c["work"] or "" for c in result["cells"]]
            result["as_expected"] = bool(works) and all(re.search(expected, w) for w in works)
            ok &= result["as_expected"]
            results.append(result)
            print(f"({name}) exit {result['exit']}: " + " | ".join(
                f"{c['verdict']} {c['effect_pct'] if c['effect_pct'] is None else round(c['effect_pct'], 1)}%; "
                f"{c['work']}" for c in result["cells"]) + ("" if result["as_expected"] else "  <- NOT AS EXPECTED"),
                flush=True)
        for k in range(args.aa):
            result = ab(args.out, f"aa{k}", 'backend = ["synthetic"]\nmemory_format = ["nchw", "nhwc"]', None)
            same = sum(c["work"] == "work: same" for c in result["cells"])
            result["as_expected"] = same == len(result["cells"]) > 0
            ok &= result["as_expected"]
            results.append(result)
            print(f"(A/A {k}) exit {result['exit']}: {same} of {len(result['cells'])} cells work: same; "
                  + " | ".join(c["work"] or "" for c in result["cells"] if c["work"] != "work: same"), flush=True)
    finally:
        if neighbour is not None:
            neighbour.kill()
            neighbour.wait()
    (args.out / "results.json").write_text(json.dumps(results, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
