"""`nvbench bisect --by work` (issue 70): the search by counts on its own (which items decide, what a probe says, each
item its own first bad commit), and end to end on a throwaway repository of this checkout whose 3rd of 6 commits adds
a `.item()` of the loss to the optimizer phase and whose 5th adds 16 matmuls to the forward: counting one process a
cell of each end and of each probed commit, beside a busy loop on the cell's own core, it names the 3rd for `optimizer
+1 host sync per step` and the 5th for `forward +16 aten::mm per step`, exit 1, and --resume counts nothing again."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import TINY, nvbench
from test_bisect import harness_commits

from harness.analysis.judge.work_diff import SideWork
from harness.orchestrate.bisect.search import BAD, GOOD, SKIPPED
from harness.orchestrate.bisect.by_work import ItemSearches, deciding, outcome

CELL = "c"
SYNC = ("optimizer", "host_syncs", "aten::_local_scalar_dense")
MM = ("forward", "ops", "aten::mm")
ENGINE, RESNET = Path("harness/cell/engine.py"), Path("harness/models/resnet.py")
FORWARD = "        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))\n"


def side(values: dict, varying: dict | None = None, processes: int = 1) -> dict[str, SideWork]:
    return {CELL: SideWork(processes=processes, ranges={k: (v, v) for k, v in values.items()} | (varying or {}))}


def test_only_items_exact_at_both_ends_decide():
    good = side({SYNC: 0.0, MM: 40.0, ("forward", "ops", "aten::relu"): 17.0}, varying={("forward", "kernels", "k"): (3.0, 4.0)})
    bad = side({SYNC: 1.0, MM: 56.0, ("forward", "ops", "aten::relu"): 17.0, ("forward", "kernels", "k"): 9.0})
    assert deciding(good, bad) == {(CELL, *SYNC): (0.0, 1.0), (CELL, *MM): (40.0, 56.0)}
    assert deciding(good, side({}, processes=0)) == {}  # an end that counted nothing decides nothing


def test_a_probe_is_bad_only_at_the_bad_ends_value_and_skipped_where_it_cannot_tell():
    key = (CELL, *MM)
    assert outcome(side({MM: 56.0}), key, 56.0) == BAD
    assert outcome(side({MM: 40.0}), key, 56.0) == GOOD
    assert outcome(side({MM: 48.0}), key, 56.0) == GOOD  # another value: not yet the bad end's
    assert outcome(side({}, varying={MM: (40.0, 56.0)}), key, 56.0) == SKIPPED
    assert outcome(None, key, 56.0) == SKIPPED and outcome(side({}, processes=0), key, 56.0) == SKIPPED


def test_each_item_walks_to_its_own_first_bad_commit_and_one_probe_answers_both():
    points = [f"p{i}" for i in range(32)]  # commit 20 (index 19) adds the sync, commit 26 (index 25) the matmuls
    truth = lambda i: side({SYNC: float(i >= 19), MM: 40.0 + 16 * (i >= 25)})
    s = ItemSearches(points, deciding(truth(0), truth(31)))
    s.record(0, truth(0))
    s.record(31, truth(31))
    probed = []
    while (i := s.next()) is not None:
        probed.append(i)
        s.record(i, truth(i))
    found = {hi: sorted(c.counter for c in changes) for hi, changes, _ in s.culprits()}
    assert found == {19: ["host_syncs"], 25: ["ops"]}
    assert len(probed) <= 2 * 5, probed  # at most about 2 x log2(31): 2 + 10 counted processes a cell in all


def _repository(root: Path) -> tuple[Path, list[str]]:
    def change(k: int, repo: Path) -> None:
        if k == 3:  # the optimizer phase reads the loss back: a host sync a step
            text = (repo / ENGINE).read_text()
            keep = "        loss = self.micro_step(images, labels, sync_grads=sync_grads)\n"
            read = "            self.optimizer.zero_grad(set_to_none=True)\n"
            assert text.count(keep) == 1 and text.count(read) == 1, "the engine moved: update this test"
            text = text.replace(keep, keep + "        self._injected_loss = loss\n")
            (repo / ENGINE).write_text(text.replace(read, read + "            self._injected_loss.item()  # injected\n"))
        if k == 5:  # 16 matmuls in the forward, into a kept output
            text = (repo / RESNET).read_text()
            assert text.count(FORWARD) == 1 and text.count("\nclass ResNet(") == 1, "the model moved: update this test"
            text = text.replace("\nclass ResNet(", "\n_EXTRA, _OUT = torch.ones(8, 8), torch.empty(8, 8)\n\n\nclass ResNet(")
            (repo / RESNET).write_text(text.replace(FORWARD, "        for _ in range(16):  # injected\n"
                                                             "            torch.mm(_EXTRA, _EXTRA, out=_OUT)\n" + FORWARD))

    return harness_commits(root / "repo", 6, change)


@pytest.mark.documented("nvbench bisect MATRIX --good REV --bad REV --by work", bound_s=600)
def test_a_bisect_by_work_names_each_items_commit_beside_a_busy_loop(tmp_path, documented_run):
    repo, commits = _repository(tmp_path)
    matrix = tmp_path / "tiny.toml"
    matrix.write_text(TINY.format(axes=textwrap.dedent('backend = ["synthetic"]'), repeats=1, timeout=120,
                                  cache=tmp_path / "cache", nvtx="false", device="cpu"))
    out = tmp_path / "bisect"
    # a neighbour on this test's own cores for the whole bisect: counts are exact, nothing waits for it to leave
    neighbour = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        proc = documented_run(["bisect", str(matrix), "--good", commits[0], "--bad", commits[-1], "--by", "work",
                               "--out", str(out)], cwd=repo)
    finally:
        neighbour.kill()
        neighbour.wait()
    assert proc.returncode == 1, proc.stdout + proc.stderr
    state = json.loads((out / "bisect.json").read_text())
    answer = state["answer"]
    assert (answer["result"], answer["by"]) == ("found", "work")
    named = {c["point"]: c["text"] for c in answer["culprits"]}
    assert list(named) == [commits[2], commits[4]], named
    assert named[commits[2]].endswith(": optimizer +1 host sync per step (aten::_local_scalar_dense)"), named
    assert named[commits[4]].endswith(": forward +16 aten::mm per step"), named
    assert f"first commit whose work is the bad end's: {commits[2][:12]} commit 3: optimizer +1 host sync" \
        in proc.stderr and "bisected by work" in answer["text"]
    counted = [k for k, v in state["work"]["probes"].items() if not v.get("skipped")]
    assert 2 <= len(counted) <= 2 + 2 * 3 and answer["counted_commits"] == len(counted)  # 6 points: log2(5) ~ 3
    assert state["comparisons"] == []  # not one timed A/B
    assert not (out / "worktrees").exists()
    # --resume reuses every count: nothing is counted again, the answer stands
    folders = sorted(p.name for p in out.glob("work-*"))
    again = nvbench("bisect", "--resume", str(out), cwd=repo, timeout=300)
    assert again.returncode == 1, again.stderr
    assert "counted p0" not in again.stderr and sorted(p.name for p in out.glob("work-*")) == folders
    assert json.loads((out / "bisect.json").read_text())["answer"]["culprits"] == answer["culprits"]
