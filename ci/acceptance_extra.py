"""The GPU acceptance's checks beyond its default budget: one GPU's remaining claims (the kernel diff's CUDA path,
a shared GPU seen, a cold
start's transient, the transient check on GPU windows, Nsight's timeline, the ConvNets family, the break checks of
two GPU tests, the compile targets). Each runs after the budget's checks when what is left holds its estimate;
otherwise it is listed as skipped with what it needs (`--budget-s`)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import acceptance_checks as claims
import acceptance_judge as judge

ROOT = Path(__file__).resolve().parents[1]
BREAKS = {
    "break-cudagraph": ("harness/cell/engine.py", 'group["lr"].fill_(lr)  # where a captured graph reads it',
                        "continue", "tests/cell/test_engine.py", "cudagraph_replays"),
    "break-dali": ("harness/data/dali.py", "            self._held.hand_over(out)\n", "            pass\n",
                   "tests/data/test_data_dali.py", "slow_consumer"),
}
"""A GPU test's break check: (file, its text, the break, the test file, -k): the test must fail on the break."""
CONVNETS = ["--only", "backend=synthetic", "--only", "world_size=1", "--only", "memory_format=nhwc", "--only",
            "precision=fp16", "--only", "grad_accum=1"]


def rows_check(name: str, argv: Callable[[Path], list[str]], judgement: Callable[[list], judge.Judgement],
               out: Path, run: Callable) -> Callable:
    """Run `argv(run folder)`, judge the folder's rows."""
    def body(check, timeout: float) -> None:
        args = argv(out / name)
        code = run(args, log=out / f"{name}.log", timeout=timeout)
        claims.apply(check, judgement(claims.read_rows(out / name)), code, timeout, out / f"{name}.log")
        check.figures["command"] = " ".join(args[1:])
    return body


def gpu_shared_check(out: Path, run: Callable, *, nvtx: bool) -> Callable:
    """A foreign process holds a CUDA context while one cell runs: the row says gpu_shared with its pid."""
    def body(check, timeout: float) -> None:
        ready = out / "foreign-ready"
        code = f"import torch, time; torch.ones(1, device='cuda'); open({str(ready)!r}, 'w').close(); time.sleep(900)"
        foreign = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
        try:
            deadline = time.monotonic() + 60
            while not ready.exists() and time.monotonic() < deadline and foreign.poll() is None:
                time.sleep(0.2)
            matrix = claims.cell_matrix(out, "shared", claims.VERDICT_CELL, nvtx=nvtx)
            argv = claims.nvbench("run", str(matrix), "--out", str(out / "shared"), "--no-progress")
            done = run(argv, log=out / "shared.log", timeout=timeout)
        finally:
            foreign.kill()
            foreign.wait()
        claims.apply(check, judge.judge_gpu_shared(claims.read_rows(out / "shared"), foreign.pid), done, timeout)
    return body


def cold_start_check(out: Path, run: Callable, *, nvtx: bool) -> Callable:
    cell = dict(claims.VERDICT_CELL, warmup_steps=0)
    return rows_check("cold", lambda d: claims.nvbench("run", str(claims.cell_matrix(out, "cold", cell, nvtx=nvtx)),
                                                       "--out", str(d), "--no-progress"),
                      judge.judge_cold_start, out, run)


def convnets_check(out: Path, run: Callable) -> Callable:
    from harness.models.registry import entry, model_names

    reference = {name: entry(name).reference_amp_img_per_s for name in model_names()}
    return rows_check("convnets", lambda d: claims.nvbench("run", str(ROOT / "matrices" / "convnets.toml"),
                                                           *CONVNETS, "--out", str(d), "--no-progress"),
                      lambda rows: judge.judge_convnets(rows, reference), out, run)


