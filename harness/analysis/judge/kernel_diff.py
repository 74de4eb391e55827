"""Two sides' profiled repeats of one cell, diffed and judged (pure): the change in time per step of each
(phase, operator) and (phase, operator, kernel) with an interval over the repeats, Welch's test corrected by
Benjamini-Hochberg across everything tested, the verdict's four words, replaced kernels paired under their
operator, and a closure line over the timed step's change."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable

import numpy as np
import pyarrow as pa

from harness.analysis.judge.decide import IMPROVEMENT, INCONCLUSIVE, REGRESSION, UNCHANGED, Evidence
from harness.stats import inference
from harness.stats.welch import repeats_for, welch_test
from harness.catalogue import col
from harness.catalogue.kernels import DEFAULT_KERNEL_FDR, DEFAULT_KERNEL_FLOOR_PCT

BOTH, REPLACED, NEW, GONE = "both", "replaced", "new", "gone"
Key = tuple[str, str, str]


@dataclass(frozen=True, slots=True, kw_only=True)
class ItemChange:
    """One judged item: a (phase, operator) (kernel None) or a (phase, operator, kernel)."""

    phase: str
    operator: str
    kernel: str | None
    presence: str
    """both, replaced (`kernel` on B took the place of `replaced` on A), new (B only) or gone (A only)."""
    replaced: str | None
    base_s: float
    """Mean time per step on A (baseline) over its profiled repeats."""
    cand_s: float
    change_s: float
    ci_low_s: float
    ci_high_s: float
    p_value: float
    p_adjusted: float
    tested: bool
    """False: every repeat on both sides lies below the floor, so no change beyond it is possible."""
    verdict: str
    repeats_needed: int | None = None

    @property
    def name(self) -> str:
        if self.kernel is None:
            return f"{self.phase} {self.operator}"
        what = f"{self.replaced} replaced by {self.kernel}" if self.presence == REPLACED else self.kernel
        alone = f" ({self.presence})" if self.presence in (NEW, GONE) else ""
        return f"{self.phase} {self.operator} / {what}{alone}"

    def text(self) -> str:
        """`+2.9 ms [+2.7, +3.1]`."""
        ms = [1e3 * x for x in (self.change_s, self.ci_low_s, self.ci_high_s)]
        return f"{ms[0]:+.2f} ms [{ms[1]:+.2f}, {ms[2]:+.2f}]" if self.tested else f"{ms[0]:+.2f} ms (below floor)"


@dataclass(frozen=True, slots=True, kw_only=True)
class KernelDiff:
    """The diff of one cell's profiled repeats, B (candidate) against A (baseline)."""

    cell_id: str
    repeats_base: int
    repeats_cand: int
    floor_s: float
    base_step_s: float
    """A's mean profiled step (the floor's reference)."""
    step_change_s: float
    """The timed step's change where given (B's median step minus A's), else the profiled steps'."""
    timed: bool
    operators: tuple[ItemChange, ...]
    kernels: tuple[ItemChange, ...]
    ci_level: float
    method: str

    def changed(self, items: Iterable[ItemChange] | None = None) -> list[ItemChange]:
        """Items called regression or improvement, largest change first."""
        got = [i for i in (self.operators if items is None else items) if i.verdict in (REGRESSION, IMPROVEMENT)]
        return sorted(got, key=lambda i: -abs(i.change_s))

    def kernels_of(self, op: ItemChange) -> list[ItemChange]:
        return [k for k in self.kernels if (k.phase, k.operator) == (op.phase, op.operator)]

    def closure(self) -> str:
        """`explained +2.9 of +3.1 ms; the rest spread below the floor`."""
        explained = sum(i.change_s for i in self.changed())
        total, rest = self.step_change_s, self.step_change_s - explained
        what = "timed" if self.timed else "profiled"
        line = f"explained {1e3 * explained:+.1f} of {1e3 * total:+.1f} ms ({what} step)"
        open_ = [i for i in self.operators if i.verdict == INCONCLUSIVE]
        if abs(rest) <= self.floor_s and not open_:
            return line + "; the rest spread below the floor"
        tail = f"; {len(open_)} operator(s) inconclusive" if open_ else ""
        return line + f"; the rest ({1e3 * rest:+.1f} ms) among items not called changed{tail}"


