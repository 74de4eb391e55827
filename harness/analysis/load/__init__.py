"""The analysis' files: run folders read (`runs`), verdicts.parquet and changes.parquet written and read
(`verdicts_file`, `changes_file`), a run's step times (`step_times`), the tables' columns listed (`columns`), a run
exported for other tools (`export`), an Nsight timeline read (`timeline`). Versions: harness.results.formats."""
