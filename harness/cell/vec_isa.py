"""The part of inductor's start-up on a CPU that its on-disk caches do not keep: which vector instruction sets
(AVX2, AVX-512, ...) this machine's compiler can build and load. Inductor probes each one in every process that
compiles: it builds a test library and starts a fresh interpreter (torch imported) to load it, one per ISA; on
the 2-core CI machine under load that made a repeat reading a warm cache spend ~20 of its ~30 s compiling
(docs/performance.md). The run's compile-cache warm-up probes once and leaves the answer in the run's cache
folder; a repeat that finds it sets what the probes established instead of probing again."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from harness.results import store

RECORD = "nvbench-vec-isa.json"
"""The warm-up's answer, in the run's cache folder (TORCHINDUCTOR_CACHE_DIR)."""


def _record_path() -> Path | None:
    folder = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    return Path(folder) / RECORD if folder else None


def probe_once() -> None:
    """The warm-up's side: run inductor's probes now; when every ISA the CPU's flags name also built and loaded,
    compile with `cpp.vec_isa_ok` set (inductor then trusts those flags, which is what the probes showed) and
    record that for the repeats. The setting is part of inductor's cache key, so warm-up and repeats compile
    under the same one. Anything unexpected (another torch) leaves inductor to probe as it always has."""
    path = _record_path()
    try:
        from torch._inductor import config, cpu_vec_isa

        probed = [str(isa) for isa in cpu_vec_isa.valid_vec_isa_list()]
        config.cpp.vec_isa_ok = True
        trusted = [str(isa) for isa in cpu_vec_isa.valid_vec_isa_list.__wrapped__()]
    except (ImportError, AttributeError, OSError, RuntimeError, subprocess.SubprocessError):
        return
    if probed != trusted:  # a flag the compiler cannot honour here: keep probing in every process
        config.cpp.vec_isa_ok = None
        return
    if path is not None:
        store.write_json(path, {"vec_isa_ok": True, "isa": probed})


def reuse_probe() -> bool:
    """A repeat's side: set what the run's warm-up established (no probes in this process); False when it left
    no answer, and inductor probes as it always has."""
    path = _record_path()
    try:
        recorded = store.read_json(path) if path is not None and path.is_file() else {}
    except (OSError, store.UnreadableFile):
        return False
    if recorded.get("vec_isa_ok") is not True:
        return False
    try:
        from torch._inductor import config
    except ImportError:
        return False
    config.cpp.vec_isa_ok = True
    return True
