"""The analysis' files: run folders read (`runs`), verdicts.parquet written and read (`verdicts_file`), the tables'
columns listed (`columns`), a run exported for other tools (`export`), an Nsight timeline read (`timeline`)."""
