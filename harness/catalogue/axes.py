"""The matrix's axes, declared once: name, type, unit and meaning. The matrix file's sections, its cells, the
rows' axis columns, a verdict's and a change's axis fields (AxisValues) all come from this record."""

from __future__ import annotations

from dataclasses import dataclass, field, make_dataclass

from harness.catalogue.columns import I, S


@dataclass(frozen=True, slots=True, kw_only=True)
class Axis:
    name: str
    """As the matrix file, the cell, every table and every report spell it."""
    type: str
    """S or I (harness.catalogue.columns)."""
    unit: str
    doc: str


AXES_RECORD: tuple[Axis, ...] = (
    Axis(
        name="model",
        type=S,
        unit="",
        doc="the model, a registry name or the user's own as its import path 'package.module:builder'.",
    ),
    Axis(name="backend", type=S, unit="", doc="data backend (dali-gpu, dali-cpu, pytorch, synthetic)."),
    Axis(name="memory_format", type=S, unit="", doc="nchw or nhwc (channels_last)."),
    Axis(name="precision", type=S, unit="", doc="fp32, fp16 (autocast + GradScaler) or bf16 (autocast)."),
    Axis(name="world_size", type=I, unit="processes", doc="processes per node (a torchrun group when > 1)."),
    Axis(name="grad_accum", type=I, unit="micro-batches", doc="micro-batches per optimizer step."),
    Axis(
        name="compile",
        type=S,
        unit="",
        doc="eager, inductor (the step under torch.compile) or cudagraph (the "
        "whole step captured as one CUDA graph and replayed).",
    ),
)
"""Every axis, in the order cell ids, tables and reports list them."""

AXES: tuple[str, ...] = tuple(a.name for a in AXES_RECORD)

_PY_TYPES = {S: str, I: int}

AxisValues = make_dataclass(
    "AxisValues",
    [(a.name, _PY_TYPES[a.type] | None, field(default=None)) for a in AXES_RECORD],
    frozen=True,
    slots=True,
    kw_only=True,
)
AxisValues.__doc__ = """One value per axis, each null where a record does not know it (a file written before the
axis existed): the axis fields of a verdict (harness.analysis.judge.verdict.CellVerdict) and of a change
(harness.analysis.nights.history.Change), made from AXES_RECORD."""
