"""`[judge.work_gates]`: counter = rule, each counter one of work.parquet's closed set and each rule a known one;
every problem one line naming the file and the key, with a suggestion for a misspelling, all reported together."""

from __future__ import annotations

import pytest
from conftest import TINY
from test_matrix import matrix_of, problems_of

from harness.matrix.judge import WorkGate
from harness.matrix.parse import judge_from_text


def test_gates_parse_to_typed_rules_in_the_files_order():
    m = matrix_of({"judge": {"work_gates": {"host_syncs": "no-rise", "graph_breaks": "none",
                                            "recompilations": "none"}}})
    assert m.judge.work_gates == (WorkGate(counter="host_syncs", rule="no-rise"),
                                  WorkGate(counter="graph_breaks", rule="none"),
                                  WorkGate(counter="recompilations", rule="none"))
    assert m.judge.work_gates[0].label == 'work gate host_syncs = "no-rise"'
    assert matrix_of({}).judge.work_gates == ()


def test_every_bad_gate_is_one_line_with_the_file_the_key_and_a_suggestion():
    probs = problems_of({"judge": {"work_gates": {"host_sync": "no-rise", "graph_breaks": "norise", "copies": 3,
                                                  "bogus": "none"}}})
    assert probs == [
        "m.toml: judge.work_gates.host_sync: unknown counter (did you mean 'host_syncs'?)",
        "m.toml: judge.work_gates.graph_breaks: must be 'no-rise' or 'none', got 'norise' (did you mean 'no-rise'?)",
        "m.toml: judge.work_gates.copies: must be 'no-rise' or 'none', got 3",
        "m.toml: judge.work_gates.bogus: unknown counter (one of op_calls, host_syncs, allocations, allocated_bytes, "
        "copies, copied_bytes, kernel_launches, collectives, collective_bytes, graph_breaks, recompilations, graphs, "
        "device_mallocs, alloc_retries)"]


def test_gates_that_are_not_a_table_and_a_misspelt_section_are_named():
    assert problems_of({"judge": {"work_gates": ["host_syncs"]}}) == [
        "m.toml: judge.work_gates: must be a table of counter = rule ('no-rise', 'none'), got list"]
    assert problems_of({"judge": {"work_gate": {"host_syncs": "no-rise"}}}) == [
        "m.toml: judge.work_gate: unknown key (did you mean 'work_gates'?)"]


def test_a_runs_recorded_matrix_gives_the_report_its_gates(tmp_path):
    text = TINY.format(axes='backend = ["synthetic"]', repeats=1, timeout=60, cache=tmp_path, nvtx="false",
                       device="cpu") + '[judge.work_gates]\nhost_syncs = "no-rise"\n'
    assert judge_from_text(text, "run/manifest.json").work_gates == (WorkGate(counter="host_syncs", rule="no-rise"),)
    with pytest.raises(ValueError, match=r"^run/manifest.json: judge.work_gates.host_syncs: must be 'no-rise' or "):
        judge_from_text(text.replace('"no-rise"', '"rise"'), "run/manifest.json")
