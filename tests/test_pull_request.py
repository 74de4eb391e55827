"""A pull request judged against its base (issue 66), end to end on a throwaway repository of this checkout (its
harness/, ci/ and pyproject.toml; `main` one commit, a branch one more): `bash ci/pull-request.sh` on the tiny cell
with `[judge.work_gates] host_syncs = "no-rise"` exits 1 on a branch whose commit adds a `.item()` to the optimizer
phase, its pr-comment.md opening `optimizer +1 host sync per step`; on a branch that changes only a comment it exits
0 or 3 (timing on this machine may stay undecided, never a fail) with `work: same` for the cell. `nvbench ab --base`
names side A's commit and worktree in ab.json, leaves no worktree behind (also when stopped by SIGINT), and a base
that does not resolve or a checkout outside git is one line, exit 2."""

from __future__ import annotations

import importlib.util
import json
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import ROOT, TINY, first_cell, nvbench, stop_and_check, wait_for

from harness.analysis.judge.work_diff import SideWork, diff_sides
from harness.analysis.pages.render import render
from harness.matrix.judge import WorkGate
from harness.results import store

spec = importlib.util.spec_from_file_location("pr_comment", ROOT / "ci" / "pr_comment.py")
pr_comment = importlib.util.module_from_spec(spec)
sys.modules["pr_comment"] = pr_comment  # dataclasses look their module up
spec.loader.exec_module(pr_comment)

ENGINE = Path("harness/cell/engine.py")
KEEP = "        loss = self.micro_step(images, labels, sync_grads=sync_grads)\n"
READ = "            self.optimizer.zero_grad(set_to_none=True)\n"
GATES = '\n[judge.work_gates]\nhost_syncs = "no-rise"\n'


SYNC, MM = ("optimizer", "host_syncs", "aten::_local_scalar_dense"), ("forward", "op_calls", "aten::mm")


def _side(values: dict, processes: int = 1) -> SideWork:
    return SideWork(processes=processes, ranges={k: (v, v) for k, v in values.items()})


def test_the_comment_leads_with_broken_gates_then_changed_work_and_the_job_fails_on_a_gate_whatever_the_timing(
        tmp_path):
    gates = (WorkGate(counter="host_syncs", rule="no-rise"),)
    diffs = {"d-same": diff_sides("d", _side({MM: 40.0}), _side({MM: 40.0})),
             "c-mm": diff_sides("c", _side({MM: 40.0}), _side({MM: 56.0})),
             "b-none": diff_sides("b", _side({}, processes=0), _side({MM: 40.0})),
             "a-sync": diff_sides("a", _side({MM: 40.0}), _side({MM: 40.0, SYNC: 1.0}))}
    lines = {cid: pr_comment.work_line(cid, diff, gates) for cid, diff in diffs.items()}
    assert [(w.cell, w.text, w.gate) for w in sorted(lines.values(), key=lambda w: (w.rank, w.cell))] == [
        ("a-sync", "optimizer +1 host sync per step (aten::_local_scalar_dense)",
         'work gate host_syncs = "no-rise" broken'),
        ("c-mm", "forward +16 aten::mm per step", ""), ("d-same", "work: same", ""),
        ("b-none", "work: no work counted (no counted process on A)", "")]
    # a busy machine left the timing undecided (nvbench ab exit 3, no report): the counts still fail the job
    assert pr_comment.job_exit(3, lines) == 1 and pr_comment.job_exit(0, lines) == 1
    calm = {k: v for k, v in lines.items() if k != "a-sync"}
    assert [pr_comment.job_exit(code, calm) for code in (0, 1, 3, 2, 130)] == [0, 1, 3, 2, 130]
    assert pr_comment.job_exit(2, lines) == 2  # bad input stays bad input
    store.write_json(tmp_path / "ab.json", {"stopped_busy": "the machine was busy", "base": {"rev": "main",
                                                                                             "commit": "ab" * 20}})
    text = render("pr_comment.md", **pr_comment.comment_values(tmp_path, None, lines, {"base": {"rev": "main"}}))
    assert text.startswith("optimizer +1 host sync per step (aten::\\_local\\_scalar\\_dense) — a-sync — **work gate "
                           'host\\_syncs = "no-rise" broken**\n\nforward +16 aten::mm per step — c-mm\n\n'), text
    assert "No timed verdict: the machine was busy; on a quiet runner, nvbench ab --resume" in text


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout.strip()


def add_sync(repo: Path) -> None:
    """The optimizer phase reads the loss back: one host sync (aten::_local_scalar_dense) a step, nothing else."""
    text = (repo / ENGINE).read_text()
    assert text.count(KEEP) == 1 and text.count(READ) == 1, "the engine moved: update this test"
    text = text.replace(KEEP, KEEP + "        self._injected_loss = loss\n")
    (repo / ENGINE).write_text(text.replace(READ, READ + "            self._injected_loss.item()  # injected\n"))


