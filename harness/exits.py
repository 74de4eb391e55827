"""nvbench's exit codes, by name: what every command and every step a script reads (ci/nightly.sh, bisect) returns.
Plain data: the command line, the orchestration and the analysis' steps all read it."""

EXIT_OK, EXIT_FAILURES, EXIT_BAD_INPUT, EXIT_INCONCLUSIVE, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
"""nvbench report / ab with --fail-on-regression: 0 every judged cell unchanged or improved (nothing failed);
1 a confirmed regression, a failed cell or a broken work gate; 3 nothing regressed but some cell stayed
inconclusive; 2 bad input; 130 interrupted."""

EXIT_CELL_NO_SPACE = 28
"""A cell process (python -m harness.cell) whose result files found its disk full (errno ENOSPC's number): not the
cell's failure but the run's, which stops with one line and keeps the job pending for `nvbench run --resume`."""
