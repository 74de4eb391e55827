"""pyproject.toml declares what the code imports: every third-party import of harness/ is a dependency, or,
where only a function imports it, an extra; the suite's own imports are in the `test` extra. And CI (.ci/run)
runs exactly the README's test command."""

from __future__ import annotations

import ast
import re
import sys
import tomllib

from conftest import ROOT

DISTRIBUTION = {"PIL": "pillow", "pynvml": "nvidia-ml-py", "sklearn": "scikit-learn",
                "nvidia.dali": ("nvidia-dali-cuda120", "nvidia-dali-cuda130"), "_pytest": "pytest"}
"""Import names whose distribution has another name; any other import is its own distribution's name."""
OPTIONAL = {"sklearn": "digits", "nvidia.dali": "dali"}
"""Imports that only functions make, and the extra that brings each (the lazy import is the contract)."""


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared() -> dict[str, set[str]]:
    """'' -> the dependencies, extra -> its requirements; names normalised."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    groups = {"": project["dependencies"], **project["optional-dependencies"]}
    return {group: {_normal(re.match(r"[A-Za-z0-9._-]+", req).group()) for req in reqs}
            for group, reqs in groups.items()}


def _imports(folder: str) -> dict[str, bool]:
    """Third-party import name -> whether some module imports it at module level (when it is imported)."""
    found: dict[str, bool] = {}
    local = {path.stem for path in (ROOT / folder).rglob("*.py")}  # the folder's own helpers (slurm_cluster, ...)
    for path in sorted((ROOT / folder).rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        top_level = {id(node) for node in tree.body}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                root = name.split(".")[0]
                if root in sys.stdlib_module_names or root in local or root in ("harness", "__future__"):
                    continue
                key = "nvidia.dali" if name.startswith("nvidia.dali") else root
                found[key] = found.get(key, False) or id(node) in top_level
    return found


def _distributions(name: str) -> set[str]:
    dist = DISTRIBUTION.get(name, name)
    return {_normal(d) for d in ((dist,) if isinstance(dist, str) else dist)}


def test_every_import_of_the_package_is_declared():
    declared = _declared()
    imports = _imports("harness")
    assert {"torch", "numpy", "scipy", "pyarrow", "sklearn", "nvidia.dali"} <= set(imports)
    for name, at_module_level in sorted(imports.items()):
        if name in OPTIONAL:
            assert not at_module_level, f"{name} is an optional extra: import it inside the function that needs it"
            assert _distributions(name) & declared[OPTIONAL[name]], f"{name}: not in the {OPTIONAL[name]!r} extra"
        else:
            assert _distributions(name) & declared[""], (
                f"harness imports {name} but pyproject.toml's dependencies do not declare it")


def test_the_test_extra_covers_the_suite_and_the_optional_datasets():
    declared = _declared()
    available = declared[""] | declared["test"] | declared["dali"] | declared["dali-cuda13"]
    for name in _imports("tests"):
        assert _distributions(name) & available, f"tests import {name}; add it to the `test` extra"
    assert declared["digits"] <= declared["test"], "the suite covers the digits dataset: `test` needs its extra"
    assert declared["read"] <= declared["test"] and {"pandas", "duckdb"} <= declared["read"]  # README: read results


def test_ci_runs_exactly_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    command = readme.split("# the tests (exactly what .ci/run does)\n", 1)[1].splitlines()[0]
    assert command.startswith("bash ci/system-deps.sh && ")
    assert command.endswith('python -m pytest -n auto --dist loadfile --no-loadscope-reorder -m "not slow"')
    deps = (ROOT / "ci" / "system-deps.sh").read_text()
    assert "apt_install chromium" in deps, "the report's browser tests need chromium from ci/system-deps.sh"
    assert (ROOT / ".ci" / "run").read_text().rstrip().splitlines()[-1] == command


def test_the_readme_names_every_package_system_deps_installs():
    deps = (ROOT / "ci" / "system-deps.sh").read_text()
    packages = {word for line in deps.splitlines() if "apt_install " in line and not line.lstrip().startswith("#")
                for word in line.split("apt_install ", 1)[1].split("&&")[0].split("||")[0].split()
                if re.fullmatch(r"[a-z0-9][a-z0-9.+-]*", word)}  # package names, not options
    assert {"chromium", "slurm-wlm", "munge", "nsight-systems", "nsight-systems-target"} <= packages
    readme = (ROOT / "README.md").read_text()
    assert [p for p in sorted(packages) if f"`{p}`" not in readme] == []
    assert "nvbench-non-free.sources" in readme and "non-free" in deps
