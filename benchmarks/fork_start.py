"""Whether a cell's interpreter start could be shared: a fresh `python` that imports what a cell imports, against a
child forked from a parent that imported it all once (a "zygote", which never initialises CUDA), and what the
forked child no longer draws afresh.

    python benchmarks/fork_start.py --processes 6

Alternates the two ways (seeded order) and prints, per way: the median seconds from start to a child ready to
build its model (the imports: the cell's worker, torch, torch._dynamo, which the first fused optimizer loads),
and how many distinct values the children drew for what a fresh process randomises: Python's string-hash seed
(dict and set layouts), the address of a new 64 MiB buffer (the memory layout the measured loop runs in), and
the address of a small heap object. A fresh process per repeat exists to sample those between repeats; a
forked child inherits them from its parent.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import json, sys, time
t0 = float(sys.argv[1])
{imports}
import numpy as np
buffer = np.ones(1 << 24, dtype=np.float32)  # 64 MiB: mmap'd, as a batch or an activation would be
print(json.dumps({{"ready_s": time.time() - t0, "hash": hash("nvbench"), "mmap": buffer.ctypes.data,
                  "heap": id(object())}}), flush=True)
"""
MODULES = ("harness.cell.worker", "torch._dynamo")
IMPORTS = "\n".join(f"import {m}" for m in MODULES)


def fresh(python: str) -> dict:
    t0 = time.time()
    done = subprocess.run([python, "-c", CHILD.format(imports=IMPORTS), str(t0)], capture_output=True, text=True,
                          cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def forked() -> dict:
    """A child of this (already importing) process; its measurement, read back through a pipe."""
    read, write = os.pipe()
    t0 = time.time()
    pid = os.fork()
    if pid == 0:  # the child: what a zygote's child would do before it builds the cell
        os.close(read)
        import numpy as np

        buffer = np.ones(1 << 24, dtype=np.float32)
        record = {"ready_s": time.time() - t0, "hash": hash("nvbench"), "mmap": buffer.ctypes.data,
                  "heap": id(object())}
        os.write(write, json.dumps(record).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        record = json.loads(pipe.read())
    os.waitpid(pid, 0)
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", type=int, default=6, help="children per way (default 6)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    t0 = time.time()
    for module in MODULES:  # the zygote's own imports, once
        importlib.import_module(module)
    zygote_s = time.time() - t0
    order = ["fresh", "forked"] * args.processes
    random.Random(args.seed).shuffle(order)
    got: dict[str, list[dict]] = {"fresh": [], "forked": []}
    for way in order:
        got[way].append(fresh(sys.executable) if way == "fresh" else forked())
    print(f"zygote's imports, once: {zygote_s:.2f} s")
    print("| way | children | median s to ready | distinct hash seeds | distinct buffer addresses | distinct heap addresses |")
    print("|---|---|---|---|---|---|")
    for way, records in got.items():
        ready = statistics.median(r["ready_s"] for r in records)
        distinct = [len({r[k] for r in records}) for k in ("hash", "mmap", "heap")]
        print(f"| {way} | {len(records)} | {ready:.2f} | " + " | ".join(map(str, distinct)) + " |")


if __name__ == "__main__":
    main()
