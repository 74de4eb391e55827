"""Environment fingerprint: what hardware and software a result was measured on, and which of it
must match before two results may be compared (ENV_KEY_FIELDS, env_key, env_diff).

Collecting never creates a CUDA context or even calls cuInit: the runner parent calls it before it
forks or launches GPU children, and a parent that initialised the CUDA driver poisons forked children.
GPU facts therefore come from NVML, and every probe degrades to None instead of raising.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, TypeVar

import harness
from harness.catalogue import col

T = TypeVar("T")

ENV_KEY_VERSION = 1
"""Bumped whenever ENV_KEY_FIELDS or the canonical form changes, so old and new keys never collide."""

# Fields that must be equal for two results to be comparable. In, because each moves throughput:
#   device_kind                   a CPU run and a GPU run measure different things.
#   gpu_name, gpu_count           the hardware itself; gpu_count is GPUs visible to the process, so a
#                                 1-GPU run on an 8-GPU host matches a 1-GPU host.
#   mig_mode                      a MIG slice is not the whole GPU.
#   power_limit_w                 a lower cap lowers sustained clocks.
#   app_clock_sm_mhz/_mem_mhz     pinned application clocks change the speed outright.
#   ecc_mode                      ECC costs memory bandwidth and capacity on GDDR parts.
#   driver_version, cuda_runtime  kernels, JIT and scheduling come from these.
#   cudnn_version, nccl_version   convolution and collective kernels.
#   torch_version, torch_git      the framework; torch_git catches source builds sharing a version.
#   dali_version                  the DALI data backends (and its CUDA flavour, see _dali_version).
# Which of them a comparison of one cell asks to match depends on the cell: cell_env_fields.
#   python_version                host-side dispatch overhead differs between interpreters.
#   cpu_model, cpu_count          data loading and host overhead; cpu_count is CPUs this process
#                                 may run on (affinity), not the host total.
# Out, because they differ without changing what is measured (or are what is being measured):
#   gpu_uuid, hostname            same hardware and software on another node or GPU is comparable;
#                                 that is how a fleet shares baselines.
#   nvbench_version/_git_sha/_git_dirty  the code under test changing is exactly what we compare
#                                 (the result schema has its own version in records.py).
#   container_image               a bundle of the versions already listed; a retag of the same stack
#                                 must still compare.
#   persistence_mode              affects driver start-up latency, which no measured window contains.
#   os                            kernel patch levels churn without moving GPU throughput.
#   cudnn_benchmark/_limit        the runner's torch defaults: a cell's autotuning is its recipe's
#                                 (recipe.cudnn_benchmark, in its cell id) and the limit is torch's
#                                 (torch_version); each row records both as its cell trained.
ENV_KEY_FIELDS: tuple[str, ...] = (
    "device_kind",
    "gpu_name",
    "gpu_count",
    "mig_mode",
    "power_limit_w",
    "app_clock_sm_mhz",
    "app_clock_mem_mhz",
    "ecc_mode",
    "driver_version",
    "cuda_runtime",
    "cudnn_version",
    "nccl_version",
    "torch_version",
    "torch_git",
    "dali_version",
    "python_version",
    "cpu_model",
    "cpu_count",
)

HOST_KEY_FIELDS = ("torch_version", "torch_git", "python_version", "cpu_model", "cpu_count")
"""Key fields that can move any cell: the framework, the interpreter, the host's CPUs."""
GPU_KEY_FIELDS = ("device_kind", "gpu_name", "gpu_count", "mig_mode", "power_limit_w", "app_clock_sm_mhz",
                  "app_clock_mem_mhz", "ecc_mode", "driver_version", "cuda_runtime", "cudnn_version")
"""Key fields that can move a cell that trains on a GPU."""
COMMS_KEY_FIELDS = ("nccl_version",)
"""Key fields that can move a GPU cell of more than one rank."""
DALI_KEY_FIELDS = ("dali_version",)
"""Key fields that can move a cell whose data backend is DALI's."""


