"""The GPU acceptance: one command that proves what only a GPU can, within 9 minutes, and writes what it found.

    bash ci/gpu-acceptance.sh [OUT_DIR] [--budget-s 540] [--last OLD/gpu-acceptance.json] [--with-suite]

From the project root of a fresh GPU machine (the image's own torch; nothing installed: the checkout is the
package; DALI, nvtx and nsys where present) it runs one check per claim, ordered by what each proves
(GPU_CHECKS, then EXTRA_CHECKS where the budget leaves room): the GPU-marked tests (DALI's counted apart), an
A/A and a fire drill's A/B of one synthetic cell judged by nvbench ab's own verdict, per-phase CUDA timing and
a cudagraph cell, cuDNN autotuning, the inductor compile cache, the largest part of the mission's world-size-1
slice that fits at the mission's window (matrix efficiency, data-wait agreement, DALI cells), the overhead
benchmark and a torch profile (ci/acceptance_checks.py, ci/acceptance_extra.py; their judgements, pure, in
ci/acceptance_judge.py). The CPU suite is CI's job: --with-suite adds it (beside the GPU tests where there are
8 or more cores, split_cores). Before anything runs it prints each check's estimated time, from --last (a
previous gpu-acceptance.json) or the stated defaults; a check whose estimate exceeds what is left of the budget
is not started, and a running check is stopped at the budget's end, each with a line saying so; a check whose
module is missing is skipped with the reason. It writes gpu-acceptance.json and gpu-acceptance.md (per claim:
what it proved, with what figure) into OUT_DIR. Exit 0 when no check failed, 1 otherwise, 2 on bad input.

Without a GPU it says so, prints the plan a GPU machine would run, lists every GPU check as skipped with that
reason, and runs the CPU-meaningful part
(the environment and the mission slice's synthetic fp32 cell under --smoke: the run, its figures and both
reports), then exits 0 if that part passed: CI runs it as a smoke. fp32, not the GPU's bf16: at the smoke's old
16 px crop the CPU's bf16 cell turned NaN (oneDNN's bf16 weight gradient of a convolution on a 1x1 input, torch
2.13; docs/performance.md, the smoke run). The crop is 24 px since; the CPU smoke stays fp32.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))  # the checks and judgements beside this file
import acceptance_checks as claims  # noqa: E402
import acceptance_extra as extra  # noqa: E402
import acceptance_judge as judge  # noqa: E402
from acceptance_judge import junit_counts  # noqa: E402
from acceptance_plan import (  # noqa: E402  (the plan, re-exported: callers and tests read it here)
    DEFAULT_BUDGET_S, ESTIMATES_S, EXTRA_CHECKS, GPU_CHECKS, GPU_SIDE_CORES, LAST, NEEDS, REPORT_ORDER, SUITE_SKIP,
    announce, beyond, cpu_plan, dependency_gaps, estimates, extras_planned, gpu_plan, planned_extras, say,
    scaled_rungs, slice_plan, split_cores, usable_cores)
from acceptance_report import environment, write_report  # noqa: E402

MISSION = ROOT / "matrices" / "resnet50.toml"
SLICE = ["--only", "world_size=1", "--only", "memory_format=nhwc", "--only", "precision=fp16"]
"""What the dataset step prepares and the profile runs: world size 1, NHWC, fp16."""
PROFILE_ONLY = [*SLICE, "--only", "backend=synthetic", "--only", "grad_accum=1"]
"""The profiles' cell (torch and, where nsys is on PATH, Nsight): the mission's synthetic fp16 NHWC cell."""
WINDOW = {"warmup_steps": 20, "measure_steps": 60, "val_steps": 4}
"""The CPU smoke's window before --smoke shrinks it (the GPU slice runs at the mission's own 30 + 100)."""
AGREEMENT = 0.05
"""Exposed data-wait fraction and 1 - loader efficiency must agree this closely (issue 15)."""
OVERHEAD_TARGET = 0.99
"""harness / bare throughput at least this on a GPU."""
@dataclass
class Check:
    name: str
    status: str = "skip"
    """pass, fail or skip."""
    detail: str = ""
    duration_s: float = 0.0
    figures: dict[str, Any] = field(default_factory=dict)


class Budget:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.deadline = time.monotonic() + seconds

    def left(self) -> float:
        return self.deadline - time.monotonic()


def start(argv: list[str], *, log: Path, env: dict[str, str] | None = None,
          cores: list[int] | None = None) -> subprocess.Popen:
    """Start argv in a session of its own (so a timeout ends its children too), output in `log`, on `cores`."""
    pin = (lambda: os.sched_setaffinity(0, cores)) if cores else None
    # the checkout is the package (an air-gapped machine installs nothing): on PYTHONPATH for all it starts
    path = {"PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))}
    with open(log, "w") as fh:
        return subprocess.Popen(argv, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT,
                                env={**os.environ, **path, **(env or {})},
                                preexec_fn=pin, start_new_session=True)  # noqa: PLW1509 (this process starts no threads)


def finish(proc: subprocess.Popen, timeout: float) -> int | None:
    """The exit code, or None when it outran `timeout` (then it and every process it started are killed)."""
    try:
        return proc.wait(timeout=max(1.0, timeout))
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return None


def run(argv: list[str], *, log: Path, timeout: float, env: dict[str, str] | None = None,
        cores: list[int] | None = None) -> int | None:
    """Run argv with its output in `log`; the exit code, or None if it outran `timeout`."""
    return finish(start(argv, log=log, env=env, cores=cores), timeout)


def refused(check: Check, budget: Budget, need_s: float) -> bool:
    """True, with `check` failed and a line said, when less than `need_s` (its estimate) of the budget is left:
    the acceptance promises every check within its budget, and a run that never reached its mission slice must
    not read as a pass."""
    if budget.left() >= need_s:
        return False
    check.status = "fail"
    check.detail = (f"not started: it takes about {need_s:.0f} s, and {max(0.0, budget.left()):.0f} s of the "
                    f"{budget.seconds:.0f} s budget are left")
    say(f"{check.name}: {check.detail}")
    return True


def timed(check: Check, budget: Budget, need_s: float, body: Callable[[Check, float], None], *,
          leave_s: float = 0.0) -> Check:
    """Run `body(check, timeout)` unless less than `need_s` of the budget is left; the timeout keeps `leave_s`
    of the budget for what follows (but never less than `need_s`), so a check that overruns is stopped. Either
    way a line says how it ended."""
    if refused(check, budget, need_s):
        return check
    t0 = time.monotonic()
    try:
        body(check, max(need_s, budget.left() - leave_s))
    except Exception as exc:  # a broken check is a failed check, never a lost report
        check.status, check.detail = "fail", f"{type(exc).__name__}: {exc}"
    check.duration_s = round(time.monotonic() - t0, 1)
    say(f"{check.status} {check.name} ({check.duration_s:.0f} s): {check.detail}")
    return check


def skipped(name: str, why: str) -> Check:
    return Check(name, status="skip", detail=why)


# ---------------------------------------------------------------- pytest


def junit_seconds(path: Path) -> float:
    """The session's wall time as pytest recorded it in a junit file (0 when there is none)."""
    if not path.is_file():
        return 0.0
    return round(sum(float(s.get("time") or 0) for s in ET.parse(path).getroot().iter("testsuite")), 1)


