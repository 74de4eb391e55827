"""Issue 70's acceptance on the CPU machine: exact work decides.

    python benchmarks/work_bisect_acceptance.py --out /tmp/acc70 [--parts bisect time nightly cells]

A throwaway repository of 33 commits of this checkout (harness/, ci/, pyproject.toml): commit 20 adds a `.item()` of
the loss to the optimizer phase, commit 26 adds 16 extra 256x256 matmuls to the forward, commit 33 reverts commit 20;
the others change a note only. Then, on the suite's tiny CPU cell:
- bisect: `nvbench bisect --good c1 --bad c32 --by work` with a busy loop on the cell's own core for the whole run;
- time: `nvbench bisect --good c1 --bad c32 --by time` on a quiet machine (its wall time against the first's);
- nightly: ci/nightly.sh of the repository at c1 (promoted), at c32 (its alarm bisected by work: both culprits in its
  last lines), at c33 (the host sync undone, the matmuls kept);
- cells: the two-cell case of the issue's "Why": a user model whose forward runs its body twice more while a switch
  names the cell's memory format; night 0 promoted, nights 1-2 both cells switched, night 3 only nhwc: night 3 ends
  the nchw alarm gone by work and keeps the nhwc alarm open by work.
Writes results.json; prints a line per check; exit 1 when one is not as expected."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from conftest import TINY  # noqa: E402  (the suite's tiny matrix: one resnet18 cell at 16 px)

ENGINE, RESNET = Path("harness/cell/engine.py"), Path("harness/models/resnet.py")
KEEP = "        loss = self.micro_step(images, labels, sync_grads=sync_grads)\n"
READ = "            self.optimizer.zero_grad(set_to_none=True)\n"
FORWARD = "        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))\n"
SYNC_LINE = "optimizer +1 host sync per step (aten::_local_scalar_dense)"
MM_LINE = "forward +16 aten::mm per step"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def _replace(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    if text.count(old) != 1:
        raise SystemExit(f"{path}: the anchor {old.strip()!r} moved; update benchmarks/work_bisect_acceptance.py")
    path.write_text(text.replace(old, new))


def build_repo(out: Path) -> tuple[Path, list[str]]:
    """33 commits; returns the repository and the shas (index 0 is commit 1)."""
    repo = out / "repo"
    shutil.rmtree(repo, ignore_errors=True)
    for part in ("harness", "ci"):
        shutil.copytree(ROOT / part, repo / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", repo / "pyproject.toml")
    (repo / ".gitignore").write_text("__pycache__/\n*.pyc\n")
    git(out, "init", "-q", str(repo))
    git(repo, "config", "user.email", "acceptance@example.com")
    git(repo, "config", "user.name", "acceptance")
    shas = []
    for k in range(1, 34):
        (repo / "NOTES").write_text(f"commit {k}\n")
        subject = f"commit {k}"
        if k == 20:
            _replace(repo / ENGINE, KEEP, KEEP + "        self._injected_loss = loss\n")
            _replace(repo / ENGINE, READ, READ + "            self._injected_loss.item()  # injected: a host sync\n")
            subject = "commit 20: read the loss back in the optimizer phase"
        if k == 26:
            _replace(repo / RESNET, "\nclass ResNet(",
                     "\n_EXTRA, _OUT = torch.ones(256, 256), torch.empty(256, 256)\n\n\nclass ResNet(")
            _replace(repo / RESNET, FORWARD, "        for _ in range(16):  # injected: 16 matmuls a step\n"
                                             "            torch.mm(_EXTRA, _EXTRA, out=_OUT)\n" + FORWARD)
            subject = "commit 26: 16 matmuls in the forward"
        if k == 33:
            _replace(repo / ENGINE, "            self._injected_loss.item()  # injected: a host sync\n", "")
            subject = "commit 33: revert commit 20"
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", subject)
        shas.append(git(repo, "rev-parse", "HEAD"))
    return repo, shas


def tiny(out: Path, name: str, axes: str = 'backend = ["synthetic"]', extra: str = "") -> Path:
    path = out / f"{name}.toml"
    path.write_text(TINY.format(axes=textwrap.dedent(axes), repeats=5, timeout=600, cache=out / "cache",
                                nvtx="false", device="cpu") + extra)
    return path


def env_for(repo: Path, **extra: str) -> dict[str, str]:
    """The repository's own harness first (its working tree is the code under test), as the suite's nights do."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NVBENCH_", "GITHUB_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(repo), env.get("PYTHONPATH"))))
    return env | extra


def pinned(cores: set[int] | None):
    return (lambda: os.sched_setaffinity(0, cores)) if cores else None