def command_check(name: str, command: list[str] | Callable[[], list[str] | None], out: Path, run: Callable, *,
                  made: Callable[[], list[Path]] = lambda: []) -> Callable:
    """A command (or a function giving it, as the check starts) that must exit 0 and make what `made` finds; its
    last lines are the figures."""
    def body(check, timeout: float) -> None:
        argv = command() if callable(command) else command
        if argv is None:
            check.status, check.detail = "fail", "nothing to run it on: the checks it reads did not run"
            return
        code = run(argv, log=out / f"{name}.log", timeout=timeout)
        tail = (out / f"{name}.log").read_text(errors="replace").splitlines()[-12:]
        files, needs_files = made(), getattr(made, "required", False)
        check.status = "pass" if code == 0 and (files or not needs_files) else "fail"
        check.detail = (f"timed out after {timeout:.0f} s" if code is None else f"exit {code}" if code else
                        f"exit 0; {len(files)} file(s)" if needs_files else "exit 0")
        check.figures = {"command": " ".join(argv[1:]), "tail": tail, "files": [str(f) for f in files]}
    return body


def required(find: Callable[[], list[Path]]) -> Callable[[], list[Path]]:
    find.required = True  # type: ignore[attr-defined]
    return find


def _ignoring(out: Path) -> Callable[[str, list[str]], set[str]]:
    """What a copy of the checkout leaves out: git, the kit, reports, caches, and the acceptance's own folder
    where it lies inside the checkout (a copy must not copy itself)."""
    usual = shutil.ignore_patterns(".git", ".gpu", "reports", "__pycache__", "*.egg-info", ".venv")

    def ignore(folder: str, names: list[str]) -> set[str]:
        return set(usual(folder, names)) | {n for n in names if (Path(folder) / n).resolve() == out.resolve()}
    return ignore


def break_check(name: str, out: Path, run: Callable) -> Callable:
    """A copy of the checkout with one line broken: the GPU test that guards it must fail there."""
    path, text, broken, test, selector = BREAKS[name]

    def body(check, timeout: float) -> None:
        copy = out / name / "checkout"
        shutil.copytree(ROOT, copy, ignore=_ignoring(out))
        source = (copy / path).read_text()
        if source.count(text) != 1:
            check.status, check.detail = "fail", f"{path}: the line to break is not there once: update the check"
            return
        (copy / path).write_text(source.replace(text, broken))
        argv = [sys.executable, "-m", "pytest", "-m", "gpu", str(copy / test), "-k", selector, "-q", "-p",
                "no:cacheprovider", "-p", "no:xdist", f"--junitxml={out / name / 'junit.xml'}", f"--rootdir={copy}",
                "-c", str(copy / "pyproject.toml")]
        # the copy's harness, not this checkout's: no working directory on sys.path (Python >= 3.11)
        code = run(argv, log=out / f"{name}.log", timeout=timeout, env={"PYTHONPATH": str(copy), "PYTHONSAFEPATH": "1"})
        from acceptance_judge import junit_counts

        counts = junit_counts(out / name / "junit.xml")
        claims.apply(check, judge.judge_break(code, counts, f"{path}: {text.strip()} -> {broken.strip()}"),
                     0, timeout)
    return body


def nsys_reports(out: Path) -> Callable[[], list[Path]]:
    return required(lambda: sorted((out / "nsys").rglob("*.nsys-rep")) if (out / "nsys").is_dir() else [])


def kernel_changes(base, cand) -> list[dict[str, Any]]:
    """The operators the kernel diff calls changed in each cell profiled on both sides (two kernels.parquet tables),
    as data: the diff `nvbench ab --kernels` makes at its default floor and false discovery rate (the check passes
    neither flag), by the same pure judge (harness.analysis.judge.kernel_diff)."""
    from harness.analysis.judge.kernel_diff import diff_cell
    from harness.catalogue import col

    out = []
    for cell in sorted(set(base.column(col.cell_id).to_pylist()) & set(cand.column(col.cell_id).to_pylist())):
        diff = diff_cell(base, cand, cell)
        out += [{"cell": cell, "phase": op.phase, "operator": op.operator, "verdict": op.verdict,
                 "change_s": op.change_s} for op in (diff.changed() if diff is not None else ())]
    return out


