"""The layout's contracts, checked over the import graph of harness/ (every import, lazy ones inside
functions included, read with ast): no import circle; the specification imports no torch (of nvbench, only
itself and the models' torch-free registry and import-path check); the analysis
imports nothing of the cell or the orchestration; the cell imports nothing of the orchestration; the parent
(orchestration and command line) never imports the cell; models know no data; statistics know nothing of
nvbench; no module under harness/ is over 500 lines. docs/architecture.md draws the same picture."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

PACKAGE = ROOT / "harness"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_package(module: str) -> bool:
    return (ROOT.joinpath(*module.split(".")) / "__init__.py").is_file()


def imports_of(path: Path) -> set[str]:
    """Every module `path` imports, absolute names, anywhere in the file."""
    found = set()
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)  # `from pkg import module`
    return found


def graph() -> dict[str, set[str]]:
    """harness module -> the harness modules it imports (names that are not modules are dropped)."""
    files = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    edges = {}
    for name, path in files.items():
        targets = {t for t in imports_of(path) if t in files}
        edges[name] = {t for t in targets if t != name}
    return edges


def third_party(prefix: str) -> set[str]:
    """Top-level packages outside harness that modules under `prefix` import."""
    return {t.split(".")[0] for name, path in {module_name(p): p for p in PACKAGE.rglob("*.py")}.items()
            if name == prefix or name.startswith(prefix + ".") for t in imports_of(path)
            if not t.startswith("harness")}


def reachable(edges: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [m for m in edges if m == start or m.startswith(start + ".")]
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo += edges.get(module, ())
    return seen


def within(modules: set[str], prefix: str) -> set[str]:
    return {m for m in modules if m == prefix or m.startswith(prefix + ".")}


EDGES = graph()


def test_the_layout_has_the_packages_the_contracts_name():
    packages = {m for m in EDGES if m.count(".") == 1 and (PACKAGE / m.split(".")[1] / "__init__.py").exists()}
    assert packages == {"harness.catalogue", "harness.matrix", "harness.orchestrate", "harness.cell", "harness.data", "harness.models",
                        "harness.results", "harness.stats", "harness.analysis", "harness.commands", "harness.host"}


MAX_MODULE_LINES = 500
"""A module a newcomer reads in one sitting; past it, cut the module where its own seams are."""
LONG_MODULES: dict[str, str] = {}
"""Modules allowed past MAX_MODULE_LINES, each with the reason: none today, and it should stay so."""


SOURCE_FOLDERS = ("harness", "ci", "benchmarks", "tests", "examples")
"""Where the repository keeps Python: the rule holds in every one of them (the ci/ scripts and tests included)."""


def module_lines() -> dict[str, int]:
    """Every Python file of the repository's source folders, with its line count."""
    return {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for folder in SOURCE_FOLDERS
            for p in (ROOT / folder).rglob("*.py") if "__pycache__" not in p.parts}


def test_no_module_is_longer_than_one_sitting():
    long = {path: n for path, n in module_lines().items() if n > MAX_MODULE_LINES and path not in LONG_MODULES}
    assert long == {}, f"over {MAX_MODULE_LINES} lines (split at the module's seams): {long}"


