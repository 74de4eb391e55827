"""The user's own model by import path: the form checked without importing, the hash and cell-id token, building
from a real module on disk (the docs' worked example trains), and one line per way a builder can fail."""

from __future__ import annotations

import itertools
import re
import sys
import textwrap

import pytest
import torch
from conftest import ROOT
from torch import nn

from harness.models import UserModelError, build_model, build_user_model, import_path_hash, import_path_problem
from harness.models import is_import_path, model_token
from harness.models.flops import count_flops
from harness.models.user import module_problem, parse_import_path

pytestmark = pytest.mark.usefixtures("one_torch_thread")

_serial = itertools.count()


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """write(source) -> a unique module name importable from tmp_path; sys.path and sys.modules restored after."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    written = []

    def write(source: str) -> str:
        name = f"usernet_{next(_serial)}_{tmp_path.name.replace('-', '_')}"
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        written.append(name)
        return name

    yield write
    for name in written:
        sys.modules.pop(name, None)


TINY = """
    from torch import nn

    def build(num_classes):
        return nn.Sequential(nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, num_classes))
"""


@pytest.mark.parametrize("text", ["mynets:build", "pkg.sub.mod:make_net", "mynets:Factory.create", "_m:_b"])
def test_well_formed_import_paths(text):
    assert is_import_path(text) and import_path_problem(text) is None
    assert str(parse_import_path(text)) == text


@pytest.mark.parametrize("text, fragment", [
    ("mynets:", "expected 'package.module:builder': one ':' between a module and its builder"),
    (":build", "expected 'package.module:builder'"),
    ("a:b:c", "expected 'package.module:builder'"),
    ("my-nets:build", "'my-nets' is not an absolute module name"),
    (".mynets:build", "'.mynets' is not an absolute module name"),
    ("pkg.class:build", "'pkg.class' is not an absolute module name"),
    ("mynets:build()", "'build()' is not a Python name"),
    ("mynets:build\nx", "is not a Python name"),
])
def test_malformed_import_paths_say_why_in_one_line(text, fragment):
    problem = import_path_problem(text)
    assert problem.startswith(repr(text)) and fragment in problem and "\n" not in problem
    with pytest.raises(UserModelError, match="^" + re.escape(repr(text))):
        parse_import_path(text)


def test_a_registry_name_is_not_an_import_path():
    assert not is_import_path("resnet50") and model_token("se-resnext101-32x4d") == "se-resnext101-32x4d"


def test_hash_and_token_are_short_stable_and_file_safe():
    assert import_path_hash("mynets:build") == "2b46e979"  # SHA-256 of the text: the same on every machine
    assert import_path_hash("mynets:build") != import_path_hash("mynets:build2")
    assert model_token("mynets:build") == "mynets.build-2b46e979"
    assert model_token("team.nets.v2:make_Net") == f"v2.make-Net-{import_path_hash('team.nets.v2:make_Net')}"


def test_module_problem_finds_without_running(tmp_path, user_module):
    name = user_module("raise SystemExit('must not run')\n")
    assert module_problem(f"{name}:build", search_dirs=[tmp_path]) is None
    assert str(tmp_path) not in sys.path
    assert module_problem("no_such_module_here:build") == "'no_such_module_here:build': no module named " \
                                                          "'no_such_module_here'"


def test_a_user_model_builds_from_its_folder_and_is_counted(tmp_path, user_module):
    name = user_module(TINY)
    net = build_user_model(f"{name}:build", num_classes=3, search_dirs=[tmp_path])
    assert isinstance(net, nn.Module) and net(torch.zeros(2, 3, 8, 8)).shape == (2, 3)
    assert build_model(f"{name}:build", num_classes=5)[-1].out_features == 5  # the same dispatch the cell uses
    forward = count_flops(f"{name}:build", num_classes=5, image_size=8, training=False)
    assert forward == 2 * (36 * 4 * 27) + 2 * 4 * 5  # 6x6 outputs of a 3x3x3 -> 4 conv, then the fc


def test_the_docs_worked_example_trains(monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "mynets", raising=False)
    torch.manual_seed(0)
    net = build_user_model("mynets:build", num_classes=4, search_dirs=[ROOT / "examples"]).train()
    images, labels = torch.randn(8, 3, 32, 32), torch.arange(8) % 4
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05)
    before = nn.functional.cross_entropy(net(images), labels)
    before.backward()
    optimizer.step()
    with torch.no_grad():
        assert nn.functional.cross_entropy(net(images), labels) < before
    sys.modules.pop("mynets", None)


@pytest.mark.parametrize("source, attr, message", [
    (None, "build", "'{m}:build': cannot import module '{m}' (ModuleNotFoundError: No module named '{m}')"),
    (TINY, "make", "'{m}:make': '{m}' has no attribute 'make'"),
    (textwrap.dedent(TINY) + "\nclass Nets:\n    pass\n", "Nets.make",
     "'{m}:Nets.make': '{m}.Nets' has no attribute 'make'"),
    ("build = 3\n", "build", "'{m}:build': '{m}.build' is not a callable builder (type int)"),
    ("def build(num_classes):\n    raise ValueError('no GPU\\nfor you')\n", "build",
     "'{m}:build': build(num_classes=10) raised ValueError: no GPU for you"),
    ("def build():\n    return None\n", "build",
     "'{m}:build': build(num_classes=10) raised TypeError: build() got an unexpected keyword argument 'num_classes'"),
    ("def build(num_classes):\n    return [num_classes]\n", "build",
     "'{m}:build': build(num_classes=10) returned type list, not a torch.nn.Module"),
    ("def build(num_classes:\n", "build", "'{m}:build': cannot import module '{m}' (SyntaxError: "),
    ("import sys\nsys.exit(3)\n", "build", "'{m}:build': cannot import module '{m}' (SystemExit: 3)"),
])
def test_every_failure_is_one_line_naming_the_import_path(tmp_path, user_module, source, attr, message):
    module = user_module(source) if source is not None else "absent_module_for_nvbench_tests"
    with pytest.raises(UserModelError) as caught:
        build_user_model(f"{module}:{attr}", num_classes=10, search_dirs=[tmp_path])
    text = str(caught.value)
    assert "\n" not in text and text.startswith(message.format(m=module)), text


def test_zero_init_residual_is_refused_for_a_user_model(tmp_path, user_module):
    name = user_module(TINY)
    with pytest.raises(UserModelError, match=f"'{name}:build': zero_init_residual applies to registry models only"):
        build_model(f"{name}:build", num_classes=2, zero_init_residual=True, search_dirs=[tmp_path])
