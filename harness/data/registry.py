"""The data backends as plain data: each `backend` axis value and the module that builds its loaders. Imports
nothing, so the matrix file's validator reads the names from here (harness.matrix.sections.BACKENDS)."""

BACKENDS: dict[str, str] = {
    "dali-gpu": "harness.data.dali",
    "dali-cpu": "harness.data.dali",
    "pytorch": "harness.data.pytorch",
    "synthetic": "harness.data.synthetic",
}
"""Backend name -> module path; each module defines build(spec) -> Loader. A new backend: its module, one line
here and one in AVAILABILITY."""

AVAILABILITY: dict[str, str | None] = {
    "dali-gpu": "harness.data.dali",
    "dali-cpu": "harness.data.dali",
    "pytorch": None,
    "synthetic": None,
}
"""Backend name -> the module whose unavailable_reason(device, backend=) says why the backend cannot run on a
device ("cpu" or "cuda"), or None when it runs wherever torch does. Asked by every command that plans cells, in a
process that has not imported torch (1.3-1.8 s): such a module imports no heavy library."""
