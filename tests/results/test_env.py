"""harness.results.env: the fingerprint on this GPU-less machine, GPU facts through a fake NVML, the
comparability key, and the git probe."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch

import harness
from harness.results import env as env_mod
from harness.results.env import (
    ENV_KEY_FIELDS,
    GPU_FIELDS,
    collect_env,
    cpu_model,
    env_diff,
    env_key,
    format_env,
    git_state,
    visible_gpu_handles,
)

EXPECTED_FIELDS = {
    "gpu_name", "gpu_uuid", "gpu_count", "driver_version", "cuda_runtime", "cudnn_version",
    "nccl_version", "torch_version", "torch_git", "dali_version", "python_version", "cpu_model",
    "cpu_count", "persistence_mode", "ecc_mode", "mig_mode", "power_limit_w", "app_clock_sm_mhz",
    "app_clock_mem_mhz", "hostname", "container_image", "nvbench_version", "nvbench_git_sha",
    "nvbench_git_dirty", "os", "device_kind", "cudnn_benchmark", "cudnn_benchmark_limit",
}  # fmt: skip


class NVMLError(Exception):
    pass


class FakeNvml:
    """Module-shaped stand-in for pynvml: handles are NVML indices; MIG mode is unsupported."""

    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2

    def __init__(self, names: list[str], *, fail_init: bool = False) -> None:
        self.names = names
        self.fail_init = fail_init
        self.init_calls = 0
        self.shutdown_calls = 0

    def nvmlInit(self):
        if self.fail_init:
            raise NVMLError("NVML Shared Library Not Found")
        self.init_calls += 1

    def nvmlShutdown(self):
        self.shutdown_calls += 1

    def nvmlSystemGetDriverVersion(self):
        return b"570.86.15"  # old pynvml releases return bytes

    def nvmlDeviceGetCount(self):
        return len(self.names)

    def nvmlDeviceGetHandleByIndex(self, index):
        if not 0 <= index < len(self.names):
            raise NVMLError("Invalid Argument")
        return index

    def nvmlDeviceGetHandleByUUID(self, uuid):
        raise NVMLError("Not Found")

    def nvmlDeviceGetName(self, h):
        return self.names[h]

    def nvmlDeviceGetUUID(self, h):
        return f"GPU-{h:04d}aaaa-bbbb"

    def nvmlDeviceGetPersistenceMode(self, h):
        return 1

    def nvmlDeviceGetEccMode(self, h):
        return [0, 1]

    def nvmlDeviceGetMigMode(self, h):
        raise NVMLError("Not Supported")

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return 700_000

    def nvmlDeviceGetApplicationsClock(self, h, clock_type):
        return {self.NVML_CLOCK_SM: 1755, self.NVML_CLOCK_MEM: 2619}[clock_type]


FOUR_GPUS = ["NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "NVIDIA L4"]


@pytest.fixture(scope="module")
def env() -> dict[str, object]:
    return collect_env(environ={}, nvml=FakeNvml([], fail_init=True))


def sample_env(**overrides: object) -> dict[str, object]:
    base: dict[str, object] = dict.fromkeys(EXPECTED_FIELDS)
    base.update(gpu_name="NVIDIA H100 80GB HBM3", gpu_count=8, power_limit_w=700.0, device_kind="cuda")
    base.update(overrides)
    return base


# --- collect_env on this machine -------------------------------------------------------------


def test_collect_env_has_every_field_and_is_json(env):
    assert set(env) == EXPECTED_FIELDS
    assert json.loads(json.dumps(env)) == env


def test_gpu_fields_are_none_without_nvml(env):
    assert {f: env[f] for f in GPU_FIELDS} == dict.fromkeys(GPU_FIELDS)
    assert env["device_kind"] == "cpu"


def test_real_pynvml_degrades_to_none_without_driver():
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("an NVIDIA driver is present here")
    got = collect_env()
    assert {f: got[f] for f in GPU_FIELDS} == dict.fromkeys(GPU_FIELDS)


def test_missing_pynvml_degrades_to_none(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise ImportError
    got = collect_env(environ={})
    assert {f: got[f] for f in GPU_FIELDS} == dict.fromkeys(GPU_FIELDS)


def test_software_and_host_fields(env):
    assert env["torch_version"] == torch.__version__
    assert env["torch_git"] == torch.version.git_version
    assert env["cuda_runtime"] == torch.version.cuda
    assert env["nvbench_version"] == harness.__version__
    assert env["python_version"] == ".".join(map(str, sys.version_info[:3]))
    assert isinstance(env["cpu_count"], int) and env["cpu_count"] >= 1
    assert env["container_image"] is None


def test_dali_version_from_metadata_with_cuda_flavour(monkeypatch):
    versions = {"nvidia-dali-cuda130": "2.5.1"}

    def fake_version(dist):
        if dist not in versions:
            raise env_mod.importlib.metadata.PackageNotFoundError(dist)
        return versions[dist]

    monkeypatch.setattr(env_mod.importlib.metadata, "version", fake_version)
    assert collect_env(environ={}, nvml=FakeNvml([], fail_init=True))["dali_version"] == "2.5.1+cuda130"
    versions.clear()
    assert collect_env(environ={}, nvml=FakeNvml([], fail_init=True))["dali_version"] is None


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, None),
        ({"NVIDIA_PYTORCH_VERSION": "25.01"}, "25.01"),
        ({"CONTAINER_IMAGE": "nvcr.io/nvidia/pytorch:25.01-py3", "NVIDIA_PYTORCH_VERSION": "25.01"},
         "nvcr.io/nvidia/pytorch:25.01-py3"),
        ({"NVBENCH_CONTAINER_IMAGE": "mine:1", "CONTAINER_IMAGE": "other"}, "mine:1"),
        ({"NVBENCH_CONTAINER_IMAGE": "", "CONTAINER_IMAGE": "other"}, "other"),
    ],
)  # fmt: skip
def test_container_image_first_set_variable_wins(environ, expected):
    assert collect_env(environ=environ, nvml=FakeNvml([], fail_init=True))["container_image"] == expected


def test_collect_env_calls_nothing_that_initialises_cuda(monkeypatch):
    calls: list[str] = []
    # Each of these would create a CUDA context or run cuInit (is_available's default path does).
    for owner, name in [
        (torch._C, "_cuda_getDeviceCount"),
        (torch._C, "_cuda_init"),
        (torch.cuda, "_lazy_init"),
        (torch.cuda, "init"),
        (torch.cuda, "is_available"),
        (torch.cuda, "get_device_name"),
        (torch.cuda, "get_device_properties"),
        (torch.cuda, "current_device"),
        # Seen on an H100 (torch 2.11, CUDA 13): this one initialises CUDA too.
        (torch.backends.cudnn, "version"),
    ]:
        monkeypatch.setattr(owner, name, lambda *a, _n=name, **k: calls.append(_n), raising=False)
    collect_env()
    assert calls == []


# A fresh interpreter (what earlier tests did to this process does not count) runs the parent's code path,
# then reports whether torch initialised CUDA and which NVIDIA device files it still holds open: the CUDA
# driver keeps /dev/nvidia-uvm (and /dev/nvidiactl) open once cuInit has run; NVML closes its files on
# nvmlShutdown. `positive_control` initialises CUDA at the end, to show the probe sees it.
PARENT_PROBE = """
import json, os, sys
from harness.cli import main
code = main(sys.argv[1:-1])
import torch
if sys.argv[-1] == "positive_control":
    torch.cuda.init()
