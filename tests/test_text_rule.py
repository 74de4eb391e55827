"""Results are typed up to the writer (issue 69): outside the writers no code reads data back out of the words
nvbench wrote for people. An AST rule over harness/, ci/ and benchmarks/, and the rule itself seen to catch a break."""

from __future__ import annotations

import ast

import pytest
from conftest import ROOT

PACKAGE = ROOT / "harness"

RESULT_TEXT = frozenset({"reason", "cause", "reason_figure", "notes", "note", "work_gate", "work", "operators",
                         "attribution", "env_diff", "method", "noise", "timeout_reason", "top1_text", "gpu_foreign_pids"})
"""What nvbench writes as words for people (a verdict's reason and its other texts, a note, a row's reason): code
decides on the typed fields beside them (reason_code, Note.severity and kind, work_gate_broken, floor_kind, ...)."""
STRING_SEARCHES = frozenset({"partition", "rpartition", "split", "rsplit", "startswith", "endswith", "find", "rfind",
                             "index", "count"})
RE_CALLS = frozenset({"search", "match", "fullmatch", "findall", "finditer", "sub", "subn", "split"})
WRITERS = ("harness/analysis/pages/", "harness/console.py", "harness/fit.py")
"""Where text is made (and only made): the pages room, the console and its fitting."""


def _named(node: ast.AST) -> set[str]:
    """The attributes, names and `.get("key")`/`["key"]` keys an expression reads."""
    out: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Attribute):
            out.add(n.attr)
        elif isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Constant) and isinstance(n.slice.value, str):
            out.add(n.slice.value)
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "get" and n.args \
                and isinstance(n.args[0], ast.Constant) and isinstance(n.args[0].value, str):
            out.add(n.args[0].value)
    return out


def text_searches(source: str) -> list[tuple[int, str]]:
    """(line, code) of every string search (a str method that searches, `in`, `re.*`) on a result's text."""
    hits = []
    for node in ast.walk(ast.parse(source)):
        searched: list[ast.AST] = []
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in STRING_SEARCHES:
                searched.append(node.func.value)
            if isinstance(node.func.value, ast.Name) and node.func.value.id == "re" and node.func.attr in RE_CALLS:
                searched += node.args[1:] if node.func.attr in ("sub", "subn") else node.args
            elif node.func.attr in RE_CALLS - {"split"}:  # a compiled pattern's .search(text), .sub(repl, text)
                searched += node.args[1:] if node.func.attr in ("sub", "subn") else node.args
        elif isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
            searched += [c for c in node.comparators if not isinstance(c, (ast.Tuple, ast.List, ast.Set))]
        if any(_named(e) & RESULT_TEXT for e in searched):
            hits.append((node.lineno, ast.unparse(node)))
    return hits


def test_no_code_reads_data_back_out_of_a_results_words():
    """Text is made by the writers and read by people: outside the writers no code (harness/, the acceptance scripts
    in ci/, benchmarks/) searches a verdict's reason, a note, a gate's words or a row's reason (issue 69): it reads
    the typed fields written beside them."""
    found = {}
    for path in sorted([*PACKAGE.rglob("*.py"), *(ROOT / "ci").glob("*.py"), *(ROOT / "benchmarks").glob("*.py")]):
        name = str(path.relative_to(ROOT))
        if not name.startswith(WRITERS) and (hits := text_searches(path.read_text())):
            found[name] = hits
    assert found == {}, found


@pytest.mark.parametrize("code", [
    'if note.startswith("warning:"): pass',
    'key = problem.reason.partition(":")[0]',
    'cid = v.reason.split(" [FIRE")[0]',
    'busy = "were killed" in row["reason"]',
    'm = re.search(r"\\d+", v.work_gate)',
    'n = _NUMBER.sub("#", v.cause)',
])
def test_the_text_rule_sees_a_search_on_a_results_words(code):
    assert text_searches(code), code


def test_the_text_rule_lets_typed_reads_and_other_text_be():
    assert text_searches('if v.reason_code == "busy" and n.severity == WARNING: x = line.partition(":")') == []
