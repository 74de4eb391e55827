"""Reading results after the fact, in four rooms by role:

- `judge`: two runs judged, cell by cell (`compare`, from the repeats (`repeats`) and the statistical evidence
  (`evidence`) that `decide` turns into the verdict word, with the `findings` beside it, in the terms of `verdict`;
  a night screened against its history (`screen`); the work and kernel diffs). Pure: nothing in it reads or writes
  the disk (tests/test_architecture.py).
- `load`: what reads and writes the analysis' files: run folders (`runs`), verdicts.parquet, the columns listing,
  exports for other tools, an Nsight timeline.
- `nights`: living with nights: the history's steps and its cache, the alarms and what is kept on disk of them
  and of the baselines.
- `pages`: what a person or CI reads: report.html and summary.md, the console, junit.xml, the heatmap, the
  history's page, the kernel and work sections, with `templates/`.

Imports nothing of the cell or of the orchestration."""
