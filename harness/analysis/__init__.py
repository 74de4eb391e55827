"""Reading results after the fact: loading runs (`runs`), judging cells (`compare`, from their repeats
(`repeats`) and the statistical evidence (`evidence`) that `decide` turns into the verdict word, with the
`findings` beside it, all in the terms of `verdict`), screening a night against its history (`screen`) and
rendering them (`report`, with `templates/`). Imports nothing of the cell or of the orchestration."""