def add_comment(repo: Path) -> None:
    text = (repo / ENGINE).read_text()
    (repo / ENGINE).write_text(text.replace(READ, READ.replace("\n", "  # a comment, nothing more\n"), 1))


def repository(root: Path, change) -> tuple[Path, str]:
    """root/repo: this checkout's harness/, ci/ and pyproject.toml on `main` (one commit), then a branch `pr` with
    one commit that is `change(repo)`. Returns the repository and main's commit."""
    repo = root / "repo"
    for part in ("harness", "ci"):
        shutil.copytree(ROOT / part, repo / part, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", ".gitignore"):
        shutil.copy(ROOT / name, repo / name)
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    _git(repo, "config", "user.email", "t@example.com")
    _git(repo, "config", "user.name", "t")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "base")
    base = _git(repo, "rev-parse", "HEAD")
    _git(repo, "checkout", "-q", "-b", "pr")
    change(repo)
    _git(repo, "commit", "-q", "-am", "the pull request")
    return repo, base


def matrix(root: Path, extra: str = GATES) -> Path:
    path = root / "tiny.toml"
    path.write_text(TINY.format(axes='backend = ["synthetic"]', repeats=1, timeout=120, cache=root / "cache",
                                nvtx="false", device="cpu") + textwrap.dedent(extra))
    return path


def pull_request(repo: Path, tiny: Path, out: Path, env: dict) -> subprocess.CompletedProcess:
    """`bash ci/pull-request.sh` in the repository as a CI job runs it: one pair, its counted processes."""
    knobs = {"NVBENCH_MATRIX": str(tiny), "NVBENCH_REPEATS": "", "NVBENCH_MAX_REPEATS": "", "NVBENCH_OUT": str(out),
             "NVBENCH_AB_ARGS": "--kernel-repeats 0", "PYTHON": sys.executable,
             "GITHUB_STEP_SUMMARY": str(out.parent / "summary.md")}
    return subprocess.run(["bash", "ci/pull-request.sh"], cwd=repo, capture_output=True, text=True, timeout=600,
                          env={**subprocess.os.environ, **env, **knobs})


def worktrees(repo: Path) -> list[str]:
    return _git(repo, "worktree", "list", "--porcelain").split("\n\n")


@pytest.mark.documented("NVBENCH_MATRIX=matrices/resnet50.toml NVBENCH_ONLY=world_size=1 bash ci/pull-request.sh",
                         bound_s=600)
def test_a_pull_request_that_adds_a_host_sync_breaks_the_gate_and_says_so_first(tmp_path, quiet_machine):
    repo, base = repository(tmp_path, add_sync)
    out = tmp_path / "pr"
    proc = pull_request(repo, matrix(tmp_path), out, quiet_machine)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    comment = (out / "pr-comment.md").read_text()
    first = comment.splitlines()[0]
    assert first.startswith("optimizer +1 host sync per step (aten::\\_local\\_scalar\\_dense) — synthetic\\_nchw"), \
        comment
    assert first.endswith('**work gate host\\_syncs = "no-rise" broken**'), first
    assert (tmp_path / "summary.md").read_text() == comment  # the job summary holds the comment
    assert "| synthetic\\_nchw\\_fp32\\_ws1\\_ga1 | gate broken |" in comment
    meta = json.loads((out / "ab.json").read_text())  # side A: main's commit, from a worktree under the A/B folder
    assert (meta["base"]["rev"], meta["base"]["commit"], meta["base"]["merge_base"]) == ("main", base, True)
    assert meta["checkout"]["a"] == meta["base"]["worktree"] == str(out.absolute() / "worktrees" / base[:12])
    assert meta["checkout"]["b"] is None and meta["base"]["b_dirty"] == []
    assert (out / "report" / "junit.xml").is_file()
    assert not (out / "worktrees").exists() and len(worktrees(repo)) == 1, worktrees(repo)


def test_a_pull_request_that_changes_a_comment_is_work_same_never_a_fail(tmp_path, quiet_machine):
    repo, _ = repository(tmp_path, add_comment)
    with (repo / ENGINE).open("a") as fh:  # one more, not committed: side B runs the checkout as it is, and says so
        fh.write("# another comment\n")
    out = tmp_path / "pr"
    proc = pull_request(repo, matrix(tmp_path), out, quiet_machine)
    assert proc.returncode in (0, 3), proc.stdout + proc.stderr
    assert "uncommitted changes included (1 file(s): harness/cell/engine.py)" in proc.stderr
    comment = (out / "pr-comment.md").read_text()
    work = comment.split("\n\n**nvbench A/B**")[0].split("\n\n")
    assert work == ["work: same — synthetic\\_nchw\\_fp32\\_ws1\\_ga1"], comment
    assert json.loads((out / "ab.json").read_text())["base"]["b_dirty"] == ["harness/cell/engine.py"]
    assert len(worktrees(repo)) == 1


