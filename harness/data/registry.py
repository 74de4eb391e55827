"""The data backends as plain data: each `backend` axis value and the module that builds its loaders. Imports
nothing, so the matrix file's validator reads the names from here (harness.matrix.sections.BACKENDS)."""

BACKENDS: dict[str, str] = {
    "dali-gpu": "harness.data.dali",
    "dali-cpu": "harness.data.dali",
    "pytorch": "harness.data.pytorch",
    "synthetic": "harness.data.synthetic",
}
"""Backend name -> module path; each module defines build(spec) -> Loader and unavailable_reason(device) ->
str | None (None when it can run here). A new backend: its module and one line here."""
