"""The work diff on constructed work.parquet rows: exact items diffed and said in the verdict's words, varying ones
named as varying (never as changed), a side without a counted process never `same`; the gates broken, held or
unable to tell; and the words attached to a comparison's verdicts."""

from __future__ import annotations

import pytest

from harness.analysis.judge.run import RunData
from harness.analysis.judge.verdict import CellVerdict, Comparison, Thresholds
from harness.analysis.judge.work_diff import check_gates, diff_cell
from harness.analysis.pages.wording import gate_line
from harness.analysis.pages.work_report import render_sections
from harness.analysis.product.extras import attach_work as attach, diff_tables
from harness.matrix.judge import WorkGate

CELL = "resnet18-synthetic-nchw-fp32-ws1-ga1-eager"
SYNC = "aten::_local_scalar_dense"


def row(phase, counter, key, per_step, *, process=0, rank=0, steps=10, cell=CELL):
    """One work.parquet row as the counting half writes it (process and window rows: per_step is the count)."""
    count = per_step if phase in ("process", "window") else per_step * steps
    return {"cell_id": cell, "process": process, "rank": rank, "device": "cpu", "phase": phase, "counter": counter,
            "key": key, "count": int(count), "steps": steps, "per_step": float(per_step)}


def step(process=0, **extra):
    """A plain step's counted work: a few ops per phase, one allocation, one h2d copy, plus `extra`
    ((phase, counter, key) -> per step)."""
    base = {("forward", "op_calls", "aten::mm"): 4, ("forward", "op_calls", "aten::relu"): 2,
            ("backward", "op_calls", "aten::mm"): 8, ("optimizer", "op_calls", "aten::add_"): 6,
            ("forward", "allocations", "aten::mm"): 4, ("forward", "allocated_bytes", "aten::mm"): 4 * 8192,
            ("h2d", "copies", "h2d"): 2, ("h2d", "copied_bytes", "h2d"): 2 * 49152,
            ("process", "graphs", ""): 1, ("process", "recompilations", ""): 1}
    base |= {tuple(k.split("|")): v for k, v in extra.items()}
    return [row(*item, value, process=process) for item, value in base.items() if value]


def words(a_rows, b_rows) -> str:
    return diff_cell(a_rows, b_rows, CELL).words()


def test_the_same_work_on_both_sides_is_work_same():
    d = diff_cell(step(0) + step(1), step(0) + step(1), CELL)
    assert d.words() == "work: same" and d.is_changed is False and d.changed == () and d.varying == ()


def test_sixteen_extra_matmuls_in_forward_are_named_and_nothing_else():
    assert words(step(), step(**{"forward|op_calls|aten::mm": 20})) == "work changed: forward +16 aten::mm per step"


def test_one_host_sync_in_the_optimizer_is_named_with_its_op():
    d = diff_cell(step(), step(**{f"optimizer|host_syncs|{SYNC}": 1}), CELL)
    assert d.words() == f"work changed: optimizer +1 host sync per step ({SYNC})" and d.is_changed is True


def test_both_changes_read_in_step_order_as_the_issue_writes_them():
    b = step(**{f"optimizer|host_syncs|{SYNC}": 1, "forward|op_calls|aten::mm": 20})
    assert words(step(), b) == f"work changed: forward +16 aten::mm per step; optimizer +1 host sync per step ({SYNC})"


def test_every_phase_reads_in_the_order_a_step_runs_them_then_the_window():
    b = step(**{"data|op_calls|aten::to": 1, "h2d|copies|h2d": 3, "forward|op_calls|aten::mm": 20,
                "backward|op_calls|aten::mm": 9, f"optimizer|host_syncs|{SYNC}": 1, "window|recompilations|": 1})
    assert words(step(), b) == ("work changed: data +1 aten::to per step; h2d +1 h2d copy per step; forward +16 aten::mm "
                                "per step; backward +1 aten::mm per step; optimizer +1 host sync per step "
                                f"({SYNC}); window +1 recompilation after warm-up")


def test_a_new_allocation_is_counted_with_its_bytes_in_forward():
    b = step(**{"forward|allocations|aten::empty": 1, "forward|allocated_bytes|aten::empty": 4096})
    assert words(step(), b) == "work changed: forward +1 allocation per step (+4.0 KiB, aten::empty)"
    bigger = step(**{"forward|allocated_bytes|aten::mm": 4 * 8192 + 512})  # the same tensors, larger
    assert words(step(), bigger) == "work changed: forward +512 B in allocations per step (aten::mm)"