def test_the_line_rule_sees_a_long_module(tmp_path, monkeypatch):
    """The rule itself: a 501-line module under harness/ or ci/ is caught (the suite's own break check)."""
    monkeypatch.setattr(f"{__name__}.PACKAGE", tmp_path / "harness")
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    (tmp_path / "harness").mkdir()
    (tmp_path / "harness" / "long.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    (tmp_path / "harness" / "short.py").write_text("x = 1\n" * MAX_MODULE_LINES)
    (tmp_path / "ci").mkdir()
    (tmp_path / "ci" / "script.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 2))
    assert module_lines() == {"harness/long.py": 501, "harness/short.py": 500, "ci/script.py": 502}
    with pytest.raises(AssertionError, match="long.py"):
        test_no_module_is_longer_than_one_sitting()


def find_circles(graph_: dict[str, set[str]]) -> list[list[str]]:
    """Every import circle of `graph_` (module -> modules it imports), each as its sorted modules. A package's
    __init__ importing its own submodules is how a package exposes them, not a circle. Any other circle is one,
    inside one package too (executors -> slurm -> executors once hid behind a package-wide pass)."""
    edges = {m: {t for t in targets if not (is_package(m) and t.startswith(m + "."))} for m, targets in graph_.items()}
    # Tarjan's strongly connected components: a component of two or more modules is a circle.
    index, low, stack, on_stack, circles = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for module in edges:
        if module not in index:
            visit(module)
    return circles


def test_no_import_circle():
    assert find_circles(EDGES) == []


def test_the_circle_rule_sees_a_circle_inside_one_package():
    """The rule itself, on today's graph with one import put back: executors importing slurm again (the circle of
    610fe19) is caught, as is a longer circle; the package face importing its own modules is not one."""
    back = {m: set(t) for m, t in EDGES.items()}
    back["harness.orchestrate.placement.executors"].add("harness.orchestrate.placement.slurm")
    assert ["harness.orchestrate.placement.executors", "harness.orchestrate.placement.slurm"] in find_circles(back)
    ring = {"harness.x.a": {"harness.x.b"}, "harness.x.b": {"harness.x.c"}, "harness.x.c": {"harness.x.a"}}
    assert find_circles(ring) == [["harness.x.a", "harness.x.b", "harness.x.c"]]
    assert find_circles({"harness.models": {"harness.models.resnet"}, "harness.models.resnet": {"harness.models"}}) == []


MODEL_DATA = {"harness.models.registry", "harness.models.user", "harness.data", "harness.data.registry"}
"""The torch-free registries the specification reads: the models' names and recipes, the import path's form, the
data backends' names."""


def test_the_specification_imports_no_torch():
    spec = reachable(EDGES, "harness.matrix")
    allowed = within(set(EDGES), "harness.matrix") | within(set(EDGES), "harness.catalogue") | {"harness"} | MODEL_DATA
    assert spec <= allowed, spec - allowed
    own = {t.split(".")[0] for p in PACKAGE.rglob("*.py") if module_name(p) in MODEL_DATA for t in imports_of(p)}
    assert not {"torch", "numpy", "nvidia", "PIL"} & (third_party("harness.matrix") | own)


def test_the_catalogue_is_pure_data_every_process_may_read():
    catalogue = reachable(EDGES, "harness.catalogue")
    assert catalogue <= within(set(EDGES), "harness.catalogue") | {"harness"}, catalogue
    assert third_party("harness.catalogue") <= set(sys.stdlib_module_names) | {"__future__"}


@pytest.mark.parametrize("module", ["harness.matrix.sections", "harness.matrix.cells", "harness.matrix.job",
                                    "harness.matrix.knobs", "harness.matrix.executor", "harness.matrix.rules",
                                    "harness.matrix.parse", "harness.matrix.reference", "harness.matrix.model_axis"])
def test_the_specification_loads_without_torch(module):
    probe = f"import sys, {module}; print(sorted(m for m in ('torch', 'numpy') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr


def test_a_commands_reach_warning_and_the_cells_window_statistics_load_without_scipy_stats():
    """scipy.stats takes ~0.9 s to import (its docstrings are parsed at import): every `nvbench` command paid it
    before its first line through reach_warning -> analysis.judge.decide, and every cell through stats.window."""
    probe = ("import sys; from harness.commands.common import reach_warning; import harness.stats.window; "
             "reach_warning(5, smoke=False, what='x'); print('scipy.stats' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stdout + done.stderr


def test_the_analysis_imports_nothing_of_the_cell_or_the_orchestration():
    analysis = reachable(EDGES, "harness.analysis")
    assert not within(analysis, "harness.cell") and not within(analysis, "harness.orchestrate")


def test_the_cell_imports_nothing_of_the_orchestration():
    assert not within(reachable(EDGES, "harness.cell"), "harness.orchestrate")


@pytest.mark.parametrize("parent", ["harness.orchestrate", "harness.cli", "harness.commands", "harness.console"])
def test_the_parent_never_imports_the_cell(parent):
    assert not within(reachable(EDGES, parent), "harness.cell"), "start it as `python -m harness.cell` instead"


def test_models_know_no_data():
    assert not within(reachable(EDGES, "harness.models"), "harness.data")


def test_data_knows_no_timing_or_orchestration():
    data = reachable(EDGES, "harness.data")
    assert not within(data, "harness.cell") and not within(data, "harness.orchestrate")


def test_statistics_know_nothing_of_nvbench():
    assert reachable(EDGES, "harness.stats") <= within(set(EDGES), "harness.stats") | {"harness"}
    assert third_party("harness.stats") <= {"__future__", "collections", "dataclasses", "itertools", "math",
                                            "numpy", "scipy"}


def test_the_contracts_see_a_broken_rule():
    """The graph reader itself: a lazy import inside a function counts."""
    assert "harness.cell.worker" in EDGES["harness.cell.__main__"]  # imported inside main()


def test_the_decision_is_one_pure_module():
    """harness.analysis.judge.decide says the verdict word: nothing of nvbench below it but the catalogue (pure data:
    its reason codes), no disk, no processes."""
    assert reachable(EDGES, "harness.analysis.judge.decide") <= {"harness.analysis.judge.decide", "harness.analysis.judge",
                                                                 "harness.analysis", "harness"} | within(
        set(EDGES), "harness.catalogue")
    assert third_party("harness.analysis.judge.decide") <= {"__future__", "dataclasses", "math", "statistics", "typing",
                                                      "scipy"}


RESERVED_FOR_TESTS = ("spec", "specs", "test", "tests", "testing", "fixtures", "__tests__")
"""Folder names that common tools and conventions read as test folders (RSpec's spec/, pytest's test*/, ...)."""


def test_no_package_takes_a_name_reserved_for_tests():
    names = {p.name for p in PACKAGE.rglob("*") if p.is_dir() and (p / "__init__.py").exists()}
    assert not names & set(RESERVED_FOR_TESTS), names & set(RESERVED_FOR_TESTS)
    assert (PACKAGE / "matrix" / "parse.py").exists()  # the matrix file's parser, in a folder named for it


ORCHESTRATE_ROOMS = ("session", "placement", "cost", "workflows", "bisect")
ANALYSIS_ROOMS = ("judge", "load", "nights", "pages", "product")
MAX_ROOM_MODULES = 12
"""About a dozen modules: a room a reader holds in mind at once (orchestrate/'s and analysis/'s rooms)."""
MAX_FOLDER_MODULES = 15
"""No folder of harness/ holds more: past it, the folder is cut into rooms by role."""


def folder_modules(root: Path) -> dict[str, list[str]]:
    """Every folder under `root` that holds Python modules -> its modules (a package's __init__ not counted)."""
    out: dict[str, list[str]] = {}
    for path in root.rglob("*.py"):
        if path.stem != "__init__" and "__pycache__" not in path.parts:
            out.setdefault(str(path.parent.relative_to(root.parent)), []).append(path.stem)
    return out


def rooms_of(package: Path) -> dict[str, list[str]]:
    return {p.name: sorted(q.stem for q in p.glob("*.py") if q.stem != "__init__")
            for p in package.iterdir() if (p / "__init__.py").exists()}


@pytest.mark.parametrize("package, names", [("orchestrate", ORCHESTRATE_ROOMS), ("analysis", ANALYSIS_ROOMS)])
def test_the_parent_and_the_reader_are_cut_into_rooms_by_role(package, names):
    root = PACKAGE / package
    assert sorted(p.name for p in root.glob("*.py")) == ["__init__.py"], "a module outside the rooms"
    rooms = rooms_of(root)
    assert set(rooms) == set(names)
    crowded = {room: len(mods) for room, mods in rooms.items() if len(mods) > MAX_ROOM_MODULES}
    assert not crowded, crowded


def test_no_folder_holds_more_than_fifteen_modules():
    crowded = {folder: len(mods) for folder, mods in folder_modules(PACKAGE).items() if len(mods) > MAX_FOLDER_MODULES}
    assert crowded == {}, f"over {MAX_FOLDER_MODULES} modules (cut the folder into rooms by role): {crowded}"


def test_the_folder_rule_sees_a_crowded_folder(tmp_path):
    (tmp_path / "harness" / "big").mkdir(parents=True)
    for k in range(MAX_FOLDER_MODULES + 1):
        (tmp_path / "harness" / "big" / f"m{k}.py").write_text("")
    (tmp_path / "harness" / "big" / "__init__.py").write_text("")
    assert {f: len(m) for f, m in folder_modules(tmp_path / "harness").items()} == {"harness/big": 16}


DISK_MODULES = {"os", "io", "pathlib", "shutil", "subprocess", "sqlite3", "tempfile", "glob", "pyarrow.parquet",
                "pyarrow.feather", "pyarrow.csv", "pandas", "resource", "harness.results.store"}
"""Imports that read or write the disk or start processes."""
DISK_CALLS = {"open", "read_text", "write_text", "read_bytes", "write_bytes", "mkdir", "unlink", "rmdir", "iterdir",
              "glob", "rglob", "exists", "is_file", "is_dir", "read_table", "write_table", "read_json", "write_json"}
"""Calls that read or write the disk (a built-in `open`, a Path's methods, the store's readers and writers)."""


def disk_uses(path: Path) -> list[str]:
    """What in `path` touches the disk: an import of DISK_MODULES or a call of DISK_CALLS, each as 'line: name'."""
    tree = ast.parse(path.read_text(), str(path))
    imported = {alias.name for n in ast.walk(tree) if isinstance(n, ast.Import) for alias in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module and not n.level}
    found = [f"import {t}" for t in sorted(imported & DISK_MODULES)]
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
            if name in DISK_CALLS:
                found.append(f"{node.lineno}: {name}()")
    return found


def test_nothing_in_the_judging_room_reads_or_writes_the_disk():
    """harness.analysis.judge is pure: data in (RunData, rows), verdicts out; it imports no other room of the
    analysis, none of its modules imports a disk or process module or calls one that reads or writes a file."""
    judge = PACKAGE / "analysis" / "judge"
    uses = {p.name: u for p in judge.glob("*.py") if (u := disk_uses(p))}
    assert uses == {}, uses
    reached = within(reachable(EDGES, "harness.analysis.judge"), "harness.analysis")
    assert reached <= within(set(EDGES), "harness.analysis.judge") | {"harness.analysis"}, reached
    assert not {"harness.results.store", "harness.host.procstat"} & reachable(EDGES, "harness.analysis.judge")


def test_the_purity_rule_sees_a_read(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("from pathlib import Path\n\n\ndef f(p):\n    return Path(p).read_text()\n")
    assert disk_uses(module) == ["import pathlib", "5: read_text()"]
    module.write_text("def f(rows):\n    with open('x') as f:\n        return f.read()\n")
    assert disk_uses(module) == ["2: open()"]


def test_the_host_accounting_knows_nothing_of_nvbench_but_the_catalogue():
    assert reachable(EDGES, "harness.host") <= within(set(EDGES), "harness.host") | within(set(EDGES), "harness.catalogue") \
        | {"harness"}


TEXT_FIELDS = {"reason", "steadiness"}
"""Free text for a person: what a program needs of it is a column of its own (issue 60)."""
TEXT_READERS = ("harness/analysis/pages/", "harness/console.py")
"""What shows such text to a person (a first line, a clause cut for width): presentation, not data."""
PARSING = {"partition", "rpartition", "find", "rfind", "index", "rindex", "split", "rsplit", "startswith",
           "endswith", "removeprefix", "removesuffix", "count"}


def _mentions_text_field(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Name) and n.id in TEXT_FIELDS or isinstance(n, ast.Attribute) and n.attr in TEXT_FIELDS
               or isinstance(n, ast.Constant) and n.value in TEXT_FIELDS for n in ast.walk(node))


def text_parsing(path: Path) -> list[int]:
    """Lines of `path` that read data out of a reason or steadiness text: a string method that searches or cuts it,
    or an `in` test against it."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in PARSING \
                and _mentions_text_field(node.func.value):
            found.append(node.lineno)
        elif isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops) \
                and any(_mentions_text_field(c) for c in node.comparators):
            found.append(node.lineno)
    return sorted(found)


def test_no_code_reads_data_out_of_a_reason_or_steadiness_text():
    found = {rel: lines for p in PACKAGE.rglob("*.py")
             if not (rel := str(p.relative_to(ROOT))).startswith(TEXT_READERS) and (lines := text_parsing(p))}
    assert found == {}, f"data read out of free text (give it a column): {found}"


def test_the_text_rule_sees_a_parse(tmp_path):
    module = tmp_path / "m.py"
    module.write_text('def f(row, v):\n    a = "interference" in (row.get("reason") or "")\n'
                      '    b = v.reason.partition("; operators: ")[2]\n    return row["steadiness"].find("x"), a, b\n')
    assert text_parsing(module) == [2, 3, 4]


LITERAL_FREE_EXEMPT = {"stats": "pure functions of numbers: a parameter's name in an error message, never a column "
                                "(stats imports nothing of nvbench)"}
"""Packages under harness/ where a string equal to a column name is not a column; each with its reason."""


def literal_column_names(path: Path, names: set[str]) -> list[tuple[int, str]]:
    """(line, name) of every string constant in `path` that spells one of `names`, docstrings and f-string parts
    left out (they describe a column, they do not name one)."""
    tree = ast.parse(path.read_text())
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):  # its text, not the expressions in its braces
            skip |= {id(v) for v in node.values if isinstance(v, ast.Constant)}
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            skip.add(id(node.value))  # a docstring, or a bare string documenting what precedes it
    found = [(n.lineno, n.value) for n in ast.walk(tree) if isinstance(n, ast.Constant)
             and isinstance(n.value, str) and n.value in names and id(n) not in skip]
    return sorted(found + built_column_names(tree, names))


def built_column_names(tree: ast.AST, names: set[str]) -> list[tuple[int, str]]:
    """(line, pattern) of every f-string that builds a column's name from a prefix or suffix (`f"phase_{name}_s"`):
    its text parts, with one word where each value goes, spell a column. Only text joined by an underscore builds a
    name ('cpu{}', '{}m{}s' and a value alone do not)."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.JoinedStr):
            continue
        text = [v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str)]
        if not any("_" in part and any(c.isalpha() for c in part) for part in text):
            continue
        pattern = "".join(re.escape(v.value) if isinstance(v, ast.Constant) else "[a-z0-9]+" for v in node.values)
        if any(re.fullmatch(pattern, name) for name in names):
            found.append((node.lineno, "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)))
    return found


def compound_column_names() -> set[str]:
    """Every column name with an underscore: such a string names a column and nothing else (a single word, like
    `status` or `device`, is also a key of job files, flags and TOML, so it is left to review)."""
    from harness.catalogue import ALL_COLUMN_NAMES
    return {name for name in ALL_COLUMN_NAMES if "_" in name}


def test_code_names_columns_through_the_catalogue_never_by_a_literal():
    names = compound_column_names()
    found = {str(p.relative_to(ROOT)): hits for p in PACKAGE.rglob("*.py")
             if p.relative_to(PACKAGE).parts[0] not in ("catalogue", *LITERAL_FREE_EXEMPT)
             and (hits := literal_column_names(p, names))}
    assert found == {}, f"column names spelled as literals (use harness.catalogue.col): {found}"


def test_the_literal_check_sees_a_column_spelled_out(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text('"""doc naming throughput_img_per_s is fine."""\nx = row["throughput_img_per_s"]\n'
                   'y = f"{row}_throughput_img_per_s"\nz = f"{row[\'fast_step_img_per_s\']:.1f}"\n')
    assert literal_column_names(bad, compound_column_names()) == [(2, "throughput_img_per_s"),
                                                                  (4, "fast_step_img_per_s")]
    built = tmp_path / "built.py"
    built.write_text('a = row[f"phase_{name}_median_s"]\nb = f"{name}: {value}"\nc = f"{x}"\nd = f"cell {cid} ran"\n')
    assert literal_column_names(built, compound_column_names()) == [(1, "phase_{}_median_s")]

