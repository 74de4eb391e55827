"""Make a CPU machine look like a one-GPU machine to every Python process that starts with this folder on
PYTHONPATH: NVML reports one H100, torch says it was built for CUDA 13 and sees one device.

An audit, never a measurement. Run the suite under it on a CPU machine,

    PYTHONPATH=ci/pretend_gpu python -m pytest -m "not gpu"

and every test that leans on what the machine has instead of forcing its device sends a cell (or a torch
call) to CUDA, which this torch cannot do: the test fails and names itself. Those are the failures issue
16's first H100 run found (tests of the CPU path that ran on the GPU because the machine had one), caught
here without a GPU. GPU-marked tests mean a real device: leave them out. docs/gpu-validation.md has the
last audit's result.

NVBENCH_PRETEND_GPUS=N makes it N GPUs (default 1), all near every core, each with its own UUID
(GPU-0000000i-pretend), PCI bus id and NVML index; torch then sees as many as CUDA_VISIBLE_DEVICES names
of them. That is how the suite sees slots place jobs on a multi-GPU node (tests/orchestrate/test_slots_run.py).
"""

import importlib.abc
import importlib.util
import os
import sys
import types

GPUS = int(os.environ.get("NVBENCH_PRETEND_GPUS") or 1)


def _returns(value):
    return lambda *args, **kwargs: value


nv = types.ModuleType("pynvml")
nv.NVML_CLOCK_SM, nv.NVML_CLOCK_MEM = 1, 2
nv.NVMLError = type("NVMLError", (Exception,), {})


def _handle(index):
    if not 0 <= int(index) < GPUS:
        raise nv.NVMLError(f"no GPU {index}")
    return f"h{int(index)}"


def _uuid(handle):
    return f"GPU-{int(handle[1:]):08d}-pretend"


def _by_uuid(uuid):
    return next(_handle(i) for i in range(GPUS) if _uuid(f"h{i}") == uuid)


def _affinity(handle, words):  # every GPU near every core this machine has
    mask = [0] * words
    for cpu in range(os.cpu_count() or 1):
        mask[cpu // 64] |= 1 << cpu % 64
    return mask


nv.nvmlDeviceGetHandleByIndex, nv.nvmlDeviceGetUUID, nv.nvmlDeviceGetHandleByUUID = _handle, _uuid, _by_uuid
nv.nvmlDeviceGetIndex = lambda handle: int(handle[1:])
nv.nvmlDeviceGetPciInfo = lambda handle: types.SimpleNamespace(busId=f"00000000:{0x18 + int(handle[1:]):02X}:00.0")
nv.nvmlDeviceGetCpuAffinity = _affinity
nv.nvmlDeviceGetComputeRunningProcesses = lambda handle: []
for name, value in {
    "nvmlInit": None, "nvmlShutdown": None, "nvmlSystemGetDriverVersion": "580.159.04",
    "nvmlDeviceGetCount": GPUS, "nvmlDeviceGetName": "NVIDIA H100 80GB HBM3",
    "nvmlDeviceGetPersistenceMode": 1, "nvmlDeviceGetEccMode": (1, 1), "nvmlDeviceGetMigMode": (0, 0),
    "nvmlDeviceGetEnforcedPowerLimit": 700000, "nvmlDeviceGetApplicationsClock": 1980,
    "nvmlDeviceGetPowerUsage": 100000, "nvmlDeviceGetTotalEnergyConsumption": 0,
    "nvmlDeviceGetUtilizationRates": types.SimpleNamespace(gpu=0, memory=0),
    "nvmlDeviceGetClockInfo": 1980, "nvmlDeviceGetTemperature": 40,
}.items():
    setattr(nv, name, _returns(value))
sys.modules["pynvml"] = nv


def _patch(torch):
    torch.version.cuda = "13.0"
    torch.cuda.is_available = lambda: True
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    torch.cuda.device_count = lambda: GPUS if visible is None else len([e for e in visible.split(",") if e.strip()])
    # torch.compile saves and restores the CUDA RNG around tracing wherever CUDA is available: not a device
    # use by the code under test, so the pretence covers it.
    torch.cuda.get_rng_state = lambda *a, **k: torch.empty(0, dtype=torch.uint8)
    torch.cuda.set_rng_state = lambda *a, **k: None


class _Hook(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("torch")
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _patch(module)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _Hook())
