"""Reading results after the fact: loading runs and deciding verdicts (`compare`) and rendering them
(`report`, with `templates/`). Imports nothing of the cell or of the orchestration."""