def have_xdist() -> bool:
    return importlib.util.find_spec("xdist") is not None


def pytest_argv(name: str, marker: str, out: Path, *, cores: list[int] | None, leave_out: str = "") -> list[str]:
    """pytest over the tests `marker` selects (less those whose names hold `leave_out`), junit into out/NAME.xml;
    in parallel over `cores` when given."""
    argv = [sys.executable, "-m", "pytest", "-m", marker, "-q", "-p", "no:cacheprovider",
            f"--junitxml={out / f'{name}.xml'}"] + (["-k", f"not {leave_out}"] if leave_out else [])
    if cores and have_xdist():
        # At most 8 workers, at least 2 cores each: each test starts cell processes of its own, and tests with
        # timeouts (a hung cell killed after 25 s) must not see their healthy cells slowed past them. Every
        # worker keeps to a disjoint share of the cores (tests/parallel.py), so its cells size their threads
        # as on the 2-core CI machine.
        argv += ["-n", str(min(8, max(2, len(cores) // 2))), "--dist", "loadfile"]
    elif have_xdist():
        argv += ["-n", "0"]  # one process, whatever PYTEST_ADDOPTS asks: the GPU tests share one GPU
    return argv


def pytest_result(check: Check, name: str, out: Path, code: int | None, timeout: float) -> None:
    counts = junit_counts(out / f"{name}.xml")
    check.figures = {k: v for k, v in counts.items() if k != "not_passed"}
    check.figures["exit_code"] = code
    bad = counts.get("not_passed") or []
    check.status = "pass" if code == 0 else "fail"
    check.detail = (f"timed out after {timeout:.0f} s" if code is None else
                    "; ".join(bad[:8]) + (f" and {len(bad) - 8} more" if len(bad) > 8 else ""))


def pytest_check(name: str, marker: str, out: Path, *, parallel: bool, cores: list[int] | None = None,
                 nvtx: bool = True) -> Callable[[Check, float], None]:
    """pytest as a check; where nvtx does not import, its tests (named nvtx) are left out, and the detail says so."""
    def body(check: Check, timeout: float) -> None:
        argv = pytest_argv(name, marker, out, cores=(cores or usable_cores()) if parallel else None,
                           leave_out="" if nvtx else "nvtx")
        pytest_result(check, name, out, run(argv, log=out / f"{name}.log", timeout=timeout, cores=cores), timeout)
        if not nvtx:
            left_out = "NVTX tests left out: nvtx does not import here"
            check.detail = left_out + (f"; {check.detail}" if check.detail else "")
    return body


def dali_check(out: Path) -> Check:
    check = Check("dali-tests")
    if importlib.util.find_spec("nvidia") is None or importlib.util.find_spec("nvidia.dali") is None:
        check.detail = "DALI is not importable here; its tests skip"
        return check
    counts = {k: 0 for k in ("passed", "failed", "errors", "skipped")}
    for xml in ("suite.xml", "gpu-tests.xml"):
        for key, value in junit_counts(out / xml, only="test_data_dali").items():
            if key != "not_passed":
                counts[key] += value
    check.figures = counts
    check.status = "pass" if counts["passed"] and not counts["failed"] and not counts["errors"] else "fail"
    check.detail = "tests/data/test_data_dali.py, counted from the two pytest runs"
    return check


# ---------------------------------------------------------------- the mission slice

def acceptance_matrix(out: Path, *, device: str | None = None, window: dict[str, int] | None = WINDOW,
                      nvtx: bool = True) -> Path:
    """The mission matrix with the given window (None: the mission's own), a forced device (the CPU part) and
    NVTX ranges off where nvtx does not import."""
    text = MISSION.read_text()
    for key, value in (window or {}).items():
        text, n = re.subn(rf"(?m)^{key} = \d+", f"{key} = {value}", text)
        if n != 1:
            raise ValueError(f"{MISSION}: cannot set benchmark.{key} for the acceptance")
    settings = (f'device = "{device}"\n' if device else "") + ("" if nvtx else "nvtx = false\n")
    text = text.replace("[run]\n", f"[run]\n{settings}", 1)
    path = out / ("mission-acceptance.toml" if window else "mission-window.toml")
    path.write_text(text)
    return path


CELL_FIGURES = ("backend", "memory_format", "precision", "grad_accum", "status", "reason", "throughput_img_per_s",
                "throughput_ci_low_img_per_s", "throughput_ci_high_img_per_s", "loader_efficiency",
                "exposed_data_wait_frac", "host_data_wait_frac", "mfu_pct", "power_avg_w", "img_per_joule", "top1",
                "train_loss", "lr_final", "loss_scale", "duration_s", "window_s", "startup_s", "build_s", "autotune_s",
                "compile_s", "warmup_window_s", "warmup_steps_used", "val_s")


def slice_rows(run_dir: Path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    rows = pq.read_table(run_dir / "cells").to_pylist()
    keep = []
    for r in sorted(rows, key=lambda r: (r["backend"], r["precision"], r["grad_accum"])):
        label = f"{r['backend']}/{r['memory_format']}/{r['precision']}/ga{r['grad_accum']}"
        keep.append({"cell": label} | {k: r.get(k) for k in CELL_FIGURES})
    return keep


CPU_FP16_NOTE = "fp16 on a CPU is slow"


def mission_check(out: Path, only: list[str], *, smoke: bool = False, nvtx: bool = True,
                  planned_s: float | None = None) -> Callable[[Check, float], None]:
    """`nvbench run` of the mission matrix's slice `only`: at the mission's own window on a GPU, under --smoke
    on the CPU; its rows, matrix efficiency and largest non-window part."""
    def body(check: Check, timeout: float) -> None:
        matrix = acceptance_matrix(out, device="cpu" if smoke else None, window=WINDOW if smoke else None, nvtx=nvtx)
        run_dir = out / "mission"
        code = run([sys.executable, "-m", "harness", "run", str(matrix), *only, "--out", str(run_dir),
                    "--no-progress"] + (["--smoke"] if smoke else []), log=out / "mission.log", timeout=timeout)
        rows = slice_rows(run_dir) if (run_dir / "cells").is_dir() else []
        check.figures = {"window": "smoke" if smoke else "the mission's", "only": " ".join(only), "cells": rows,
                         "planned_s": planned_s}
        manifest = run_dir / "manifest.json"
        cost = ""
        if manifest.is_file():  # a finished run says how much of its wall time measured, and where the rest went
            from harness.analysis.judge.run import largest_cut

            facts = json.loads(manifest.read_text())
            check.figures |= {k: facts[k] for k in ("wall_s", "matrix_efficiency", "time_breakdown_s") if k in facts}
            said = judge.judge_slice_cost(facts, largest_cut, target=None if smoke else judge.EFFICIENCY_TARGET)
            check.figures["cost"] = said
            cost = f"; {said['text']}"
        bad = [r for r in rows if r["status"] not in ("ok", "skipped")]
        ran = [r for r in rows if r["status"] == "ok"]
        # issue 39: the summary's note on the CPU's slow fp16 is for runs that train on the CPU only
        log = out / "mission.log"
        cpu_note = not smoke and log.is_file() and CPU_FP16_NOTE in log.read_text(errors="replace")
        check.status = "pass" if code == 0 and ran and not bad and not cpu_note else "fail"
        check.detail = (f"timed out after {timeout:.0f} s" if code is None else
                        judge.failures_text(bad) if bad else f"{len(ran)} cells ok, {len(rows) - len(ran)} skipped") + cost + (
            f"; its summary says '{CPU_FP16_NOTE}' on a GPU run" if cpu_note else "")
    return body


def dataset_check(out: Path, cores: list[int] | None = None) -> Callable[[Check, float], None]:
    """Make the slice's generated dataset (8,000 JPEGs) before the slice, so the slice's time is its cells'.
    Beside the suite it costs the acceptance nothing; run 2 spent about a minute of its slice on it."""
    def body(check: Check, timeout: float) -> None:
        argv = [sys.executable, "-m", "harness", "data", "prepare", str(acceptance_matrix(out)), *SLICE]
        code = run(argv, log=out / "dataset.log", timeout=timeout, cores=cores)
        lines = (out / "dataset.log").read_text().splitlines()
        roots = [line for line in lines if Path(line).is_absolute() and Path(line).is_dir()]  # what prepare printed
        check.status = "pass" if code == 0 else "fail"
        check.figures = {"datasets": roots}
        check.detail = (f"timed out after {timeout:.0f} s" if code is None else f"exit {code}" if code else
                        "ready: " + ", ".join(Path(r).name for r in roots))
    return body


def agreement_check(mission: Check) -> Check:
    """Per real-data cell: exposed data-wait fraction vs 1 - loader efficiency (issue 15's GPU check; its judgement
    is acceptance_judge.judge_agreement)."""
    j = judge.judge_agreement(mission.figures.get("cells", []), AGREEMENT)
    return Check("data-wait-agreement", status=j.status, detail=j.detail, figures=j.figures)


# ---------------------------------------------------------------- overhead and profile

def overhead_check(out: Path, cores: list[int] | None = None) -> Callable[[Check, float], None]:
    """benchmarks/overhead.py at the acceptance's configuration: its figures read from the JSON it writes (its log
    is for people)."""
    def body(check: Check, timeout: float) -> None:
        figures = out / "overhead.json"
        figures.unlink(missing_ok=True)  # an earlier run's figures are none of this one's
        argv = [sys.executable, "benchmarks/overhead.py", "--model", "resnet50", "--image-size", "224",
                "--batch-size", "256", "--precision", "fp16", "--memory-format", "nhwc", "--steps", "100",
                "--warmup", "30", "--rounds", "2", "--device", "cuda", "--json", str(figures)]
        code = run(argv, log=out / "overhead.log", timeout=timeout, cores=cores)
        got = judge.judge_overhead(code, json.loads(figures.read_text()) if figures.is_file() else None,
                                   OVERHEAD_TARGET, timeout)
        check.status, check.detail = got.status, got.detail
        check.figures = {"command": " ".join(argv[1:])} | got.figures
    return body


def profile_check(out: Path, cores: list[int] | None = None, *, nvtx: bool = True) -> Callable[[Check, float], None]:
    def body(check: Check, timeout: float) -> None:
        matrix = MISSION if nvtx else acceptance_matrix(out, window=None, nvtx=False)
        argv = [sys.executable, "-m", "harness", "profile", str(matrix), *PROFILE_ONLY, "--tool", "torch", "--steps",
                "10", "--out", str(out / "profile")]
        code = run(argv, log=out / "profile.log", timeout=timeout, cores=cores)
        traces = sorted(str(p.relative_to(out)) for p in (out / "profile").rglob("*.trace.json"))
        tables = sorted((out / "profile").rglob("*.key_averages.txt"))
        top = tables[0].read_text().splitlines()[:12] if tables else []
        check.figures = {"traces": traces, "key_averages_head": top}
        check.status = "pass" if code == 0 and traces else "fail"
        check.detail = f"timed out after {timeout:.0f} s" if code is None else f"{len(traces)} trace(s)"
    return body


def ordered(done: dict[str, Check]) -> list[Check]:
    return [done[name] for name in REPORT_ORDER if name in done]


def _run(*args: Any, **kwargs: Any) -> int | None:
    return run(*args, **kwargs)  # looked up at each call: tests replace `run`


def claim_checks(out: Path, budget: Budget, est: dict[str, float], *, nvtx: bool) -> dict[str, Check]:
    """The verdict and the figures it rests on, one after another."""
    bodies = {"verdict-aa": claims.ab_check(out, _run, drill=False, nvtx=nvtx),
              "verdict-drill": claims.ab_check(out, _run, drill=True, nvtx=nvtx),
              "phases": claims.phases_check(out, _run, nvtx=nvtx), "autotune": claims.autotune_check(out),
              "compile-cache": claims.compile_cache_check(out, _run, nvtx=nvtx)}
    return {name: timed(Check(name), budget, est[name], body) for name, body in bodies.items()}


def slice_check(out: Path, budget: Budget, est: dict[str, float], gaps: dict[str, str], *, nvtx: bool) -> Check:
    """The largest part of the mission's world-size-1 slice that fits what is left, less the checks after it."""
    check = Check("mission-slice")
    rung, seconds, smallest = slice_plan(est, budget.left(), gaps, planned_extras(est, budget.left(), gaps))
    if rung is None:
        after = sum(est[name] for name in LAST if name not in gaps)
        check.status = "fail"
        check.detail = (f"not started: its smallest part takes about {smallest:.0f} s, and "
                        f"{max(0.0, budget.left()):.0f} s of the {budget.seconds:.0f} s budget are left, {after:.0f} s "
                        f"of them for {', '.join(LAST)}")
        say(f"{check.name}: {check.detail}")
        return check
    say(f"mission-slice: {judge.rung_cells(rung)} cells at the mission's window ({' '.join(judge.only_flags(rung))})")
    return timed(check, budget, seconds, mission_check(out, judge.only_flags(rung), nvtx=nvtx, planned_s=seconds))


def extra_checks(out: Path, budget: Budget, est: dict[str, float], gaps: dict[str, str], *,
                 nvtx: bool) -> dict[str, Check]:
    """The rest of one GPU's claims, each where what is left of the budget holds its estimate, else skipped
    with what it would need; a check whose module or program is missing, skipped with that reason."""
    profile_matrix = MISSION if nvtx else acceptance_matrix(out, window=None, nvtx=False)
    bodies = extra.extra_checks(out, _run, nvtx=nvtx, profile_matrix=profile_matrix, profile_only=PROFILE_ONLY)
    done = {}
    for name, body in bodies.items():
        if name in gaps:
            done[name] = skipped(name, gaps[name])
        elif budget.left() < est[name]:
            done[name] = skipped(name, f"beyond the budget: ~{est[name]:.0f} s, {max(0.0, budget.left()):.0f} s of "
                                       f"{budget.seconds:.0f} s left (a larger --budget-s runs it)")
        else:
            done[name] = timed(Check(name), budget, est[name], body)
    return done


def gpu_machine_checks(out: Path, budget: Budget, est: dict[str, float] | None = None, *, with_suite: bool = False,
                       find: Callable[[str], Any] = importlib.util.find_spec) -> list[Check]:
    """Every check of a GPU machine, one after another (GPU_CHECKS). With the suite, it runs beside the GPU tests
    and the dataset where the cores allow (split_cores) and must end before the verdict's A/A starts; else first,
    leaving the GPU checks their estimates. A check whose module does not import is skipped with that reason."""
    est = est or dict(ESTIMATES_S)
    gaps = dependency_gaps(find)
    nvtx = judge.missing_module(("nvtx",), find=find) is None
    split = split_cores(usable_cores()) if with_suite else None
    gpu_cores = split[1] if split else None
    rest = sum(est[name] for name in GPU_CHECKS if name != "mission-slice" and name not in gaps) + \
        scaled_rungs(est, gaps)[0][1]
    done = {"suite": skipped("suite", SUITE_SKIP)}
    proc = None
    if with_suite:
        done["suite"] = suite = Check("suite")
        if split is None:
            timed(suite, budget, est["suite"], pytest_check("suite", "not gpu", out, parallel=True, nvtx=nvtx),
                  leave_s=rest)
        elif not refused(suite, budget, est["suite"]):
            proc = start(pytest_argv("suite", "not gpu", out, cores=split[0]), log=out / "suite.log", cores=split[0])
    done["gpu-tests"] = timed(Check("gpu-tests"), budget, est["gpu-tests"],
                              pytest_check("gpu-tests", "gpu", out, parallel=False, cores=gpu_cores, nvtx=nvtx))
    done["dataset"] = timed(Check("dataset"), budget, est["dataset"], dataset_check(out, gpu_cores))
    if proc is not None:  # the verdict and the slice need the machine to themselves: the suite ends first or is stopped
        timeout = max(1.0, budget.left() - (rest - est["gpu-tests"] - est["dataset"]))
        pytest_result(done["suite"], "suite", out, finish(proc, timeout), timeout)
        done["suite"].duration_s = junit_seconds(out / "suite.xml") or timeout  # its own, not the time it waited on
        done["suite"].figures |= {"cores": len(split[0]), "gpu_checks_cores": len(split[1])}
        say(f"{done['suite'].status} suite ({done['suite'].duration_s:.0f} s, beside the GPU checks): "
            f"{done['suite'].detail}")
    done |= claim_checks(out, budget, est, nvtx=nvtx)
    done["mission-slice"] = mission = slice_check(out, budget, est, gaps, nvtx=nvtx)
    done["overhead"] = skipped("overhead", gaps["overhead"]) if "overhead" in gaps else \
        timed(Check("overhead"), budget, est["overhead"], overhead_check(out))  # the suite has ended: every core
    done["profile"] = timed(Check("profile"), budget, est["profile"], profile_check(out, nvtx=nvtx))
    done |= extra_checks(out, budget, est, gaps, nvtx=nvtx)
    done["dali-tests"] = skipped("dali-tests", gaps["dali-tests"]) if "dali-tests" in gaps else dali_check(out)
    dali = judge.judge_dali_cells(mission.figures.get("cells", []), gaps.get("dali-cells"))
    done["dali-cells"] = Check("dali-cells", status=dali.status, detail=dali.detail, figures=dali.figures)
    done["data-wait-agreement"] = agreement_check(mission)
    return ordered(done)


NO_GPU = "needs a GPU; none is visible here"


def cpu_machine_checks(out: Path, budget: Budget, est: dict[str, float], *, with_suite: bool) -> list[Check]:
    """No GPU: the GPU checks skipped with that reason; the mission slice's synthetic fp32 cell under --smoke
    (and the suite, when asked)."""
    checks = [skipped("suite", SUITE_SKIP)]
    if with_suite:
        checks[0] = timed(Check("suite"), budget, est["suite"], pytest_check("suite", "not gpu", out, parallel=True),
                          leave_s=est["mission-slice-smoke"])
    checks += [skipped(name, NO_GPU) for name in REPORT_ORDER[1:]]
    smoke = ["--only", "world_size=1", "--only", "memory_format=nhwc", "--only", "precision=fp32",
             "--only", "backend=synthetic", "--only", "grad_accum=1"]
    checks.append(timed(Check("mission-slice-smoke"), budget, est["mission-slice-smoke"],
                        mission_check(out, smoke, smoke=True)))
    return checks


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", nargs="?", help="folder for the results (default: reports/gpu-acceptance-<UTC time>)")
    p.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S,
                   help=f"wall-clock budget of all checks (default {DEFAULT_BUDGET_S:.0f})")
    p.add_argument("--last", metavar="JSON", help="a previous gpu-acceptance.json: its check times are the estimates")
    p.add_argument("--with-suite", action="store_true", help="also run the CPU suite (pytest -m 'not gpu')")
    args = p.parse_args(argv)
    try:
        est, source = estimates(Path(args.last) if args.last else None)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    started = datetime.now(timezone.utc)
    out = Path(args.out or ROOT / "reports" / f"gpu-acceptance-{started:%Y%m%d-%H%M%S}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    t0, budget = time.monotonic(), Budget(args.budget_s)
    env = environment()
    if env["device_kind"] != "cuda":
        say(f"no GPU is visible here ({env['cpu_model']}); on a GPU machine it would run:")
        announce(gpu_plan(False, est, args.budget_s, dependency_gaps()), budget, source)
        say("none of them can run here; the CPU-meaningful part (environment, the mission slice's CPU cell under "
            "--smoke):")
        announce(cpu_plan(args.with_suite, est), budget, source)
        checks = cpu_machine_checks(out, budget, est, with_suite=args.with_suite)
    else:
        announce(gpu_plan(args.with_suite, est, args.budget_s, dependency_gaps()), budget, source)
        checks = gpu_machine_checks(out, budget, est, with_suite=args.with_suite)
    write_report(out, env, checks, started.isoformat(timespec="seconds"), time.monotonic() - t0, args.budget_s)
    for c in checks:
        print(f"{c.status:>4}  {c.name}: {c.detail}", file=sys.stderr)
    print(out / "gpu-acceptance.md")
    return 1 if any(c.status == "fail" for c in checks) else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
