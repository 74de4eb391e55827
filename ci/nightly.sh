#!/usr/bin/env bash
# Nightly benchmark: run the matrix, judge it, publish the report.
#
#   ci/nightly.sh                      # every knob an environment variable (NVBENCH_*) or a flag of the same name
#
# The night is `nvbench nightly` (harness/commands/nightly.py, its conductor harness/orchestrate/workflows/nightly.py);
# this script only execs it, so cron and CI lines that call it keep working. `nvbench nightly --help` lists every
# knob with its default. What the night does:
#
# Judging, first that applies:
#   1. $NVBENCH_BASELINE exists (a run folder or a pointer file, see reports/baselines/README.md):
#      `nvbench report --baseline` -> verdicts; its regressions and slowdowns with p <= 0.2 are
#      confirmed (below), and a confirmed regression fails the job.
#   2. $NVBENCH_HISTORY holds past runs: `nvbench report --history` screens every cell against its
#      own history; suspects are confirmed (below) against the newest past run; a regression
#      confirmed there fails the job.
#   3. neither: the report describes the run (no verdicts) and only failed cells fail the job.
# Confirming ($NVBENCH_CONFIRM): a baseline ran on another night, and the machine drifts between
# nights by more than between interleaved repeats (docs/performance.md). So where the baseline's code
# differs from tonight's and its commit is recorded clean, its cells run again as an interleaved
# `nvbench ab`: A = the baseline's commit (a git worktree), B = tonight's checkout, and that verdict
# decides. Otherwise (same code, or not re-creatable) history suspects get a sequential rerun judged
# against the newest past run, and a baseline verdict stands (only a `regression` fails); both of these
# comparisons across nights are judged on throughput alone (--no-fast-steps), since the fast-step rate
# sees a slower machine as sharply as slower code. An A/B judges both metrics.
# `interleaved` confirms by A/B even when the code is the same (a slower machine alone then never
# fails the job); `every` skips the screen: every cell, every night, is judged by the A/B against the
# baseline's commit (twice the night's cost, the A/B's full reach); `sequential` never uses A/B.
# An A/B starts with $NVBENCH_CONFIRM_REPEATS pairs and adds pairs of the cells still inconclusive, up to
# $NVBENCH_CONFIRM_MAX_REPEATS a side (`nvbench ab --max-repeats`).
# Tonight's run is then linked into the history and its trend drawn ($RUN/history). A change point new
# tonight is confirmed before it alarms: its cells run again as an interleaved A/B of the commit of the night
# before the step and the commit of its first night (worktrees of this repository; the same A/B repeats as
# above); the page says confirmed, not confirmed or could not confirm (why), and only a confirmed slowdown
# fails the job (NVBENCH_CONFIRM=sequential: no A/B, nothing confirmed). Exit: 0 ok (every judged cell
# unchanged or improved); 1 confirmed regression, confirmed change point, failed cells or a broken work gate; 3 nothing
# regressed but some cell stayed inconclusive (the night could not tell: the cells are printed last);
# 2 bad input; 130 interrupted.
# A confirmed regression fails the job once: the night it first appears, or a night it got worse beyond the
# floor; other nights list it as `open since <night>, N nights` (exit 0), and `nvbench ack CELL-FILTER --reason`
# accepts it (listed as acknowledged while it stays within its interval). A night that does not show it ends it
# (`fixed`: the cell unchanged or improved; `gone`: tonight's interval wholly above the regression's) or lists it
# as still open with tonight's reading. `nvbench baseline promote RUN --reason` moves the baseline
# (reports/baselines/README.md).
set -euo pipefail
exec nvbench nightly "$@"
