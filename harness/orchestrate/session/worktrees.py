"""A commit's code as a git worktree in a folder the command owns (`nvbench ab --base`'s side A, bisect's points):
revisions resolved, worktrees made, and every one of them removed again however the command ends."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from pathlib import Path
from typing import Iterator

from harness.results.env import short_commit

FOLDER = "worktrees"
"""The subfolder of a command's output folder that holds its worktrees while it runs."""


class WorktreeError(ValueError):
    """A repository, revision or worktree that git cannot give: its one line says which."""


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False)


def _last_line(proc: subprocess.CompletedProcess, default: str) -> str:
    return ([line for line in proc.stderr.strip().splitlines() if line.strip()][-1:] or [default])[0]


def repository(path: Path) -> Path | None:
    """The top folder of the git repository `path` lies in, or None when it lies in none (or git is missing)."""
    try:
        proc = _git(path, "rev-parse", "--show-toplevel")
    except OSError:
        return None
    return Path(proc.stdout.strip()) if proc.returncode == 0 else None


def commit_of(repo: Path, rev: str) -> str | None:
    """`rev` as a full commit sha in `repo`, or None when it names no commit there."""
    proc = _git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    return proc.stdout.strip() if proc.returncode == 0 and proc.stdout.strip() else None


def merge_base(repo: Path, a: str, b: str) -> str | None:
    """The best common ancestor of two commits, or None when they share none."""
    proc = _git(repo, "merge-base", a, b)
    return proc.stdout.strip() if proc.returncode == 0 and proc.stdout.strip() else None


def changed_files(repo: Path) -> list[str]:
    """The tracked files with uncommitted changes in the checkout `repo` (staged or not): where it is dirty."""
    proc = _git(repo, "status", "--porcelain", "--untracked-files=no")
    return [line[3:] for line in proc.stdout.splitlines() if line.strip()]


def add(repo: Path, sha: str, folder: Path) -> Path:
    """A detached worktree of `sha` at folder/<short sha> (reused where it is already there); WorktreeError
    naming the commit when git cannot make it."""
    path = folder / short_commit(sha)
    if (path / "harness").is_dir():
        return path
    shutil.rmtree(path, ignore_errors=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    proc = _git(repo, "worktree", "add", "--detach", "--force", str(path), sha)
    if proc.returncode != 0:
        raise WorktreeError(f"commit {short_commit(sha)} cannot be checked out in {repo} "
                            f"({_last_line(proc, 'git worktree add failed')})")
    return path


def remove_all(repo: Path | None, folder: Path) -> None:
    """Remove every worktree under `folder` from `repo` and the folder itself; git forgets them (prune)."""
    if repo is None or not folder.exists():
        return
    for path in folder.iterdir():
        _git(repo, "worktree", "remove", "--force", str(path))
    shutil.rmtree(folder, ignore_errors=True)
    _git(repo, "worktree", "prune")


@contextlib.contextmanager
def checked_out(repo: Path, sha: str, folder: Path) -> Iterator[Path]:
    """`sha`'s worktree under `folder` for the duration of the block, removed when it ends: normally, by an
    exception, or by a stop signal (Ctrl-C, and SIGTERM or SIGHUP through session.stopping, arrive as
    KeyboardInterrupt)."""
    try:
        yield add(repo, sha, folder)
    finally:
        remove_all(repo, folder)