def test_a_graph_break_and_a_recompilation_after_warm_up_are_named():
    b = step(**{"process|graph_breaks|Tensor.item() call": 1, "window|recompilations|": 1})
    assert words(step(), b) == ("work changed: process +1 graph break (Tensor.item() call); "
                                "window +1 recompilation after warm-up")


def test_fewer_of_something_reads_with_a_minus():
    assert words(step(**{"h2d|copies|h2d": 3, "h2d|copied_bytes|h2d": 3 * 49152}), step()) == \
        "work changed: h2d -1 h2d copy per step (-48.0 KiB)"


def test_a_counter_that_varies_across_one_sides_processes_is_varying_never_changed():
    b = step(0, **{"forward|op_calls|aten::add": 2}) + step(1, **{"forward|op_calls|aten::add": 3})
    d = diff_cell(step(0) + step(1), b, CELL)
    assert d.words() == "work: same where exact; varying: forward aten::add on B 2..3 per step"
    assert d.changed == () and d.is_changed is False


def test_a_process_without_an_item_counted_zero_of_it_so_the_item_varies():
    b = step(0, **{f"optimizer|host_syncs|{SYNC}": 1}) + step(1)
    assert words(step(0) + step(1), b) == f"work: same where exact; varying: optimizer host syncs ({SYNC}) on B 0..1 " \
                                          "per step"


def test_a_change_beside_a_varying_item_names_each_as_what_it_is():
    b = step(0, **{"forward|op_calls|aten::mm": 20, "forward|op_calls|aten::add": 2}) + \
        step(1, **{"forward|op_calls|aten::mm": 20, "forward|op_calls|aten::add": 3})
    assert words(step(0) + step(1), b) == ("work changed: forward +16 aten::mm per step; "
                                           "varying: forward aten::add on B 2..3 per step")


def test_ranks_of_one_process_must_agree_too():
    b = [r | {"rank": 1} for r in step(**{"forward|op_calls|aten::mm": 5})]
    assert words(step(), step() + b) == "work: same where exact; varying: forward aten::mm on B 4..5 per step"


@pytest.mark.parametrize("a, b, missing", [((), "B", "A"), ("A", (), "B"), ((), (), "A or B")])
def test_a_side_without_a_counted_process_is_no_work_counted_never_same(a, b, missing):
    rows = {"A": step(), "B": step()}
    d = diff_cell(rows.get(a, []), rows.get(b, []), CELL)
    assert d.words() == f"work: no work counted (no counted process on {missing})" and d.is_changed is None


def test_another_cells_rows_are_not_this_cells():
    other = [r | {"cell_id": "other"} for r in step(**{"forward|op_calls|aten::mm": 99})]
    assert words(step() + other, step()) == "work: same"


def test_a_long_change_is_cut_to_the_shown_items_and_counted():
    b = step(**{f"forward|op_calls|aten::op{i}": 1 for i in range(9)})
    text = words(step(), b)
    assert text.startswith("work changed: forward +1 aten::op0 per step, +1 aten::op1 per step")
    assert text.endswith("; and 3 more") and "aten::op5" in text and "aten::op6" not in text


# ---------------------------------------------------------------- gates


def gates(diff, **rules):
    return {c.label: (c.broken, c.words) for c in check_gates(diff, [WorkGate(counter=k, rule=v)
                                                                      for k, v in rules.items()])}


def test_a_risen_host_sync_breaks_its_no_rise_gate_naming_the_counter_and_the_place():
    d = diff_cell(step(), step(**{f"optimizer|host_syncs|{SYNC}": 1, "forward|op_calls|aten::mm": 20}), CELL)
    got = gates(d, host_syncs="no-rise", allocations="no-rise")
    assert got == {'work gate host_syncs = "no-rise"': (True, f'work gate host_syncs = "no-rise" broken: optimizer +1 '
                                                              f'host sync per step ({SYNC})')}  # op_calls: not gated


def test_no_rise_is_per_phase_a_sync_moved_between_ops_keeps_it_and_a_fall_never_breaks_it():
    a = step(**{"optimizer|host_syncs|aten::item": 1, "forward|host_syncs|aten::nonzero": 2})
    moved = step(**{"optimizer|host_syncs|aten::_local_scalar_dense": 1, "forward|host_syncs|aten::nonzero": 1})
    assert gates(diff_cell(a, moved, CELL), host_syncs="no-rise") == {}


