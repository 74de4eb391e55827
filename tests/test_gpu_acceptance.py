"""ci/gpu-acceptance.sh: on this CPU machine it says there is no GPU, prints its plan, lists the GPU checks as
skipped, runs the CPU-meaningful part and exits 0 with both reports written; on a GPU machine (its process
launches replaced) the order, the budget's gates and the estimates; its judgements (junit counts, the
data-wait agreement) on known inputs."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import ROOT

spec = importlib.util.spec_from_file_location("gpu_acceptance", ROOT / "ci" / "gpu_acceptance.py")
acceptance = importlib.util.module_from_spec(spec)
sys.modules["gpu_acceptance"] = acceptance  # dataclasses look their module up
spec.loader.exec_module(acceptance)


NO_EXTRAS = dict(acceptance.ESTIMATES_S, **dict.fromkeys(acceptance.EXTRA_CHECKS, 5000.0))
"""Estimates under which no extra check fits a test's budget (their bodies would copy the checkout)."""


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU this command is the whole acceptance")
def test_without_a_gpu_it_runs_the_cpu_part_and_exits_0(tmp_path):
    proc = subprocess.run(["bash", "ci/gpu-acceptance.sh", str(tmp_path / "acc")], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin",
                                                       "NVBENCH_CACHE": str(tmp_path / "cache")})
    assert proc.returncode == 0, proc.stderr
    assert "no GPU is visible here" in proc.stderr
    # first the plan a GPU machine would run, every GPU check with its estimate and their total against the budget
    gpu_plan = proc.stderr.index("gpu-acceptance: budget 540 s; estimates from stated defaults")
    cpu_plan = proc.stderr.index("gpu-acceptance: none of them can run here")
    listed = proc.stderr[gpu_plan:cpu_plan]
    for name in acceptance.GPU_CHECKS:
        assert re.search(rf"gpu-acceptance:   {name} +~\d+ s", listed), name
    total = int(re.search(r"gpu-acceptance:   total +~(\d+) s: fits the budget", listed).group(1))
    assert total <= 540
    # then the CPU part's plan, before it runs
    assert cpu_plan < proc.stderr.index("gpu-acceptance:   mission-slice-smoke  ~90 s") < proc.stderr.index(
        "gpu-acceptance: pass mission-slice-smoke (")
    assert "gpu-acceptance:   suite                skip: the CPU suite is CI's job (--with-suite adds it)" \
        in proc.stderr
    doc = json.loads((tmp_path / "acc" / "gpu-acceptance.json").read_text())
    assert doc["result"] == "pass" and doc["environment"]["device_kind"] == "cpu"
    *skips, check = doc["checks"]
    assert [(c["name"], c["status"], c["detail"]) for c in skips] == [
        ("suite", "skip", "the CPU suite is CI's job (--with-suite adds it)")] + [
        (name, "skip", "needs a GPU; none is visible here") for name in acceptance.REPORT_ORDER[1:]]
    assert check["name"] == "mission-slice-smoke" and check["status"] == "pass"
    cells = {c["cell"]: c for c in check["figures"]["cells"]}
    assert set(cells) == {"synthetic/nhwc/fp32/ga1"}
    assert all(c["status"] == "ok" and c["throughput_img_per_s"] > 0 for c in cells.values())
    md = (tmp_path / "acc" / "gpu-acceptance.md").read_text()
    claim = acceptance.claims.CLAIMS["mission-slice-smoke"]
    assert md.startswith("# nvbench GPU acceptance: pass") and f"| mission-slice-smoke | {claim} | pass |" in md
    assert doc["budget_s"] == 540 and doc["wall_s"] < 540 and " s of a 540 s budget" in md
    # where the time went: each cell's phases as its row has them, and the run's matrix efficiency
    (cell,) = cells.values()
    assert {k: cell[k] for k in ("backend", "memory_format", "precision", "grad_accum")} == {
        "backend": "synthetic", "memory_format": "nhwc", "precision": "fp32", "grad_accum": 1}  # what judges read
    phases = [cell[k] for k in ("startup_s", "build_s", "warmup_window_s", "window_s")]
    assert all(v > 0 for v in phases) and sum(phases) < cell["duration_s"]
    row = f"| synthetic/nhwc/fp32/ga1 | {cell['duration_s']:.1f} | {cell['startup_s']:.1f} | {cell['build_s']:.1f} |"
    assert row in md
    assert 0 < check["figures"]["matrix_efficiency"] < 1 and "window_s" in check["figures"]["time_breakdown_s"]
    assert f"Matrix efficiency {check['figures']['matrix_efficiency']:.3f}" in md


