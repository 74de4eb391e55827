"""The example GitHub Actions workflows (ci/nightly.yml, ci/pull-request.yml) pass actionlint (the test extra ships
its binary), with ci/actionlint.yaml's runner labels; and actionlint is seen to fail a workflow broken on purpose,
so a pass means something."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

WORKFLOWS = ("ci/nightly.yml", "ci/pull-request.yml")


def actionlint() -> str:
    """The actionlint beside this interpreter (the venv's, from the test extra), else the one on PATH."""
    found = Path(sys.executable).parent / "actionlint"
    if found.is_file():
        return str(found)
    path = shutil.which("actionlint")
    if path is None:
        pytest.skip("actionlint is not installed (pip install -e '.[test]' brings it)")
    return path


def lint(*files: Path) -> subprocess.CompletedProcess:
    """actionlint over `files`, offline and alike on every machine: shellcheck and pyflakes left out (whether they
    are installed differs between machines; ci/*.sh are bash the suite runs)."""
    return subprocess.run([actionlint(), "-no-color", "-config-file", str(ROOT / "ci" / "actionlint.yaml"),
                           "-shellcheck=", "-pyflakes=", *map(str, files)], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)


@pytest.mark.parametrize("workflow", WORKFLOWS)
def test_the_example_workflows_pass_actionlint(workflow):
    proc = lint(ROOT / workflow)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_actionlint_fails_a_workflow_broken_on_purpose(tmp_path):
    text = (ROOT / "ci" / "pull-request.yml").read_text()
    broken = {"a step output of no step": ("steps.pr.outputs.report_dir", "steps.nosuch.outputs.report_dir"),
              "an unknown key": ("    runs-on:", "    run-on:"),
              "an unknown runner label": ("[self-hosted, linux, gpu, nvbench]", "[self-hosted, linux, gpux]")}
    for name, (old, new) in broken.items():
        assert old in text, f"ci/pull-request.yml changed: update the break '{name}'"
        path = tmp_path / f"{name.replace(' ', '-')}.yml"
        path.write_text(text.replace(old, new, 1))
        proc = lint(path)
        assert proc.returncode == 1 and f"{path.name}:" in proc.stdout, (name, proc.stdout + proc.stderr)