def cell_env_fields(*, backend: str, device: str | None, world_size: int) -> tuple[str, ...]:
    """The ENV_KEY_FIELDS that must match before this cell's results from two environments may be compared:
    the DALI version for dali-* cells only, the GPU stack for GPU cells only (`device` None, unknown: every GPU
    field counts), NCCL for multi-rank GPU cells. The key itself (env_key) stays over every field."""
    on_gpu = device != "cpu"
    wanted = set(HOST_KEY_FIELDS)
    wanted |= set(GPU_KEY_FIELDS) if on_gpu else set()
    wanted |= set(COMMS_KEY_FIELDS) if on_gpu and world_size > 1 else set()
    wanted |= set(DALI_KEY_FIELDS) if backend.startswith("dali") else set()
    return tuple(name for name in ENV_KEY_FIELDS if name in wanted)


GPU_FIELDS: tuple[str, ...] = (
    "gpu_name",
    "gpu_uuid",
    "gpu_count",
    "driver_version",
    "persistence_mode",
    "ecc_mode",
    "mig_mode",
    "power_limit_w",
    "app_clock_sm_mhz",
    "app_clock_mem_mhz",
)
"""Fields read through NVML; all None where NVML is unavailable."""

CONTAINER_IMAGE_VARS = ("NVBENCH_CONTAINER_IMAGE", "CONTAINER_IMAGE", "NVIDIA_PYTORCH_VERSION")
"""Environment variables naming the container image, first set one wins."""

DALI_DISTRIBUTIONS = ("nvidia-dali-cuda120", "nvidia-dali-cuda130")

_GIT_TIMEOUT_S = 5.0
_GIT_REDIRECT_VARS = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE")
_ENABLE_STATE = {0: "disabled", 1: "enabled"}


def call_or_none(fn: Callable[..., T], *args: Any) -> T | None:
    """fn(*args), or None if it raises: one failed probe must never cost the whole fingerprint."""
    try:
        return fn(*args)
    except Exception:
        return None


def load_nvml() -> Any | None:
    """The pynvml module, or None when nvidia-ml-py is not installed."""
    try:
        import pynvml
    except ImportError:
        return None
    return pynvml