def _axes(backend, memory_format="nhwc", precision="fp16", grad_accum=1) -> dict:
    """A slice row's label and the axes slice_rows keeps beside it: what the judges read."""
    return {"cell": f"{backend}/{memory_format}/{precision}/ga{grad_accum}", "backend": backend,
            "memory_format": memory_format, "precision": precision, "grad_accum": grad_accum}


def test_the_data_wait_agreement_is_judged_per_real_data_cell():
    def row(backend, eff, exposed):
        return _axes(backend) | {"status": "ok", "loader_efficiency": eff, "exposed_data_wait_frac": exposed}

    mission = acceptance.Check("mission-slice", figures={"cells": [
        row("dali-gpu", 0.88, 0.10), row("pytorch", 0.55, 0.30), row("synthetic", None, 0.0)]})
    check = acceptance.agreement_check(mission)
    assert check.status == "fail" and [c["cell"] for c in check.figures["cells"]] == [
        "dali-gpu/nhwc/fp16/ga1", "pytorch/nhwc/fp16/ga1"]
    assert "1 of 2 cells differ by more than 0.05: pytorch/nhwc/fp16/ga1 -0.150" in check.detail
    assert acceptance.agreement_check(acceptance.Check("mission-slice")).status == "skip"


def test_each_agreement_carries_the_loader_efficiencys_own_uncertainty():
    # Run 2's dali-gpu/fp16/ga1 and its synthetic twin on the H100 (docs/gpu-validation.md): 0.052 apart.
    def row(axes, img_s, low, high, eff, exposed):
        return axes | {"status": "ok", "throughput_img_per_s": img_s, "throughput_ci_low_img_per_s": low,
                       "throughput_ci_high_img_per_s": high, "loader_efficiency": eff,
                       "exposed_data_wait_frac": exposed}

    mission = acceptance.Check("mission-slice", figures={"cells": [
        row(_axes("dali-gpu"), 4555, 4361, 4767, 0.945, 0.003),
        row(_axes("synthetic") | {"cell": "the twin, by its axes"}, 4817, 4639, 5010, None, 0.0),
        row(_axes("pytorch", grad_accum=2), 2600, None, None, 0.54, 0.45)]})
    check = acceptance.agreement_check(mission)
    dali, pytorch = check.figures["cells"]
    expected = 0.945 * (((4767 - 4361) / 2 / 4555) ** 2 + ((5010 - 4639) / 2 / 4817) ** 2) ** 0.5
    assert dali["loader_efficiency_uncertainty"] == pytest.approx(expected)
    assert expected == pytest.approx(0.056, abs=1e-3)
    assert pytorch["loader_efficiency_uncertainty"] is None  # no interval of its own: nothing claimed
    assert check.status == "fail"  # the verdict is the tolerance's alone
    assert "dali-gpu/nhwc/fp16/ga1 -0.052 (loader efficiency +-0.056)" in check.detail


