"""Every page is rendered here: Jinja2 templates (templates/*.html) with autoescaping on, so a value from results
or a matrix reaches a page escaped whether or not its caller thought of it; only fragments this package built
(through the same templates, `macro`) pass as Markup. All markup lives in templates/: Python hands them plain
values, and a page's sections are macros (templates/macros.html for the pieces pages share). Charts are plotly.js
figures (pages.charts): their data travels as JSON inside the page and templates/charts.js draws them;
plotly.min.js, shipped inside the plotly package, is copied once into each folder a page is written to, so a page
needs no network and no server."""

from __future__ import annotations

import functools
import html
import importlib.util
import os
import shutil
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from markupsafe import Markup

from harness.results import store

PLOTLY_JS = "plotly.min.js"
"""The charting library's one file, beside every page that draws a chart (the plotly package's own copy)."""


@functools.cache
def environment() -> Environment:
    """The one Jinja2 environment: templates/ of this package, autoescaping every .html, no undefined value; the
    `esc` filter escapes as the pages always have (html.escape: `&#x27;`, `&quot;`)."""
    env = Environment(loader=PackageLoader("harness.analysis.pages", "templates"),
                      autoescape=select_autoescape(["html"], default_for_string=True, default=True),
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    env.filters["esc"] = esc
    return env


def esc(value: Any) -> Markup:
    """A value escaped as html.escape spells it (None: nothing); Markup passes as it is."""
    if isinstance(value, Markup):
        return value
    return Markup(html.escape("" if value is None else str(value), quote=True))


def render(name: str, **values: Any) -> str:
    """templates/`name` filled with `values` (each escaped unless it is Markup)."""
    return environment().get_template(name).render(**values)


def macro(name: str, *args: Any, **kwargs: Any) -> Markup:
    """One macro of templates/macros.html (`name`) or of another template (`file.html:name`), called from Python:
    a fragment as escaped as a whole page."""
    source, _, name = name.rpartition(":")
    return Markup(getattr(environment().get_template(source or "macros.html").module, name)(*args, **kwargs))


def text(name: str) -> str:
    """A file of templates/ as it is (the pages' style and script)."""
    return environment().loader.get_source(environment(), name)[0]


def plotly_js_path() -> Path:
    """The plotly.min.js the installed plotly package ships; FileNotFoundError naming what is missing."""
    spec = importlib.util.find_spec("plotly")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the plotly package is not installed (pip install plotly): the pages' charts need "
                                "its plotly.min.js")
    path = Path(next(iter(spec.submodule_search_locations))) / "package_data" / PLOTLY_JS
    if not path.is_file():
        raise FileNotFoundError(f"{path}: the plotly package ships no {PLOTLY_JS}")
    return path


def place_assets(out_dir: Path) -> list[Path]:
    """plotly.min.js beside the pages of `out_dir`, before they are written (a page never stands without it): a hard
    link to the plotly package's own file where the folder shares its filesystem (no byte more a night), a copy
    where it does not; left alone where the folder already holds the same file. Returns what it placed."""
    source, target = plotly_js_path(), Path(out_dir) / PLOTLY_JS
    if target.is_file() and (os.path.samefile(source, target) or (
            target.stat().st_size == source.stat().st_size and target.read_bytes() == source.read_bytes())):
        return []
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.link(source, tmp)
    except OSError:  # another filesystem, or links not allowed: a copy
        try:
            shutil.copyfile(source, tmp)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            if exc.errno in store.FULL_ERRNOS:
                raise store.NoSpace(target, source.stat().st_size, exc.errno) from None
            raise
    tmp.replace(target)
    return [target]


__all__ = ["Markup", "PLOTLY_JS", "environment", "macro", "place_assets", "render", "text"]
