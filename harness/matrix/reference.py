"""The knob tables of docs/matrix.md, generated from the knobs' declarations
(`python -m harness.matrix.reference --markdown`)."""

from __future__ import annotations

import dataclasses
import sys
import typing

from harness.matrix.knobs import type_name
from harness.matrix.sections import SECTIONS, GenerateConfig


def markdown_reference() -> str:
    """The knob tables of docs/matrix.md, generated from the knobs' declarations."""
    out = []
    for name, cls in {**SECTIONS, "data.generate": GenerateConfig}.items():
        out.append(f"### `[{name}]`\n\n| key | type | default | meaning |\n|---|---|---|---|")
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if dataclasses.is_dataclass(hints[f.name]):
                continue
            default = f.default
            shown = "[" + ", ".join(f"{v:.4g}" for v in default) + "]" if isinstance(default, tuple) else repr(default)
            shown = shown.replace("'", '"').replace("True", "true").replace("False", "false")
            choices = f.metadata.get("choices")
            kind = " | ".join(repr(c) for c in choices) if choices else type_name(hints[f.name])
            out.append(f"| `{f.name}` | {kind} | `{shown}` | {f.metadata['doc']} |")
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":  # python -m harness.matrix.reference --markdown
    if sys.argv[1:] == ["--markdown"]:
        print(markdown_reference())