def test_junit_counts_name_what_did_not_pass(tmp_path):
    xml = tmp_path / "j.xml"
    xml.write_text("""<testsuites><testsuite>
      <testcase classname="tests.test_a" name="ok"/>
      <testcase classname="tests.test_a" name="bad"><failure message="x"/></testcase>
      <testcase classname="tests.test_data_dali" name="skip"><skipped/></testcase>
      <testcase classname="tests.test_data_dali" name="err"><error message="y"/></testcase>
    </testsuite></testsuites>""")
    counts = acceptance.junit_counts(xml)
    assert {k: counts[k] for k in ("passed", "failed", "errors", "skipped")} == dict(
        passed=1, failed=1, errors=1, skipped=1)
    assert counts["not_passed"] == ["tests.test_a::bad", "tests.test_data_dali::err"]
    dali = acceptance.junit_counts(xml, only="test_data_dali")
    assert (dali["skipped"], dali["errors"], dali["passed"]) == (1, 1, 0)


def test_the_suite_shares_the_cores_with_the_gpu_checks_only_where_there_are_enough(monkeypatch):
    assert acceptance.split_cores(list(range(16))) == (list(range(12)), [12, 13, 14, 15])
    assert acceptance.split_cores([0, 1]) is None and acceptance.split_cores(list(range(7))) is None
    monkeypatch.setattr(acceptance, "have_xdist", lambda: True)
    assert acceptance.pytest_argv("suite", "not gpu", ROOT, cores=list(range(12)))[-4:] == [
        "-n", "6", "--dist", "loadfile"]
    # the GPU tests in one process, whatever `-n` PYTEST_ADDOPTS carries
    assert acceptance.pytest_argv("suite", "gpu", ROOT, cores=None)[-2:] == ["-n", "0"]
    # Without pytest-xdist the suite runs in one process on the cores it has.
    monkeypatch.setattr(acceptance, "have_xdist", lambda: False)
    assert "-n" not in acceptance.pytest_argv("suite", "not gpu", ROOT, cores=list(range(12)))


