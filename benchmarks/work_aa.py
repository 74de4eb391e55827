"""A/As of counted work between run folders of one checkout: every cell's counted process k of run A against
process k of run B, one counted process a side, diffed as the nightly diffs two sides (work_diff.diff_cell).
Counts are exact, so the runs may be taken side by side (one pinned to each core) and under any load.

    taskset -c 0 nvbench run matrices/resnet50.toml --smoke --work-repeats 10 --out /tmp/aa0 --quiet &
    taskset -c 1 nvbench run matrices/resnet50.toml --smoke --work-repeats 10 --out /tmp/aa1 --quiet
    python benchmarks/work_aa.py /tmp/aa0 /tmp/aa1          # ten A/As of every cell both runs counted

Prints one line per A/A round (k) with how many cells said `work: same`, then every line that did not, then the two
runs diffed whole (all their counted processes a side, where a counter that varies within a side is named varying,
never changed); exit 1 when any of these was not `work: same`, or a cell was counted in one run only."""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.analysis.judge.work_diff import diff_cell  # noqa: E402
from harness.analysis.load.runs import read_work_table  # noqa: E402
from harness.catalogue import col  # noqa: E402
from harness.catalogue.work_gates import WORK_SAME  # noqa: E402


def by_process(rows: list[dict]) -> dict[tuple[str, int], list[dict]]:
    """A run's work rows grouped by (cell, counted process)."""
    out: dict[tuple[str, int], list[dict]] = {}
    for r in rows:
        out.setdefault((r[col.cell_id], int(r[col.process])), []).append(r)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", type=Path, help="run folder of side A")
    parser.add_argument("b", type=Path, help="run folder of side B (the same checkout)")
    args = parser.parse_args(argv)
    tables = [read_work_table(d) for d in (args.a, args.b)]
    for d, t in zip((args.a, args.b), tables):
        if t is None:
            raise SystemExit(f"{d}: no work.parquet (run it with --work-repeats)")
    a, b = map(by_process, tables)
    cells = sorted({c for c, _ in a} | {c for c, _ in b})
    rounds = sorted({k for _, k in a} & {k for _, k in b})
    ok = True
    lonely = sorted(({c for c, _ in a} ^ {c for c, _ in b}))
    if lonely:
        ok = False
        print(f"counted in one run only: {', '.join(lonely)}")
    words: Counter[str] = Counter()
    for k in rounds:
        same, told = 0, []
        for cell in cells:
            if (cell, k) not in a or (cell, k) not in b:
                continue
            line = diff_cell(a[(cell, k)], b[(cell, k)], cell).words()
            words[line] += 1
            if line == WORK_SAME:
                same += 1
            else:
                told.append(f"  {cell}: {line}")
        counted = same + len(told)
        ok &= not told
        print(f"A/A {k}: {same} of {counted} cells work: same")
        print("\n".join(told)) if told else None
    print(f"{len(rounds)} A/As of {len(cells)} cells: " + "; ".join(f"{n} x {w!r}" for w, n in words.most_common()))
    # the two runs whole, every counted process a side: a counter that varies within a side is named varying
    whole = Counter(diff_cell(tables[0], tables[1], cell).words() for cell in cells)
    ok &= set(whole) == {WORK_SAME}
    print(f"run A's {len(rounds)} counted processes a cell against run B's: "
          + "; ".join(f"{n} x {w!r}" for w, n in whole.most_common()))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