def visible_gpu_handles(nvml: Any, environ: Mapping[str, str] | None = None) -> list[Any]:
    """NVML handles of the GPUs this process's CUDA sees, in CUDA ordinal order (cuda:0 first).

    Follows CUDA_VISIBLE_DEVICES as the CUDA runtime and torch read it: integer entries are NVML
    indices (exact when CUDA_DEVICE_ORDER=PCI_BUS_ID, and on nodes of identical GPUs), GPU-/MIG-
    entries are UUIDs or UUID prefixes, parsing stops at the first invalid entry, and a repeated
    entry hides every device. NVML must already be initialised.
    """
    environ = os.environ if environ is None else environ
    count = nvml.nvmlDeviceGetCount()
    raw = environ.get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        return [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    seen: list[str] = []
    handles = []
    for entry in (e.strip() for e in raw.split(",")):
        if entry in seen:
            return []
        seen.append(entry)
        handle = _resolve_visible_entry(nvml, entry, count)
        if handle is None:
            break
        handles.append(handle)
    return handles


def _resolve_visible_entry(nvml: Any, entry: str, count: int) -> Any | None:
    if entry.isdigit():
        return nvml.nvmlDeviceGetHandleByIndex(int(entry)) if int(entry) < count else None
    if entry.startswith("MIG-"):
        return call_or_none(nvml.nvmlDeviceGetHandleByUUID, entry)
    if entry.startswith("GPU-"):
        matches = [
            handle
            for handle in map(nvml.nvmlDeviceGetHandleByIndex, range(count))
            if _text(nvml.nvmlDeviceGetUUID(handle)).startswith(entry)
        ]
        return matches[0] if len(matches) == 1 else None
    return None


def collect_env(
    *, environ: Mapping[str, str] | None = None, nvml: Any | None = None
) -> dict[str, object]:
    """A flat, JSON-serialisable fingerprint of this machine and software stack.

    `environ` (default os.environ) is read for CUDA_VISIBLE_DEVICES and the container image, so a
    runner can fingerprint the environment it is about to give a child. `nvml` replaces pynvml
    (tests pass a fake). GPU facts describe the first GPU visible to the process.
    """
    environ = os.environ if environ is None else environ
    env: dict[str, object] = dict(_gpu_facts(load_nvml() if nvml is None else nvml, environ))
    env.update(_torch_facts())
    env["device_kind"] = "cuda" if env["cuda_runtime"] is not None and env["gpu_count"] else "cpu"
    env["dali_version"] = call_or_none(_dali_version)
    env["python_version"] = platform.python_version()
    env["cpu_model"] = call_or_none(cpu_model)
    env["cpu_count"] = call_or_none(usable_cpu_count)
    env["hostname"] = call_or_none(socket.gethostname)
    env["os"] = call_or_none(platform.platform)
    env["container_image"] = next((environ[v] for v in CONTAINER_IMAGE_VARS if environ.get(v)), None)
    env[col.nvbench_version] = harness.__version__
    sha, is_dirty = git_state(Path(harness.__file__).resolve().parent)
    env["nvbench_git_sha"] = sha
    env["nvbench_git_dirty"] = is_dirty
    return env


def _gpu_facts(nvml: Any | None, environ: Mapping[str, str]) -> dict[str, object]:
    facts: dict[str, object] = dict.fromkeys(GPU_FIELDS)
    if nvml is None:
        return facts
    try:
        nvml.nvmlInit()
    except Exception:
        return facts
    try:
        facts["driver_version"] = call_or_none(lambda: _text(nvml.nvmlSystemGetDriverVersion()))
        handles = call_or_none(visible_gpu_handles, nvml, environ)
        if handles is not None:
            facts["gpu_count"] = len(handles)
        if handles:
            facts.update(_device_facts(nvml, handles[0]))
    finally:
        call_or_none(nvml.nvmlShutdown)
    return facts


def _device_facts(nvml: Any, h: Any) -> dict[str, object]:
    return {
        "gpu_name": call_or_none(lambda: _text(nvml.nvmlDeviceGetName(h))),
        "gpu_uuid": call_or_none(lambda: _text(nvml.nvmlDeviceGetUUID(h))),
        "persistence_mode": call_or_none(lambda: _ENABLE_STATE.get(nvml.nvmlDeviceGetPersistenceMode(h))),
        # The ECC and MIG getters return [current, pending]; pending applies only after a reset.
        "ecc_mode": call_or_none(lambda: _ENABLE_STATE.get(nvml.nvmlDeviceGetEccMode(h)[0])),
        "mig_mode": call_or_none(lambda: _ENABLE_STATE.get(nvml.nvmlDeviceGetMigMode(h)[0])),
        # Enforced, not the management limit: it is the lower of all caps actually in force.
        "power_limit_w": call_or_none(lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000),
        "app_clock_sm_mhz": call_or_none(lambda: nvml.nvmlDeviceGetApplicationsClock(h, nvml.NVML_CLOCK_SM)),
        "app_clock_mem_mhz": call_or_none(
            lambda: nvml.nvmlDeviceGetApplicationsClock(h, nvml.NVML_CLOCK_MEM)
        ),
    }


def _torch_facts() -> dict[str, object]:
    """torch's version facts, from the machine's nvbench cache where this very install was asked before and this
    process has not imported torch: importing it costs a command 1.3-1.8 s, most of its start, and these facts
    change only with the install."""
    if "torch" in sys.modules:  # imported already: asking costs nothing and is the authority
        return _ask_torch()
    key = torch_install_key()
    cache = Path(os.environ.get("NVBENCH_CACHE") or Path.home() / ".cache" / "nvbench").expanduser() / "torch-facts.json"
    known: dict[str, Any] = {}
    if key is not None and cache.is_file():
        try:
            known = json.loads(cache.read_text())
        except (OSError, ValueError):  # torn or foreign: asked again and written whole
            known = {}
        if isinstance(known, dict) and isinstance(known.get(key), dict):
            return known[key]
    facts = _ask_torch()
    if key is not None and facts["torch_version"] is not None:
        try:  # whole or not at all: a temporary file renamed over the cache (two commands may race; either wins)
            cache.parent.mkdir(parents=True, exist_ok=True)
            part = cache.with_name(f"{cache.name}.{os.getpid()}.part")
            part.write_text(json.dumps((known if isinstance(known, dict) else {}) | {key: facts}, sort_keys=True))
            os.replace(part, cache)
        except OSError:  # a read-only cache costs the next command the import, not this one
            pass
    return facts


def torch_install_key() -> str | None:
    """What the facts of _ask_torch() depend on, read without importing torch: this interpreter, PYTHONPATH and the
    site hooks it loaded, torch's version.py and compiled core (path, size, mtime), the cuDNN and NCCL
    distributions beside it, and LD_LIBRARY_PATH (which cuDNN loads). None where torch is not installed."""
    import importlib.machinery

    try:  # the path finder alone: a meta-path hook (ci/pretend_gpu's patches torch once, when first found) stays armed
        spec = importlib.machinery.PathFinder.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    package = Path(spec.origin).parent
    digest = hashlib.sha256()
    # and what this process loaded at its start that may change what torch says (a sitecustomize on PYTHONPATH, as
    # ci/pretend_gpu's, makes a CPU build look like a CUDA one): not sys.path, whose first entry is the cwd
    hooks = [getattr(sys.modules.get(name), "__file__", None) for name in ("sitecustomize", "usercustomize")]
    digest.update("\0".join([os.path.realpath(sys.executable), os.environ.get("PYTHONPATH", ""),
                              *map(str, hooks)]).encode() + b"\0")
    try:
        digest.update((package / "version.py").read_bytes())
        for core in sorted(package.glob("_C*.so")) + sorted(package.glob("_C*.pyd")):
            st = core.stat()
            digest.update(f"{core}:{st.st_size}:{st.st_mtime_ns}\0".encode())
    except OSError:
        return None
    libraries = sorted(f"{d.metadata['Name']}=={d.version}" for d in importlib.metadata.distributions()
                       if (d.metadata["Name"] or "").lower().startswith(("nvidia-cudnn", "nvidia-nccl")))
    digest.update("\0".join(libraries).encode() + b"\0" + os.environ.get("LD_LIBRARY_PATH", "").encode())
    return digest.hexdigest()[:24]


def _ask_torch() -> dict[str, object]:
    # Only version queries: none of these loads a CUDA context or calls cuInit. torch.cuda.is_available()
    # is deliberately avoided: by default it calls cudaGetDeviceCount, which runs cuInit.
    facts: dict[str, object] = dict.fromkeys(
        ("cuda_runtime", "cudnn_version", "nccl_version", "torch_version", "torch_git", col.cudnn_benchmark,
         col.cudnn_benchmark_limit)
    )
    try:
        import torch
    except Exception:  # not installed, or a broken install failing to load its libraries
        return facts
    facts["cuda_runtime"] = call_or_none(lambda: torch.version.cuda)
    facts["cudnn_version"] = call_or_none(_cudnn_version)
    facts["nccl_version"] = call_or_none(_nccl_version)
    facts["torch_version"] = call_or_none(lambda: str(torch.__version__))
    facts["torch_git"] = call_or_none(lambda: torch.version.git_version)
    facts |= cudnn_knobs()
    return facts


def cudnn_knobs() -> dict[str, object]:
    """torch.backends.cudnn's `benchmark` and `benchmark_limit` in this process, as `cudnn_benchmark` and
    `cudnn_benchmark_limit`: whether cuDNN autotunes each new convolution shape, and how many algorithms it
    tries (0: all). None where torch has no cuDNN. Reading them initialises no CUDA (host-side flags). In the
    runner's fingerprint they are torch's process defaults; a cell sets `benchmark` from recipe.cudnn_benchmark
    and records both as it trained (its row's columns of the same names)."""
    import torch

    cudnn = torch.backends.cudnn
    if not cudnn.is_available():
        return {col.cudnn_benchmark: None, col.cudnn_benchmark_limit: None}
    return {col.cudnn_benchmark: bool(cudnn.benchmark), col.cudnn_benchmark_limit: call_or_none(lambda: int(cudnn.benchmark_limit))}


def _cudnn_version() -> int | None:
    """cuDNN's version as torch loaded it, e.g. 91900. Not torch.backends.cudnn.version(): on a GPU machine
    (torch 2.11, CUDA 13, an H100) it initialises CUDA, while the library's own version query does not
    (docs/gpu-validation.md, 2026-11-23)."""
    import torch

    cudnn = getattr(torch._C, "_cudnn", None)  # absent from CPU builds
    return int(cudnn.getVersionInt()) if cudnn is not None else None


def _nccl_version() -> str | None:
    import torch.cuda.nccl

    return ".".join(str(part) for part in torch.cuda.nccl.version() if part != "")


def _dali_version() -> str | None:
    """e.g. "2.4.0+cuda120": the CUDA flavour is part of the build, like torch's "+cu128".

    Read from package metadata: importing DALI would load its CUDA libraries.
    """
    for dist in DALI_DISTRIBUTIONS:
        try:
            version = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
        return f"{version}+{dist.rsplit('-', 1)[-1]}"
    return None


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str | None:
    """The CPU's marketing name; on Arm (no "model name" line) its implementer and part ids."""
    fields: dict[str, str] = {}
    for line in cpuinfo.read_text().splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip().lower(), " ".join(value.split()))
    for key in ("model name", "hardware", "cpu model"):
        if fields.get(key):
            return fields[key]
    if "cpu implementer" in fields:
        return f"arm implementer {fields['cpu implementer']} part {fields.get('cpu part', '?')}"
    return platform.processor() or None