@pytest.mark.documented("nvbench ab matrices/resnet50.toml --base main", bound_s=180)
def test_ab_base_stopped_by_sigint_leaves_no_worktree(tmp_path, tagged, quiet_machine):
    repo, _ = repository(tmp_path, add_comment)
    out = tmp_path / "ab"
    proc, tag = tagged([sys.executable, "-m", "harness", "ab", str(matrix(tmp_path, "")), "--base", "main", "--out",
                        str(out), "--repeats", "5"], cwd=repo, env={**quiet_machine, "PYTHONPATH": str(repo)})
    wait_for("a cell of the A/B", lambda: first_cell(tag), timeout_s=180, proc=proc)
    assert (out / "worktrees").is_dir() and len(worktrees(repo)) == 2  # side A's, while the A/B runs
    code, err = stop_and_check(proc, tag, signal.SIGINT)
    assert code == 130, err
    assert not (out / "worktrees").exists() and len(worktrees(repo)) == 1, worktrees(repo)
    assert json.loads((out / "ab.json").read_text())["base"]["worktree"] == str(out.absolute() / "worktrees" /
                                                                                 _git(repo, "rev-parse", "main")[:12])


def test_a_base_that_does_not_resolve_or_a_checkout_outside_git_is_one_line_exit_2(tmp_path):
    repo, _ = repository(tmp_path, add_comment)
    tiny = matrix(tmp_path, "")
    proc = nvbench("ab", str(tiny), "--base", "no-such-branch", "--out", str(tmp_path / "x"), cwd=repo,
                   env={"PYTHONPATH": str(repo)}, timeout=120)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines()[-1] == \
        f"error: --base no-such-branch: no such commit in {repo}", proc.stderr
    plain = tmp_path / "plain"  # the same code, no repository around it
    shutil.copytree(repo / "harness", plain / "harness", ignore=shutil.ignore_patterns("__pycache__"))
    proc = nvbench("ab", str(tiny), "--base", "main", "--out", str(tmp_path / "y"), cwd=plain,
                   env={"PYTHONPATH": str(plain)}, timeout=120)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines()[-1] == \
        f"error: --base main: {plain} is not in a git repository (side A's code is a commit of it)", proc.stderr
    proc = nvbench("ab", str(tiny), "--base", "main", "--a-checkout", str(repo), "--out", str(tmp_path / "z"),
                   cwd=repo, env={"PYTHONPATH": str(repo)}, timeout=120)
    assert proc.returncode == 2 and "--base main with --a-checkout" in proc.stderr, proc.stderr


def test_the_base_is_the_merge_base_of_head_and_rev_unless_exact_and_a_dirty_checkout_is_named(tmp_path):
    from harness.orchestrate.workflows.ab import resolve_base

    repo, forked = repository(tmp_path, add_comment)
    _git(repo, "checkout", "-q", "main")
    (repo / "NOTES").write_text("main moved on\n")
    _git(repo, "add", "NOTES")
    _git(repo, "commit", "-q", "-m", "main after the fork")
    tip = _git(repo, "rev-parse", "HEAD")
    _git(repo, "checkout", "-q", "pr")
    base = resolve_base("main", exact=False, checkout=repo / "harness")
    assert (base.repo, base.commit, base.merge_base, base.dirty) == (repo, forked, True, ())
    assert resolve_base("main", exact=True, checkout=repo).commit == tip
    assert resolve_base("main", exact=False, checkout=repo, recorded=tip).commit == tip  # a resumed A/B's own
    (repo / ENGINE).write_text((repo / ENGINE).read_text() + "# uncommitted\n")
    assert resolve_base("main", exact=False, checkout=repo).dirty == (str(ENGINE),)


def test_the_pull_request_job_stopped_by_sigterm_exits_130_and_leaves_no_worktree(tmp_path, tagged, quiet_machine):
    repo, _ = repository(tmp_path, add_comment)
    out = tmp_path / "pr"
    knobs = {"NVBENCH_MATRIX": str(matrix(tmp_path)), "NVBENCH_REPEATS": "5", "NVBENCH_MAX_REPEATS": "",
             "NVBENCH_OUT": str(out), "PYTHON": sys.executable}
    proc, tag = tagged(["bash", "ci/pull-request.sh"], cwd=repo, env={**quiet_machine, **knobs})
    wait_for("a cell of the A/B", lambda: first_cell(tag), timeout_s=180, proc=proc)
    code, err = stop_and_check(proc, tag, signal.SIGTERM)
    assert code == 130 and "stopped by SIGTERM" in err, err
    assert not (out / "worktrees").exists() and len(worktrees(repo)) == 1, worktrees(repo)
    assert not (out / "pr-comment.md").exists()