def repeat_seconds(table: pa.Table, cell_id: str) -> tuple[list[int], dict[Key, np.ndarray], float]:
    """(repeats, time per step of each (phase, operator, kernel) per repeat (0 where a repeat lacks it; ranks
    averaged), mean step) of `cell_id` in a kernels table."""
    rows = [r for r in table.to_pylist() if r[col.cell_id] == cell_id]
    repeats = sorted({r["repeat"] for r in rows})
    ranks = {rep: len({r["rank"] for r in rows if r["repeat"] == rep}) for rep in repeats}
    index = {rep: i for i, rep in enumerate(repeats)}
    values: dict[Key, np.ndarray] = defaultdict(lambda: np.zeros(len(repeats)))
    steps: dict[tuple[int, int], float] = {}
    for r in rows:
        key = (r["phase"], r["operator"], r["kernel"])
        values[key][index[r["repeat"]]] += r[col.time_per_step_s] / ranks[r["repeat"]]
        steps[(r["repeat"], r["rank"])] = r[col.step_time_s]
    step = float(np.nanmean(list(steps.values()))) if steps else math.nan
    return repeats, dict(values), step


def _pair(base: dict[Key, np.ndarray], cand: dict[Key, np.ndarray], nb: int, nc: int, floor_s: float):
    """(presence, replaced, key, A values, B values) of each kernel item: the kernels of one operator seen on
    one side only and at or above the floor on average paired, largest with largest, as replaced (another
    algorithm, a split kernel); what is left (the allocations and views around them) is new or gone."""
    by_op: dict[tuple[str, str], tuple[list[Key], list[Key]]] = defaultdict(lambda: ([], []))
    for key in base.keys() - cand.keys():
        by_op[key[:2]][0].append(key)
    for key in cand.keys() - base.keys():
        by_op[key[:2]][1].append(key)
    for key in sorted(base.keys() & cand.keys()):
        yield BOTH, None, key, base[key], cand[key]
    for op in sorted(by_op):
        gone, new = (sorted(keys, key=lambda k, side=side: -side[k].mean())
                     for keys, side in zip(by_op[op], (base, cand)))
        big = min(sum(base[g].mean() >= floor_s for g in gone), sum(cand[n].mean() >= floor_s for n in new))
        for g, n in zip(gone[:big], new[:big]):
            yield REPLACED, g[2], n, base[g], cand[n]
        for g in gone[big:]:
            yield GONE, None, g, base[g], np.zeros(nc)
        for n in new[big:]:
            yield NEW, None, n, np.zeros(nb), cand[n]


def _operators(side: dict[Key, np.ndarray], n: int) -> dict[tuple[str, str], np.ndarray]:
    out: dict[tuple[str, str], np.ndarray] = defaultdict(lambda: np.zeros(n))
    for key, v in side.items():
        out[key[:2]] = out[key[:2]] + v
    return dict(out)


def diff_cell(base_table: pa.Table, cand_table: pa.Table, cell_id: str, *, q: float = DEFAULT_KERNEL_FDR,
              floor_pct: float = DEFAULT_KERNEL_FLOOR_PCT,
              timed_step_change_s: float | None = None) -> KernelDiff | None:
    """The judged diff of `cell_id` (None when a side has no profiled repeat of it)."""
    rb, base, step_b = repeat_seconds(base_table, cell_id)
    rc, cand, step_c = repeat_seconds(cand_table, cell_id)
    if not rb or not rc:
        return None
    floor_s = floor_pct / 100 * step_b
    ob, oc = _operators(base, len(rb)), _operators(cand, len(rc))
    raw = [_Item(kind="op", presence=BOTH if k in ob and k in oc else NEW if k in oc else GONE, replaced=None,
                 phase=k[0], operator=k[1], kernel=None, base=ob.get(k, np.zeros(len(rb))),
                 cand=oc.get(k, np.zeros(len(rc)))) for k in sorted(ob.keys() | oc.keys())]
    raw += [_Item(kind="kernel", presence=presence, replaced=replaced, phase=key[0], operator=key[1], kernel=key[2],
                  base=a, cand=b) for presence, replaced, key, a, b in _pair(base, cand, len(rb), len(rc), floor_s)]
    tested = [i for i, item in enumerate(raw) if max(item.base.max(), item.cand.max()) >= floor_s]
    ps = [welch_test(raw[i].base, raw[i].cand)[1] for i in tested]
    adjusted, rejected = inference.benjamini_hochberg(ps, q=q) if ps else (np.array([]), np.array([], bool))
    level = inference.fcr_adjusted_confidence(int(rejected.sum()), max(len(ps), 1), q=q)
    judged = {i: (p, float(adj), bool(rej)) for i, p, adj, rej in zip(tested, ps, adjusted, rejected)}
    items = [_judge(item, judged.get(i), level, floor_s, q / max(len(ps), 1)) for i, item in enumerate(raw)]
    timed = timed_step_change_s is not None and math.isfinite(timed_step_change_s)
    return KernelDiff(cell_id=cell_id, repeats_base=len(rb), repeats_cand=len(rc), floor_s=floor_s, base_step_s=step_b,
                      step_change_s=timed_step_change_s if timed else step_c - step_b, timed=timed,
                      operators=tuple(i for i, item in zip(items, raw) if item.kind == "op"),
                      kernels=tuple(i for i, item in zip(items, raw) if item.kind == "kernel"), ci_level=level,
                      method=f"welch_t + benjamini_hochberg over {len(ps)} items at q {q:g}; floor {floor_pct:g}% "
                             f"of the step ({1e3 * floor_s:.2f} ms)")


