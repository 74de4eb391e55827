"""What a result holds, each thing declared once: the axes (`axes`), the columns of every table nvbench writes
(`cells`, `steps`, `verdicts`, `kernels`, `work`; what a column is: `columns`) and the metrics a comparison judges (`judged`). Pure
data: imports nothing of nvbench and no third-party package, so every process and package may read it.

`col.<name>` is a column's name: code names columns through it, never by a string literal of its own
(tests/test_architecture.py holds that)."""

from __future__ import annotations

from types import SimpleNamespace

from harness.catalogue.axes import AXES
from harness.catalogue.cells import CELL_COLUMNS
from harness.catalogue.kernels import KERNEL_COLUMNS
from harness.catalogue.steps import STEP_COLUMNS
from harness.catalogue.verdicts import VERDICT_COLUMNS
from harness.catalogue.work import WORK_COLUMNS

ALL_COLUMN_NAMES: frozenset[str] = frozenset(
    c.name for c in (*CELL_COLUMNS, *STEP_COLUMNS, *VERDICT_COLUMNS, *KERNEL_COLUMNS, *WORK_COLUMNS)
) | frozenset(AXES)
"""Every column name of every table nvbench writes."""

col = SimpleNamespace(**{name: name for name in sorted(ALL_COLUMN_NAMES)})
"""Column names as attributes (`row[col.throughput_img_per_s]`): a misspelt one is an AttributeError, not a
silent None."""