def usable_cpu_count() -> int:
    """The CPUs this process may run on (taskset, cgroups, SLURM), not the machine's: at least 1."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


SHORT_COMMIT = 12
"""How many hex digits of a commit every line and page shows (git's own short form can grow with the repository)."""


def short_commit(sha: object) -> str:
    """A commit as people read it: its first SHORT_COMMIT hex digits."""
    return str(sha)[:SHORT_COMMIT]


def git_state(package_dir: Path) -> tuple[str | None, bool | None]:
    """(HEAD sha, has uncommitted changes) of the checkout whose top level holds `package_dir`.

    (None, None) when `package_dir` is not directly inside a git work tree with a commit, e.g. an
    installed copy in site-packages, even if some enclosing directory happens to be a repository.
    """
    top = _git(package_dir, "rev-parse", "--show-toplevel")
    if top is None or Path(top).resolve() != package_dir.resolve().parent:
        return None, None
    sha = _git(package_dir, "rev-parse", "--verify", "HEAD")
    if sha is None:
        return None, None
    # --no-optional-locks: a background status must not take index.lock and race a commit.
    status = _git(package_dir, "--no-optional-locks", "status", "--porcelain")
    return sha, None if status is None else status != ""


def _git(cwd: Path, *args: str) -> str | None:
    # A caller's GIT_DIR (e.g. inside a git hook) would point git at some other repository.
    scrubbed = {k: v for k, v in os.environ.items() if k not in _GIT_REDIRECT_VARS}
    try:
        done = subprocess.run(
            ["git", "-C", str(cwd), *args],
            capture_output=True,
            text=True,
            timeout=_GIT_TIMEOUT_S,
            env=scrubbed,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _text(value: str | bytes) -> str:
    # Older pynvml releases return bytes.
    return value.decode() if isinstance(value, bytes) else value


def _canonical(value: object) -> object:
    # 700 W read back from Parquet as 700.0 (or the reverse) must not change the key.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def env_key(env: Mapping[str, object]) -> str:
    """16 hex chars of sha256 over the canonical JSON of ENV_KEY_FIELDS (missing fields count as None)."""
    payload = {"env_key_version": ENV_KEY_VERSION}
    payload.update({field: _canonical(env.get(field)) for field in ENV_KEY_FIELDS})
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def env_diff(
    a: Mapping[str, object], b: Mapping[str, object], *, fields: Iterable[str] | None = None
) -> list[tuple[str, object, object]]:
    """(field, a's value, b's value) for every field that differs, a missing field reading as None.

    `fields` limits the comparison (pass ENV_KEY_FIELDS to explain why two env_keys differ); by
    default every field of either side is compared, in a's order then b's extras.
    """
    names = list(fields) if fields is not None else list(dict.fromkeys([*a, *b]))
    return [
        (name, a.get(name), b.get(name))
        for name in names
        if _canonical(a.get(name)) != _canonical(b.get(name))
    ]


def format_env(env: Mapping[str, object]) -> str:
    """One "field  value" line per field, values aligned; key fields marked with '*'."""
    if not env:
        return ""
    width = max(map(len, env))
    lines = []
    for name, value in env.items():
        mark = "*" if name in ENV_KEY_FIELDS else " "
        shown = "n/a" if value is None else value
        lines.append(f"{mark} {name:<{width}}  {shown}")
    return "\n".join(lines)