def kernels_check(out: Path, run: Callable, *, nvtx: bool) -> Callable:
    """`nvbench ab --kernels` of the A/A's cell with side B drilled (a device sleep each step, issue 49's
    slowdown of known size): the profiled repeats' CUDA kernels by phase, and the diff naming the drill."""
    def body(check, timeout: float) -> None:
        from harness.results import kernels

        matrix = claims.cell_matrix(out, "kernels", claims.VERDICT_CELL, nvtx=nvtx)
        argv = claims.nvbench("ab", str(matrix), "--repeats", "3", "--fire-drill", "20", "--kernels",
                              "--kernel-repeats", "3", "--out", str(out / "kernels"))
        code = run(argv, log=out / "kernels.log", timeout=timeout)
        tables = {s: kernels.read_kernels(path) if (path := out / "kernels" / s / kernels.KERNELS_FILE).is_file()
                  else None for s in ("a", "b")}
        sides = {s: t.to_pylist() if t is not None else [] for s, t in tables.items()}
        changed = kernel_changes(tables["a"], tables["b"]) if None not in tables.values() else []
        # 3 pairs may leave the timed verdict inconclusive (exit 3): the profiled repeats are what is checked
        claims.apply(check, judge.judge_kernels(sides, changed), 0 if code in (0, 3) else code, timeout,
                     out / "kernels.log")
        check.figures["command"] = " ".join(argv[1:])
    return body


def extra_checks(out: Path, run: Callable, *, nvtx: bool, profile_matrix: Path,
                 profile_only: list[str]) -> dict[str, Callable]:
    """name -> body, in the order they run when the budget leaves room (EXTRA_ESTIMATES_S's)."""
    def transients() -> list[str]:  # the run folders that measured steps: the slice and the A/A, where they ran
        runs = [out / d for d in ("mission", "verdict-aa/a", "verdict-aa/b") if (out / d / "steps").is_dir()]
        return [sys.executable, "benchmarks/transients.py", "--runs", *map(str, runs)] if runs else None

    nsys = claims.nvbench("profile", str(profile_matrix), *profile_only, "--tool", "nsys", "--steps", "10",
                          "--out", str(out / "nsys"))
    targets = [sys.executable, "benchmarks/compile_targets.py", "--out", str(out / "compile-targets")]
    return {"kernels": kernels_check(out, run, nvtx=nvtx), "transients": command_check("transients", transients, out, run),
            "gpu-shared": gpu_shared_check(out, run, nvtx=nvtx), "cold-start": cold_start_check(out, run, nvtx=nvtx),
            "break-cudagraph": break_check("break-cudagraph", out, run),
            "break-dali": break_check("break-dali", out, run),
            "nsys-profile": command_check("nsys-profile", nsys, out, run, made=nsys_reports(out)),
            "convnets": convnets_check(out, run),
            "compile-targets": command_check("compile-targets", targets, out, run)}


EXTRA_NEEDS = {"break-dali": ("nvidia.dali",), "nsys-profile": ("nsys",)}
"""What an extra check cannot run without: a module, or a program on PATH (nsys)."""
EXTRA_ESTIMATES_S = {"kernels": 100.0, "transients": 15.0, "gpu-shared": 25.0, "cold-start": 20.0, "break-cudagraph": 40.0,
                     "break-dali": 60.0, "nsys-profile": 45.0, "convnets": 150.0, "compile-targets": 900.0}
"""Reasoned, not measured: a cell's process 17-35 s on an H100 (the kernels check: 6 timed and 6 profiled processes
of the A/A's cell at ~7 s each, and two environment probes); a break check a pytest start and its GPU test;
the ConvNets family 4 cells of two larger models; the compile targets 24 cells, most of them compiling."""


def missing_tool(needs: tuple[str, ...], find: Callable[[str], Any]) -> str | None:
    """Why an extra check cannot run here: a module that does not import or a program not on PATH (nsys)."""
    programs = [n for n in needs if n == "nsys"]
    if programs and shutil.which("nsys") is None:
        return "needs Nsight Systems (nsys), not on PATH here"
    return judge.missing_module([n for n in needs if n not in programs], find=find)