fds = []
for fd in os.listdir("/proc/self/fd"):
    try:
        fds.append(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:
        pass
print(json.dumps({"code": code, "initialised": torch.cuda.is_initialized(),
                  "nvidia_files": sorted(f for f in fds if f.startswith("/dev/nvidia"))}))
"""


def parent_probe(*args: str, control: str = "") -> dict:
    proc = subprocess.run([sys.executable, "-c", PARENT_PROBE, *args, control or "-"], capture_output=True,
                          text=True, cwd=Path(harness.__file__).parents[1], timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_nvbench_env_never_initialises_cuda():
    seen = parent_probe("env", "--json")
    assert seen["code"] == 0 and not seen["initialised"] and seen["nvidia_files"] == []


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_runner_parent_never_initialises_cuda(tiny_matrix, tmp_path):
    """On a GPU machine: `nvbench run` of a CUDA cell leaves the runner without CUDA (on a CPU machine the
    probe would see nothing either way; test_nvbench_env_never_initialises_cuda runs the probe there)."""
    device = "cuda"
    matrix = tiny_matrix(device=device)
    seen = parent_probe("run", str(matrix), "--out", str(tmp_path / "run"), "--no-progress")
    assert seen["code"] == 0, seen
    assert not seen["initialised"] and seen["nvidia_files"] == []
    rows = pq.read_table(tmp_path / "run" / "cells").to_pylist()
    assert [(r["status"], r["device"]) for r in rows] == [("ok", device)]  # the child did train there


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_cuda_probe_sees_an_initialised_driver():
    seen = parent_probe("env", "--json", control="positive_control")
    assert seen["initialised"] and any("nvidia-uvm" in f or "nvidiactl" in f for f in seen["nvidia_files"])


# --- GPU facts through a fake NVML -----------------------------------------------------------


def test_gpu_facts_from_nvml():
    nvml = FakeNvml(FOUR_GPUS)
    got = collect_env(environ={}, nvml=nvml)
    assert {f: got[f] for f in GPU_FIELDS} == {
        "gpu_name": "NVIDIA H100 80GB HBM3",
        "gpu_uuid": "GPU-0000aaaa-bbbb",
        "gpu_count": 4,
        "driver_version": "570.86.15",
        "persistence_mode": "enabled",
        "ecc_mode": "disabled",  # current state; the pending one applies after a reset
        "mig_mode": None,  # unsupported on this device: one failed probe, not a failed collection
        "power_limit_w": 700.0,
        "app_clock_sm_mhz": 1755,
        "app_clock_mem_mhz": 2619,
    }
    assert (nvml.init_calls, nvml.shutdown_calls) == (1, 1)
    assert json.loads(json.dumps(got)) == got


def test_device_kind_is_cuda_only_with_cuda_torch_and_a_visible_gpu(monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", None)  # a CPU build of torch, whatever this machine has
    assert collect_env(environ={}, nvml=FakeNvml(FOUR_GPUS))["device_kind"] == "cpu"
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    assert collect_env(environ={}, nvml=FakeNvml(FOUR_GPUS))["device_kind"] == "cuda"
    hidden = {"CUDA_VISIBLE_DEVICES": ""}
    assert collect_env(environ=hidden, nvml=FakeNvml(FOUR_GPUS))["device_kind"] == "cpu"


@pytest.mark.parametrize(
    ("visible", "expected"),
    [
        (None, [0, 1, 2, 3]),
        ("2,3", [2, 3]),
        (" 3 , 0 ", [3, 0]),
        ("1,7,2", [1]),  # CUDA stops at the first invalid ordinal
        ("1,-1,2", [1]),
        ("0,0", []),  # a repeated entry hides every device
        ("", []),
        ("GPU-0002", [2]),  # UUID prefix
        ("GPU-00", []),  # ambiguous prefix
        ("MIG-abc", []),
    ],
)
def test_visible_gpu_handles_follow_cuda_visible_devices(visible, expected):
    environ = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    assert visible_gpu_handles(FakeNvml(FOUR_GPUS), environ) == expected


def test_gpu_facts_describe_first_visible_gpu():
    got = collect_env(environ={"CUDA_VISIBLE_DEVICES": "2,3"}, nvml=FakeNvml(FOUR_GPUS))
    assert (got["gpu_name"], got["gpu_count"]) == ("NVIDIA A100-SXM4-80GB", 2)
    none_visible = collect_env(environ={"CUDA_VISIBLE_DEVICES": "9"}, nvml=FakeNvml(FOUR_GPUS))
    assert (none_visible["gpu_name"], none_visible["gpu_count"], none_visible["driver_version"]) == (
        None,
        0,
        "570.86.15",
    )


# --- cpu_model -------------------------------------------------------------------------------


def test_cpu_model_x86(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC  9654 96-Core Processor\n\n"
        "processor\t: 1\nmodel name\t: AMD EPYC  9654 96-Core Processor\n"
    )
    assert cpu_model(cpuinfo) == "AMD EPYC 9654 96-Core Processor"


def test_cpu_model_arm_without_model_name(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nBogoMIPS\t: 2000.00\nCPU implementer\t: 0x41\nCPU part\t: 0xd4f\n")
    assert cpu_model(cpuinfo) == "arm implementer 0x41 part 0xd4f"


# --- env_key, env_diff, format_env -----------------------------------------------------------


def test_env_key_is_short_hex_and_stable():
    key = env_key(sample_env())
    assert len(key) == 16 and int(key, 16) >= 0
    assert env_key(sample_env()) == key
    assert env_key(dict(reversed(list(sample_env().items())))) == key
    assert env_key(collect_env()) == env_key(collect_env())


def test_env_key_golden():
    # If this changes, results stored under old keys stop matching: bump ENV_KEY_VERSION on purpose.
    assert env_key({}) == "f22724d8f7842bd4"


@pytest.mark.parametrize("field", ENV_KEY_FIELDS)
def test_env_key_changes_with_each_key_field(field):
    assert env_key(sample_env(**{field: "something else"})) != env_key(sample_env())


@pytest.mark.parametrize("field", sorted(EXPECTED_FIELDS - set(ENV_KEY_FIELDS)))
def test_env_key_ignores_non_key_fields(field):
    assert env_key(sample_env(**{field: "something else"})) == env_key(sample_env())


def test_env_key_canonical_numbers_and_missing_fields():
    assert env_key(sample_env(power_limit_w=700)) == env_key(sample_env(power_limit_w=700.0))
    assert env_key(sample_env(power_limit_w=700.5)) != env_key(sample_env(power_limit_w=700.0))
    without_dali = sample_env()
    del without_dali["dali_version"]
    assert env_key(without_dali) == env_key(sample_env(dali_version=None))


def test_key_fields_are_collected_fields():
    assert set(ENV_KEY_FIELDS) <= EXPECTED_FIELDS
    assert len(set(ENV_KEY_FIELDS)) == len(ENV_KEY_FIELDS)


def test_which_key_fields_a_cell_asks_to_match_depends_on_the_cell():
    groups = (env_mod.HOST_KEY_FIELDS, env_mod.GPU_KEY_FIELDS, env_mod.COMMS_KEY_FIELDS, env_mod.DALI_KEY_FIELDS)
    assert sorted(f for g in groups for f in g) == sorted(ENV_KEY_FIELDS)  # every key field, in one group each
    fields = env_mod.cell_env_fields
    cpu = fields(backend="pytorch", device="cpu", world_size=2)
    assert set(cpu) == set(env_mod.HOST_KEY_FIELDS)  # no GPU field, no NCCL for gloo ranks, no DALI
    assert "dali_version" in fields(backend="dali-cpu", device="cpu", world_size=1)
    gpu = fields(backend="synthetic", device="cuda", world_size=1)
    assert {"gpu_name", "driver_version", "cuda_runtime", "cudnn_version", "torch_version"} <= set(gpu)
    assert "dali_version" not in gpu and "nccl_version" not in gpu
    assert "nccl_version" in fields(backend="synthetic", device="cuda", world_size=2)
    assert set(fields(backend="dali-gpu", device=None, world_size=8)) == set(ENV_KEY_FIELDS)  # unknown: all


def test_env_diff_lists_differences_in_order():
    a = {"gpu_name": "NVIDIA L4", "torch_version": "2.13.0+cu128", "power_limit_w": 72.0, "hostname": "n1",
         "dali_version": None}
    b = {"hostname": "n2", "power_limit_w": 72, "torch_version": "2.13.0+cu130", "gpu_name": "NVIDIA L4",
         "extra_field": 1}
    assert env_diff(a, b) == [
        ("torch_version", "2.13.0+cu128", "2.13.0+cu130"),
        ("hostname", "n1", "n2"),
        ("extra_field", None, 1),
    ]  # a's order, then b's extras; 72 W == 72.0 W; a missing field reads as None
    assert env_diff(a, b, fields=ENV_KEY_FIELDS) == [("torch_version", "2.13.0+cu128", "2.13.0+cu130")]
    assert env_diff(a, a) == []


def test_format_env_aligns_values_and_marks_key_fields():
    text = format_env({"gpu_name": "NVIDIA L4", "hostname": "n1", "nvbench_git_sha": None})
    assert text.splitlines() == [
        "* gpu_name         NVIDIA L4",
        "  hostname         n1",
        "  nvbench_git_sha  n/a",
    ]
    assert format_env({}) == ""


# --- git probe -------------------------------------------------------------------------------


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com",
         "-c", "commit.gpgsign=false", *args],
        check=True, capture_output=True,
    )  # fmt: skip


def _copy_package(dest: Path) -> Path:
    """The part of the package collect_env needs (harness/__init__.py and harness/results/), outside any git
    checkout."""
    package = dest / "harness"
    (package / "results").mkdir(parents=True)
    source = Path(harness.__file__).parent
    for name in ("__init__.py", "results/__init__.py", "results/env.py"):
        shutil.copy(source / name, package / name)
    return package


def test_git_state_of_a_non_git_copy_is_none(tmp_path):
    assert git_state(_copy_package(tmp_path)) == (None, None)


def test_git_state_reads_head_and_dirty_flag(tmp_path):
    package = _copy_package(tmp_path)
    _git(tmp_path, "init", "-q")
    assert git_state(package) == (None, None)  # a repository without a commit has no HEAD
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-q", "-m", "init")
    sha, is_dirty = git_state(package)
    assert len(sha) == 40 and is_dirty is False
    (package / "results" / "env.py").write_text("# edited\n")
    assert git_state(package) == (sha, True)


def test_git_state_ignores_an_enclosing_repository(tmp_path):
    _git(tmp_path, "init", "-q")
    (tmp_path / "README").write_text("x")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-q", "-m", "init")
    # e.g. an installed copy under some_repo/.venv/lib/python3.11/site-packages/harness
    assert git_state(_copy_package(tmp_path / "site-packages")) == (None, None)


def test_collect_env_in_a_non_git_copy_has_no_sha(tmp_path):
    _copy_package(tmp_path)
    script = "import json; from harness.results.env import collect_env; print(json.dumps(collect_env()))"
    environ = {"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=environ, capture_output=True, text=True, check=True,
        timeout=120,
    )
    got = json.loads(done.stdout)
    assert (got["nvbench_git_sha"], got["nvbench_git_dirty"]) == (None, None)


def test_torch_facts_are_asked_once_per_install_and_read_back_without_importing_torch(tmp_path, monkeypatch):
    """The second command on a machine reads torch's version facts from the nvbench cache: its process never
    imports torch (1.3-1.8 s of a command's start); what it reads is what torch says."""
    code = ("import json, sys; from harness.results import env; "
            "print(json.dumps([env._torch_facts(), 'torch' in sys.modules]))")
    run = lambda: json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                            env=os.environ | {"NVBENCH_CACHE": str(tmp_path)}).stdout)
    first, second = run(), run()
    assert first[1] is True and second[1] is False  # asked, then read
    assert first[0] == second[0] == env_mod._ask_torch()
    assert list(json.loads((tmp_path / "torch-facts.json").read_text())) == [env_mod.torch_install_key()]
    key = env_mod.torch_install_key()
    monkeypatch.setenv("LD_LIBRARY_PATH", "/opt/another/cudnn")  # another cuDNN may load: asked again
    assert env_mod.torch_install_key() not in (None, key)
    monkeypatch.delenv("LD_LIBRARY_PATH")
    monkeypatch.setenv("PYTHONPATH", "ci/pretend_gpu")  # a sitecustomize may dress torch up: asked again
    assert env_mod.torch_install_key() not in (None, key)