def test_none_gates_graph_breaks_anywhere_and_recompilations_only_after_warm_up():
    warm = step(**{"process|recompilations|": 3})  # recompiled while warming up: allowed
    assert gates(diff_cell(step(), warm, CELL), recompilations="none", graph_breaks="none") == {}
    late = step(**{"window|recompilations|": 1, "process|graph_breaks|generic_jump": 2})
    got = gates(diff_cell(late, late, CELL), recompilations="none", graph_breaks="none")  # none: B alone, even if A had it
    assert got == {'work gate recompilations = "none"': (True, 'work gate recompilations = "none" broken: window 1 '
                                                              'recompilation after warm-up on B'),
                   'work gate graph_breaks = "none"': (True, 'work gate graph_breaks = "none" broken: process 2 graph '
                                                            'breaks (generic_jump) on B')}


def test_a_varying_counter_never_breaks_a_gate_it_says_it_cannot_tell():
    b = step(0, **{f"optimizer|host_syncs|{SYNC}": 1}) + step(1, **{f"optimizer|host_syncs|{SYNC}": 2})
    got = gates(diff_cell(step(0) + step(1), b, CELL), host_syncs="no-rise")
    assert got == {'work gate host_syncs = "no-rise"': (False, f'work gate host_syncs = "no-rise": cannot tell '
                                                               f'(varying: optimizer host syncs ({SYNC}) on B 1..2 per '
                                                               f'step)')}
    assert gates(diff_cell([], step(), CELL), host_syncs="no-rise") == {
        'work gate host_syncs = "no-rise"': (False, 'work gate host_syncs = "no-rise": cannot tell (no work counted)')}


# ---------------------------------------------------------------- attached to a comparison


def comparison(gates_=(), cells=(CELL,)) -> Comparison:
    run = RunData(path="b", run_id="b", created_at="", environment={}, rows=())
    verdicts = tuple(CellVerdict(cell_id=c, verdict="unchanged", reason="+0.2% [-1.0, +1.4]", floor_pct=3.0,
                                 fdr_q=0.01, accuracy_tolerance=0.01) for c in cells)
    return Comparison(mode="baseline", candidate=run, baseline_label="run a", baseline_environment={},
                      thresholds=Thresholds(work_gates=tuple(gates_)), verdicts=verdicts)


def test_the_words_join_the_verdict_line_and_fill_the_work_fields():
    gate = WorkGate(counter="host_syncs", rule="no-rise")
    c = attach(comparison([gate], cells=(CELL, "other")),
               diff_tables([CELL, "other"], step(), step(**{f"optimizer|host_syncs|{SYNC}": 1})))
    v, other = c.verdicts
    assert v.reason == (f"+0.2% [-1.0, +1.4]; work changed: optimizer +1 host sync per step ({SYNC}); "
                        f'work gate host_syncs = "no-rise" broken: optimizer +1 host sync per step ({SYNC})')
    assert (v.work, v.work_changed) == (f"work changed: optimizer +1 host sync per step ({SYNC})", True)
    assert v.work_gate == f'work gate host_syncs = "no-rise" broken: optimizer +1 host sync per step ({SYNC})'
    assert (other.work, other.work_changed, other.work_gate) == (
        "work: no work counted (no counted process on A or B)", None, None)
    assert c.broken_gates == (v,) and [gate_line(g) for g in c.broken_gates] == [f"WORK GATE BROKEN: {CELL}: {v.work_gate}"]
    page = render_sections(c)
    assert f'id="work-{CELL}"' in page and "<td>optimizer</td><td>host_syncs</td>" in page and 'id="work-other"' \
        not in page


def test_an_increase_not_gated_is_reported_never_failed():
    c = attach(comparison(), diff_tables([CELL], step(), step(**{f"optimizer|host_syncs|{SYNC}": 1})))
    assert c.verdicts[0].work_changed is True and c.verdicts[0].work_gate is None and c.broken_gates == ()


def test_no_work_table_on_either_side_leaves_the_verdicts_as_they_were():
    assert diff_tables([CELL], None, None) == {}
    assert attach(comparison(), {}).verdicts == comparison().verdicts
    assert diff_tables([CELL], step(), None)[CELL].words() == "work: no work counted (no counted process on B)"


def test_the_diffs_counters_and_phases_are_the_tables():
    """The diff's words (catalogue.work_gates) cover exactly the counters and phases work.parquet may hold
    (catalogue.work, which the counting writes by)."""
    from harness.catalogue import work, work_gates

    assert tuple(c.name for c in work_gates.COUNTERS) == work.COUNTERS  # built from the one declaration
    assert (work_gates.PROCESS, work_gates.WINDOW) == (work.PROCESS_PHASE, work.WINDOW_PHASE)
    assert {c.name for c in work_gates.COUNTERS if c.one} | {c.name for c in work_gates.COUNTERS if c.bytes_of} \
        | {work.OP_CALLS} == set(work.COUNTERS)  # every counter has its words
