"""History on generated nights (benchmarks/history_data.py: real run folders, folded as a finished run leaves
them): the step five nights before the end is the only change found, and the cache beside the history gives
the cold answer after a night is added, removed or rewritten."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys

import pytest
from conftest import ROOT

from harness.analysis.nights import history, summaries

_spec = importlib.util.spec_from_file_location("history_data", ROOT / "benchmarks" / "history_data.py")
history_data = sys.modules.setdefault("history_data", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(history_data)  # registered first: its dataclasses look their module up

SCALE = history_data.Scale(nights=12, cells=5, ok_cells=3, repeats=3, step_pct=20.0)


@pytest.fixture(scope="module")
def nights(tmp_path_factory):
    """Twelve generated nights; tests copy the folder before they change it."""
    folder = tmp_path_factory.mktemp("generated") / "history"
    history_data.generate(folder, SCALE)
    return folder


def answer(h: history.History) -> tuple:
    """Everything the page and changes.parquet are made of."""
    return ([n.run_id for n in h.nights], h.skipped, h.series, h.changes)


def test_the_step_five_nights_before_the_end_is_the_only_change(nights):
    h = history.load_history(nights, use_cache=False)
    found = {(c.cell_id, c.metric, c.kind, c.night) for c in h.changes}
    stepped = history_data.template_rows(SCALE)[0]["cell_id"]
    assert SCALE.step_at == 7
    assert found == {(stepped, "throughput", "step", 8), (stepped, "fast steps", "step", 8)}
    assert all(18 < c.change < 22 for c in h.changes)
    assert len(h.series) == 3 * 3  # ok cells x (throughput, fast steps, data wait): skipped cells have none


def test_tonights_night_on_a_warm_cache_reads_one_night_and_equals_a_cold_run(nights, tmp_path, monkeypatch):
    folder = tmp_path / "history"
    shutil.copytree(nights, folder)
    newest = sorted(p for p in folder.iterdir() if not p.name.startswith("."))[-1]
    shutil.move(newest, tmp_path / "tonight")
    history.load_history(folder)  # last night's history: fills the cache
    shutil.move(tmp_path / "tonight", newest)
    read = []
    summarise = summaries.summarise
    monkeypatch.setattr(summaries, "summarise", lambda path, *a: read.append(path) or summarise(path, *a))
    warm = history.load_history(folder)
    assert read == [newest]  # the other eleven nights came from the cache
    assert answer(warm) == answer(history.load_history(folder, use_cache=False))
    assert any(c.is_new for c in warm.changes) is False  # the step is five nights old: nothing new tonight


def test_a_removed_or_rewritten_night_leaves_the_cache_and_the_answer_is_the_cold_one(nights, tmp_path):
    folder = tmp_path / "history"
    shutil.copytree(nights, folder)
    history.load_history(folder)
    runs = sorted(p for p in folder.iterdir() if not p.name.startswith("."))
    shutil.rmtree(runs[3])  # a night removed
    history_data.write_night(folder, history_data.Scale(**{**_fields(SCALE), "seed": 7}),  # a night rewritten
                             history_data.template_rows(SCALE), 9)
    warm = history.load_history(folder)
    assert answer(warm) == answer(history.load_history(folder, use_cache=False))
    cached = [json.loads(p.read_text())["night"]
              for p in (folder / summaries.CACHE_DIR / summaries.NIGHTS_DIR).glob("*.json")]
    assert len(cached) == 11 and str(runs[3]) not in {s["path"] for s in cached}


def _fields(scale) -> dict:
    return {name: getattr(scale, name) for name in scale.__slots__}