def bisect(out: Path, repo: Path, shas: list[str], by: str, neighbour: bool) -> dict:
    folder = out / f"bisect-{by}"
    shutil.rmtree(folder, ignore_errors=True)
    core = {sorted(os.sched_getaffinity(0))[0]}
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=pinned(core)) if neighbour else None
    t0 = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-m", "harness", "bisect", str(tiny(out, "bisect")), "--good", shas[0],
                               "--bad", shas[31], "--by", by, "--out", str(folder), "--kernel-repeats", "0"],
                              cwd=repo, env=env_for(repo), capture_output=True, text=True, timeout=7200,
                              preexec_fn=pinned(core) if neighbour else None)
    finally:
        if busy is not None:
            busy.kill()
            busy.wait()
    wall = time.monotonic() - t0
    state = json.loads((folder / "bisect.json").read_text()) if (folder / "bisect.json").is_file() else {}
    answer = state.get("answer") or {}
    counted = [k for k, v in (state.get("work") or {}).get("probes", {}).items() if not v.get("skipped")]
    result = {"part": f"bisect --by {by}", "exit": proc.returncode, "wall_s": round(wall, 1),
              "neighbour_on_the_cells_core": neighbour, "answer": answer.get("text"),
              "counted_processes_per_cell": len(counted), "timed_abs": len(state.get("comparisons") or []),
              "stderr_tail": proc.stderr.strip().splitlines()[-6:]}
    if by == "work":
        named = {c["point"]: c for c in answer.get("culprits", [])}
        result["as_expected"] = (proc.returncode == 1 and list(named) == [shas[19], shas[25]]
                                 and named[shas[19]]["text"].endswith(SYNC_LINE)
                                 and named[shas[25]]["text"].endswith(MM_LINE) and len(counted) <= 2 * 5 + 2)
    else:
        result["as_expected"] = answer.get("point") == shas[25]  # the first slower commit (a host sync costs no time)
    return result


def nightly(out: Path, repo: Path, shas: list[str]) -> list[dict]:
    reports = out / "nightly-reports"
    shutil.rmtree(reports, ignore_errors=True)
    # gates on host syncs and operator calls: each broken one fails the night on its count, whatever the timing says,
    # and alarms on its own (its counter's items recorded, ended by them)
    matrix = tiny(out, "nightly", extra='\n[judge.work_gates]\nhost_syncs = "no-rise"\nop_calls = "no-rise"\n')
    results = []
    for night, index in (("night0", 0), ("night1", 31), ("night2", 32)):
        git(repo, "checkout", "-q", shas[index])
        t0 = time.monotonic()
        proc = subprocess.run(["bash", str(repo / "ci" / "nightly.sh")], cwd=repo, capture_output=True, text=True,
                              timeout=7200, env=env_for(repo, NVBENCH_MATRIX=str(matrix), NVBENCH_REPORTS=str(reports),
                                                         NVBENCH_RUN_ID=night, NVBENCH_REPEATS="5",
                                                         NVBENCH_CONFIRM_REPEATS="5", NVBENCH_CONFIRM_MAX_REPEATS="5",
                                                         NVBENCH_KERNEL_REPEATS="0"))
        lines = proc.stderr.strip().splitlines()
        result = {"part": f"nightly {night} at commit {index + 1}", "exit": proc.returncode,
                  "wall_s": round(time.monotonic() - t0, 1), "last_lines": lines[-8:]}
        if night == "night0":
            promoted = subprocess.run([sys.executable, "-m", "harness", "baseline", "promote", str(reports / night),
                                       "--reason", "acceptance", "--reports", str(reports)], cwd=repo,
                                      env=env_for(repo), capture_output=True, text=True)
            result["promoted"] = promoted.returncode == 0
            result["as_expected"] = proc.returncode == 0 and promoted.returncode == 0
            if not result["promoted"]:
                result["promote_stderr"] = promoted.stderr.strip().splitlines()[-3:]
        elif night == "night1":
            news = [line for line in lines if line.startswith("NEW: ")]
            result["named"] = news
            result["as_expected"] = proc.returncode == 1 and any(
                f"first bad commit {shas[19][:12]}" in line and line.endswith(SYNC_LINE) for line in news) and any(
                f"first bad commit {shas[25][:12]}" in line and line.endswith(MM_LINE) for line in news)
        else:  # the sync reverted: its gate's alarm ends gone by work, the matmuls' stays open by work
            alarms = json.loads((reports / "alarms.json").read_text())
            gone = [ln for ln in lines if ln.startswith("GONE: ") and "host_syncs" in ln and "gone: its work change was "
                    "undone (optimizer -1 host sync per step" in ln]
            kept = [ln for ln in lines if ln.startswith("OPEN: ") and "op_calls" in ln and "its work change stays "
                    "(forward +16 aten::mm per step" in ln]
            # a timing alarm, where night1's A/B confirmed the slowdown, stays open on the matmuls it still counts
            partly = [ln for ln in lines if ln.startswith("OPEN: ") and "its work change partly undone (optimizer -1 "
                      "host sync" in ln and "the rest stays (forward +16 aten::mm" in ln]
            result |= {"gone": gone, "kept": kept + partly, "open": [a["change"]["metric"] for a in alarms["open"]]}
            result["as_expected"] = bool(gone) and bool(kept) and "gate:host_syncs" not in result["open"] and (
                "throughput" not in result["open"] or bool(partly))
        results.append(result)
    git(repo, "checkout", "-q", shas[-1])
    return results


