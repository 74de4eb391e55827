"""All of the pages' markup lives in templates (issue 69): no Python module of harness/analysis/pages builds a tag,
and the templates escape what they are handed."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from harness.analysis.pages import render

PAGES = Path(render.__file__).resolve().parent
TAG = re.compile(r"</?[a-zA-Z][a-zA-Z0-9]*(\s[^<>]*)?/?>|</?[a-zA-Z][a-zA-Z0-9]*[\s>]|<[a-zA-Z][a-zA-Z0-9]*$")
"""An HTML tag, whole or begun (`<td class="num"`, `</td>`, `<br>`), in a string the Python writes."""
PLOTLY_TEXT = {"hovertemplate"}
"""Fields of a plotly.js figure whose text plotly itself reads (its `<br>` and `<extra>`): data, not the page."""


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
        if isinstance(node, (ast.Module, ast.ClassDef)):  # an attribute's docstring, the string after it
            for before, after in zip(node.body, node.body[1:]):
                if isinstance(before, (ast.Assign, ast.AnnAssign)) and isinstance(after, ast.Expr) \
                        and isinstance(after.value, ast.Constant):
                    out.add(id(after.value))
    return out


def markup_in(source: str) -> list[tuple[int, str]]:
    """(line, text) of every string constant or f-string piece in `source` that holds a tag; docstrings and
    plotly's own text fields left out."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values):
                if isinstance(key, ast.Constant) and key.value in PLOTLY_TEXT:
                    skip.update(id(n) for n in ast.walk(value))
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip
            and TAG.search(node.value)]


def test_no_python_module_of_the_pages_builds_markup():
    found = {path.name: hits for path in sorted(PAGES.glob("*.py")) if (hits := markup_in(path.read_text()))}
    assert found == {}, "markup belongs in templates/ (a macro), Python hands it values"


def test_the_check_sees_markup_built_every_way():
    """The rule above is known to see a break: an f-string, a concatenation, a join and a constant."""
    built = '''
def row(name, value, esc):
    """A <tr> in a docstring is words."""
    cells = "".join(f"<td>{esc(v)}</td>" for v in value)
    return "<tr><th>" + esc(name) + "</th>" + cells + '</tr>'

FIGURE = {"hovertemplate": "%{x}<br>%{y}<extra></extra>"}
'''
    assert sorted(line for line, _ in markup_in(built)) == [4, 4, 5, 5, 5]


def test_a_value_is_escaped_as_html_escape_spells_it_and_a_forgotten_one_still_escaped():
    env = render.environment()
    hostile = "<script>window.x = 'a' & \"b\"</script>"
    assert env.from_string("{{ v|esc }}").render(v=hostile) == \
        "&lt;script&gt;window.x = &#x27;a&#x27; &amp; &quot;b&quot;&lt;/script&gt;"
    assert env.from_string("{{ v|esc }}|{{ n|esc }}").render(v=None, n=3) == "|3"
    assert "<script>" not in env.from_string("{{ v }}").render(v=hostile)  # autoescaping, the net under `esc`


def test_a_macro_of_any_template_is_called_by_file_and_name():
    assert str(render.macro("summary.md:small", "a < b")) == "<sub>a &lt; b</sub>"
    assert str(render.macro("heatmap.html:heatmap", None)) == "<p>No cells.</p>"