@dataclass(frozen=True, slots=True, kw_only=True)
class _Item:
    """One operator or kernel of a phase before it is judged: its per-repeat seconds on each side."""

    kind: str
    """op or kernel."""
    presence: str
    replaced: str | None
    phase: str
    operator: str
    kernel: str | None
    base: np.ndarray
    cand: np.ndarray


def _judge(item: _Item, test: tuple[float, float, bool] | None, level: float, floor_s: float,
           alpha: float) -> ItemChange:
    """An item's change with its interval and its word: the verdict rule is decide's (Evidence.call, in seconds
    against the floor's seconds; more time is worse), so the kernel diff and the timed verdict call alike."""
    a, b = item.base, item.cand
    common = dict(phase=item.phase, operator=item.operator, kernel=item.kernel, presence=item.presence,
                  replaced=item.replaced, base_s=float(a.mean()), cand_s=float(b.mean()))
    change = float(b.mean() - a.mean())
    if test is None:  # every repeat below the floor: |change| < floor, unchanged without a test
        return ItemChange(**common, change_s=change, ci_low_s=math.nan, ci_high_s=math.nan, p_value=math.nan,
                          p_adjusted=math.nan, tested=False, verdict=UNCHANGED)
    p, p_adj, rejected = test
    ci, _ = welch_test(a, b, confidence=level)
    evidence = Evidence(name=item.kernel or item.operator, effect_pct=change, ci_low_pct=ci.low, ci_high_pct=ci.high,
                        significant=rejected, higher_is_better=False)
    verdict, needed = evidence.call(floor_s), None
    if verdict == INCONCLUSIVE:
        sd = math.sqrt((a.var(ddof=1) + b.var(ddof=1)) / 2) if a.size > 1 and b.size > 1 else 0.0
        needed = max(repeats_for(sd, max(abs(change), floor_s), alpha=alpha), max(a.size, b.size) + 1)
    return ItemChange(**common, change_s=change, ci_low_s=ci.low, ci_high_s=ci.high, p_value=p, p_adjusted=p_adj,
                      tested=True, verdict=verdict, repeats_needed=needed)


def top_line(diff: KernelDiff, *, most: int = 3) -> str:
    """The regressed cell's operators, by phase: `forward +3.1 ms: aten::matmul +2.9 ms [+2.7, +3.1] (k1
    replaced by k2)`; then the closure line."""
    by_phase: dict[str, list[ItemChange]] = defaultdict(list)
    for op in diff.changed()[:most]:
        by_phase[op.phase].append(op)
    parts = []
    for phase, ops in by_phase.items():
        total = sum(o.change_s for o in diff.operators if o.phase == phase)
        names = []
        for op in ops:
            swaps = [k for k in diff.kernels_of(op) if k.presence == REPLACED and k.verdict != UNCHANGED]
            extra = f" ({'; '.join(f'{k.replaced} replaced by {k.kernel}' for k in swaps)})" if swaps else ""
            names.append(f"{op.operator} {op.text()}{extra}")
        parts.append(f"{phase} {1e3 * total:+.1f} ms: " + ", ".join(names))
    head = "; ".join(parts) if parts else "no operator called changed"
    return f"{head}; {diff.closure()}"
