"""Reading results after the fact: loading runs (`runs`), judging cells (`compare`, whose evidence `decide`
turns into the verdict word), screening a night against its history (`screen`) and rendering them
(`report`, with `templates/`). Imports nothing of the cell or of the orchestration."""
