"""Make a CPU machine look like a one-GPU machine to every Python process that starts with this folder on
PYTHONPATH: NVML reports one H100, torch says it was built for CUDA 13 and sees one device.

An audit, never a measurement. Run the suite under it on a CPU machine,

    PYTHONPATH=ci/pretend_gpu python -m pytest -m "not gpu"

and every test that leans on what the machine has instead of forcing its device sends a cell (or a torch
call) to CUDA, which this torch cannot do: the test fails and names itself. Those are the failures issue
16's first H100 run found (tests of the CPU path that ran on the GPU because the machine had one), caught
here without a GPU. GPU-marked tests mean a real device: leave them out. docs/gpu-validation.md has the
last audit's result.
"""

import importlib.abc
import importlib.util
import sys
import types


def _returns(value):
    return lambda *args, **kwargs: value


nv = types.ModuleType("pynvml")
nv.NVML_CLOCK_SM, nv.NVML_CLOCK_MEM = 1, 2
nv.NVMLError = type("NVMLError", (Exception,), {})
for name, value in {
    "nvmlInit": None, "nvmlShutdown": None, "nvmlSystemGetDriverVersion": "580.159.04",
    "nvmlDeviceGetCount": 1, "nvmlDeviceGetHandleByIndex": "h0", "nvmlDeviceGetHandleByUUID": "h0",
    "nvmlDeviceGetName": "NVIDIA H100 80GB HBM3", "nvmlDeviceGetUUID": "GPU-00000000-pretend",
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
    torch.cuda.device_count = lambda: 1
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