def running(pid: int) -> bool:
    """The process exists and is not a zombie (a killed orphan stays one until its new parent reaps it)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_check_that_outruns_its_time_is_killed_with_every_process_it_started(tmp_path):
    pid_file = tmp_path / "grandchild"
    proc = acceptance.start(["bash", "-c", f"sleep 60 & echo $! > {pid_file}; wait"], log=tmp_path / "log",
                            cores=[0])
    assert acceptance.finish(proc, timeout=2) is None
    grandchild = int(pid_file.read_text())
    deadline = time.monotonic() + 5  # SIGKILL is delivered at the target's next scheduling, not at once
    while running(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not running(grandchild)  # the sleep the shell started is gone too, not orphaned
    assert acceptance.run(["bash", "-c", "exit 3"], log=tmp_path / "log", timeout=10) == 3


def test_the_suite_beside_the_gpu_checks_reports_its_own_time(tmp_path):
    (tmp_path / "suite.xml").write_text('<testsuites><testsuite name="pytest" time="12.345"/></testsuites>')
    assert acceptance.junit_seconds(tmp_path / "suite.xml") == 12.3
    assert acceptance.junit_seconds(tmp_path / "missing.xml") == 0.0


def test_a_check_the_budget_leaves_no_time_for_fails_the_acceptance(tmp_path):
    ran = []
    check = acceptance.timed(acceptance.Check("mission-slice"), acceptance.Budget(5), 120,
                             lambda c, timeout: ran.append(timeout))
    assert not ran and check.status == "fail"
    assert check.detail == "not started: it takes about 120 s, and 5 s of the 5 s budget are left"
    # The whole command: a budget too small for its one check on this machine is a failed acceptance, exit 1.
    assert acceptance.main([str(tmp_path / "acc"), "--budget-s", "1"]) == 1
    doc = json.loads((tmp_path / "acc" / "gpu-acceptance.json").read_text())
    assert doc["result"] == "fail" and doc["budget_s"] == 1
    gated = [c for c in doc["checks"] if c["status"] != "skip"]
    assert gated and all(c["status"] == "fail" and c["detail"].startswith("not started: ") for c in gated)
    assert "s of a 1 s budget" in (tmp_path / "acc" / "gpu-acceptance.md").read_text()


@pytest.mark.parametrize(("cores", "with_suite"), [(16, True), (2, True), (16, False)],
                         ids=["suite-beside-gpu-checks", "suite-first", "no-suite"])
def test_on_a_gpu_machine_every_check_the_budget_leaves_no_time_for_fails_unstarted(tmp_path, monkeypatch, cores,
                                                                                    with_suite, capsys):
    monkeypatch.setattr(acceptance, "usable_cores", lambda: list(range(cores)))
    monkeypatch.setattr(acceptance, "start", lambda *a, **k: pytest.fail(f"started {a[0]}"))
    checks = {c.name: c for c in acceptance.gpu_machine_checks(tmp_path, acceptance.Budget(1), with_suite=with_suite)}
    assert tuple(checks) == acceptance.REPORT_ORDER
    gated = ["gpu-tests", "dataset", "verdict-aa", "verdict-drill", "phases", "compile-cache", "mission-slice",
             "overhead", "profile"] + (["suite"] if with_suite else [])
    err = capsys.readouterr().err
    for name in gated:  # each failed unstarted, and said so as it happened
        assert checks[name].status == "fail" and checks[name].detail.startswith("not started: "), name
        assert f"gpu-acceptance: {name}: not started: it" in err, name
    assert with_suite or checks["suite"].status == "skip"


def test_the_plan_comes_first_and_a_check_that_would_overrun_is_not_started_with_a_line(tmp_path, monkeypatch,
                                                                                          capsys):
    monkeypatch.setattr(acceptance, "usable_cores", lambda: list(range(16)))
    monkeypatch.setattr(acceptance, "run", lambda argv, *, log, timeout, env=None, cores=None: 0)
    est = dict(acceptance.ESTIMATES_S, **{"slice-factor": 1000.0},  # every part of the slice far over the budget
               **dict.fromkeys(acceptance.EXTRA_CHECKS, 5000.0))
    acceptance.announce(acceptance.gpu_plan(False, est, 540), acceptance.Budget(540), "a test's")
    checks = {c.name: c for c in acceptance.gpu_machine_checks(tmp_path, acceptance.Budget(540), est)}
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "gpu-acceptance: budget 540 s; estimates from a test's:"
    assert err[1] == "gpu-acceptance:   suite                skip: the CPU suite is CI's job (--with-suite adds it)"
    assert "gpu-acceptance:   mission-slice        ~25000 s (not even its smallest part fits what the others leave)" \
        in err and "gpu-acceptance:   total                ~25465 s: does NOT fit the budget: a check whose " \
        "estimate exceeds what is left will not start" in err
    assert "gpu-acceptance:   gpu-shared           skip: beyond the 540 s budget: ~5000 s (runs where --budget-s " \
        "leaves room, e.g. --budget-s 5540)" in err
    said = [line for line in err if line.startswith("gpu-acceptance: mission-slice: not started: its smallest part "
                                                     "takes about 25000 s, and ")]
    assert len(said) == 1 and checks["mission-slice"].status == "fail"
    assert not any(checks[n].detail.startswith("not started") for n in acceptance.GPU_CHECKS if n != "mission-slice")


def test_estimates_are_the_last_reports_times_of_the_checks_that_ran_to_their_end(tmp_path):
    last = tmp_path / "gpu-acceptance.json"
    last.write_text(json.dumps({"checks": [
        {"name": "gpu-tests", "status": "pass", "detail": "", "duration_s": 61.5},
        {"name": "overhead", "status": "fail", "detail": "harness / bare 0.97", "duration_s": 70.0},
        {"name": "mission-slice", "status": "fail", "detail": "timed out after 141 s", "duration_s": 141.0},
        {"name": "profile", "status": "fail", "detail": "not started: it takes about 40 s", "duration_s": 0.0}]}))
    est, source = acceptance.estimates(last)
    assert (est["gpu-tests"], est["overhead"]) == (61.5, 70.0) and str(last) in source
    # a check stopped or never started tells nothing of its time: the stated default stands
    assert "slice-factor" not in est
    assert est["profile"] == acceptance.ESTIMATES_S["profile"]
    assert acceptance.estimates(None) == (acceptance.ESTIMATES_S, "stated defaults (ci/gpu_acceptance.py ESTIMATES_S)")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ValueError, match="--last .*bad.json: not a gpu-acceptance.json"):
        acceptance.estimates(tmp_path / "bad.json")
    assert acceptance.main([str(tmp_path / "x"), "--last", str(tmp_path / "bad.json")]) == 2
    assert not (tmp_path / "x").exists()


def test_the_default_slice_fits_the_budget_with_every_other_gpu_check():
    for gaps in ({}, {"dali-cells": "no DALI", "dali-tests": "no DALI"}, {"overhead": "no nvtx"}):
        plan = acceptance.gpu_plan(False, acceptance.ESTIMATES_S, acceptance.DEFAULT_BUDGET_S, gaps)
        assert sum(v for _, v, _ in plan if not isinstance(v, str)) <= acceptance.DEFAULT_BUDGET_S
        (note,) = [note for name, _, note in plan if name == "mission-slice"]
        cells = int(re.match(r"(\d+) cells at the mission's window: --only world_size=1 ", note).group(1))
        assert cells >= 2  # a synthetic cell and a real-data one at least
    assert acceptance.SLICE.count("--only") == 3 and "precision=fp16" in acceptance.SLICE


def test_the_pretend_gpu_hook_makes_the_runner_choose_cuda():
    """ci/pretend_gpu (the audit that runs the suite as a GPU machine would, docs/gpu-validation.md) must keep
    fooling what decides a cell's device: the parent's NVML fingerprint and torch in every child."""
    code = ("import torch; from harness.results.env import collect_env; "
            "from harness.orchestrate.session.capabilities import probe_capabilities; e = collect_env(); "
            "print(e['device_kind'], e['gpu_count'], probe_capabilities('auto', e).device, torch.cuda.is_available())")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "ci" / "pretend_gpu")}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
                         check=False)
    assert out.stdout.split() == ["cuda", "1", "cuda", "True"], out.stderr


def test_the_slices_dataset_is_made_before_the_slice_where_the_slice_will_read_it(tiny_matrix, tmp_path, monkeypatch):
    monkeypatch.setattr(acceptance, "MISSION", tiny_matrix('backend = ["synthetic", "pytorch"]'))
    monkeypatch.setattr(acceptance, "SLICE", ["--only", "world_size=1"])
    check = acceptance.Check("dataset")
    acceptance.dataset_check(tmp_path, None)(check, 120)
    assert check.status == "pass", (tmp_path / "dataset.log").read_text()
    (root,) = check.figures["datasets"]
    assert (Path(root) / "dataset.json").is_file() and Path(root).parent == tmp_path / "cache" / "datasets"
    assert check.detail == f"ready: {Path(root).name}"


def test_the_suite_alone_on_a_small_gpu_machine_leaves_the_gpu_checks_their_estimates(tmp_path, monkeypatch):
    timeouts = {}

    def fake_run(argv, *, log, timeout, env=None, cores=None):
        timeouts[log.stem] = timeout
        return 0

    monkeypatch.setattr(acceptance, "usable_cores", lambda: [0, 1])  # too few to run the suite beside the GPU checks
    monkeypatch.setattr(acceptance, "run", fake_run)
    acceptance.gpu_machine_checks(tmp_path, acceptance.Budget(1000), NO_EXTRAS, with_suite=True)
    est = acceptance.ESTIMATES_S
    rest = sum(est[name] for name in acceptance.GPU_CHECKS if name != "mission-slice") + \
        acceptance.judge.slice_rungs(dali=True)[0][1]  # the checks' estimates and the slice's smallest part
    assert 1000 - rest - 5 < timeouts["suite"] <= 1000 - rest
    assert timeouts["mission"] >= acceptance.judge.slice_rungs(dali=True)[0][1]  # what the suite left is the slice's


def test_failed_slice_cells_are_told_once_per_cause():
    rows = [{"cell": f"synthetic/nhwc/fp16/ga{ga}", "status": "failed", "reason": "rank 0: no CUDA"} for ga in (1, 2)]
    rows.append({"cell": "pytorch/nhwc/fp16/ga2", "status": "timeout", "reason": "no progress for 300 s"})
    assert acceptance.judge.failures_text(rows) == ("2 cells (synthetic/nhwc/fp16/ga1, synthetic/nhwc/fp16/ga2): failed: rank 0: "
                                                      "no CUDA; pytorch/nhwc/fp16/ga2: timeout: no progress for 300 s")


@pytest.mark.parametrize("with_suite", [True, False], ids=["with-suite", "default"])
def test_the_slice_runs_alone_after_the_suite_and_every_gpu_side_check(tmp_path, monkeypatch, with_suite):
    order = []

    def fake_run(argv, *, log, timeout, env=None, cores=None):
        order.append((log.stem, cores))
        return 0

    monkeypatch.setattr(acceptance, "usable_cores", lambda: list(range(16)))
    monkeypatch.setattr(acceptance, "run", fake_run)
    monkeypatch.setattr(acceptance, "start",
                        lambda argv, *, log, cores=None, env=None: order.append(("suite", cores)) or "the suite")
    monkeypatch.setattr(acceptance, "finish", lambda proc, timeout: order.append(("suite finished", None)) or 0)
    checks = acceptance.gpu_machine_checks(tmp_path, acceptance.Budget(2000), NO_EXTRAS, with_suite=with_suite)
    side = list(range(12, 16)) if with_suite else None
    assert order == ([("suite", list(range(12)))] if with_suite else []) + [("gpu-tests", side), ("dataset", side)] + (
        [("suite finished", None)] if with_suite else []) + [
        ("verdict-aa", None), ("verdict-drill", None), ("graphed", None), ("inductor", None), ("mission", None),
        ("overhead", None), ("profile", None)]
    assert tuple(c.name for c in checks) == acceptance.REPORT_ORDER
    assert all(c.status == "skip" and c.detail.startswith("beyond the budget: ~5000 s, ") for c in checks
               if c.name in acceptance.EXTRA_CHECKS)


def test_the_extra_checks_run_in_order_while_the_budget_holds_them_and_skip_with_their_reason(tmp_path, monkeypatch):
    ran = []
    bodies = {name: (lambda name: lambda check, timeout: ran.append(name) or setattr(check, "status", "pass"))(name)
              for name in acceptance.EXTRA_CHECKS}
    monkeypatch.setattr(acceptance.extra, "extra_checks", lambda *a, **k: bodies)
    est = dict.fromkeys(acceptance.EXTRA_CHECKS, 10.0) | {"convnets": 100.0}
    gaps = {"nsys-profile": "needs Nsight Systems (nsys), not on PATH here"}
    done = acceptance.extra_checks(tmp_path, acceptance.Budget(75), est, gaps, nvtx=True)
    assert ran == ["kernels", "transients", "gpu-shared", "cold-start", "break-cudagraph", "break-dali",
                   "compile-targets"]
    assert (done["nsys-profile"].status, done["nsys-profile"].detail) == ("skip", gaps["nsys-profile"])
    assert done["convnets"].status == "skip" and re.fullmatch(
        r"beyond the budget: ~100 s, 7\d s of 75 s left \(a larger --budget-s runs it\)", done["convnets"].detail)
    assert list(done) == list(acceptance.EXTRA_CHECKS)