MODEL = '''
"""Issue 70's two-cell case: a small net whose forward runs its body twice more while NVB_ACC70_EXTRA names the
memory format of its input (nchw or nhwc)."""

import os

import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, num_classes: int):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
                                  nn.Conv2d(16, 32, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU())
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, num_classes))
        self.extra = {f for f in os.environ.get("NVB_ACC70_EXTRA", "").split(",") if f}

    def forward(self, x):
        nhwc = x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()
        y = self.body(x)
        if ("nhwc" if nhwc else "nchw") in self.extra:
            for _ in range(2):  # the switch: the body twice more, its output kept in the graph
                y = y + 0.0 * self.body(x)
        return self.head(y)


def build(num_classes: int) -> nn.Module:
    return Net(num_classes)
'''


def two_cells(out: Path) -> list[dict]:
    folder = out / "cells"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    (folder / "acc70_model.py").write_text(MODEL)
    matrix = folder / "cells.toml"
    text = TINY.format(axes='backend = ["synthetic"]\nmemory_format = ["nchw", "nhwc"]', repeats=10, timeout=600,
                       cache=folder / "cache", nvtx="false", device="cpu")
    matrix.write_text(text.replace('model = "resnet18"', 'model = "acc70_model:build"'))
    reports = folder / "reports"
    results = []
    for night, extra in (("night0", ""), ("night1", "nchw,nhwc"), ("night2", "nchw,nhwc"), ("night3", "nhwc")):
        env = env_for(ROOT, NVBENCH_MATRIX=str(matrix), NVBENCH_REPORTS=str(reports), NVBENCH_RUN_ID=night,
                      NVB_ACC70_EXTRA=extra, NVBENCH_REPEATS="10")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(folder), env.get("PYTHONPATH"))))
        t0 = time.monotonic()
        proc = subprocess.run(["bash", str(ROOT / "ci" / "nightly.sh")], cwd=ROOT, capture_output=True, text=True,
                              timeout=7200, env=env)
        lines = proc.stderr.strip().splitlines()
        result = {"part": f"two cells {night} (switch: {extra or 'off'})", "exit": proc.returncode,
                  "wall_s": round(time.monotonic() - t0, 1), "last_lines": lines[-10:]}
        if night == "night0":
            promoted = subprocess.run([sys.executable, "-m", "harness", "baseline", "promote", str(reports / night),
                                       "--reason", "acceptance", "--reports", str(reports)], cwd=ROOT,
                                      env=env, capture_output=True, text=True)
            result["as_expected"] = proc.returncode == 0 and promoted.returncode == 0
        elif night == "night3":
            gone = [ln for ln in lines if "_nchw_" in ln and "gone: its work change was undone" in ln]
            kept = [ln for ln in lines if "_nhwc_" in ln and "its work change stays" in ln]
            alarms = json.loads((reports / "alarms.json").read_text())
            result |= {"gone": gone, "kept": kept, "open": [a["change"]["cell_id"] for a in alarms["open"]]}
            result["as_expected"] = bool(gone) and bool(kept) and all("_nhwc_" in c for c in result["open"])
        else:
            result["as_expected"] = proc.returncode in (0, 1)
        results.append(result)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--parts", nargs="*", default=["bisect", "time", "nightly", "cells"],
                        choices=["bisect", "time", "nightly", "cells"])
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    if {"bisect", "time", "nightly"} & set(args.parts):
        repo, shas = build_repo(args.out)
    for part in args.parts:
        if part == "bisect":
            found = [bisect(args.out, repo, shas, "work", neighbour=True)]
        elif part == "time":
            found = [bisect(args.out, repo, shas, "time", neighbour=False)]
        elif part == "nightly":
            found = nightly(args.out, repo, shas)
        else:
            found = two_cells(args.out)
        for r in found:
            print(f"{r['part']}: exit {r['exit']} in {r['wall_s']} s" + ("" if r["as_expected"] else
                                                                         "  <- NOT AS EXPECTED"), flush=True)
        results += found
        (args.out / "results.json").write_text(json.dumps(results, indent=1))
    return 0 if all(r["as_expected"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
