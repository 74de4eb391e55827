#!/usr/bin/env bash
# Nightly benchmark: run the matrix, judge it, publish the report.
#
#   ci/nightly.sh                      # defaults below; every knob is an environment variable
#
# Judging, first that applies:
#   1. $NVBENCH_BASELINE exists (a run folder or a pointer file, see reports/baselines/README.md):
#      `nvbench report --baseline` -> confirmed verdicts; a confirmed regression fails the job.
#   2. $NVBENCH_HISTORY holds past runs: `nvbench report --history` screens every cell against its
#      own history; suspects are rerun (a confirmation run of just those cells) and the rerun is
#      judged against the newest past run; a regression confirmed there fails the job.
#   3. neither: the report describes the run (no verdicts) and only failed cells fail the job.
# Tonight's run is then linked into the history. Exit: 0 ok; 1 confirmed regression or failed cells;
# 2 bad input; 130 interrupted.
set -uo pipefail

MATRIX=${NVBENCH_MATRIX:-matrices/resnet50.toml}
REPORTS=${NVBENCH_REPORTS:-reports}
BASELINE=${NVBENCH_BASELINE:-$REPORTS/baselines/current}
HISTORY=${NVBENCH_HISTORY:-$REPORTS/history}
REPEATS=${NVBENCH_REPEATS-10}         # repeats per cell (one process each); empty = the matrix's run.repeats
RUN_ARGS=${NVBENCH_RUN_ARGS:-}        # e.g. "--fire-drill 10" for a monthly drill: the job must fail
REPORT_ARGS=${NVBENCH_REPORT_ARGS:-}  # e.g. "--floor 2"
RUN_ID=${NVBENCH_RUN_ID:-nightly-$(date -u +%Y%m%d-%H%M%S)}
RUN=$REPORTS/$RUN_ID

log() { echo "nightly: $*" >&2; }
publish() {  # GitHub Actions: Markdown as the job summary, the report folder as a step output
  if [ -n "${GITHUB_STEP_SUMMARY:-}" ] && [ -f "$1/summary.md" ]; then cat "$1/summary.md" >> "$GITHUB_STEP_SUMMARY"; fi
  if [ -n "${GITHUB_OUTPUT:-}" ]; then echo "report_dir=$1" >> "$GITHUB_OUTPUT"; fi
}

# Verdicts compare repeats, never single samples: fewer than 5 per side can never be a confirmed regression.
if [ -n "$REPEATS" ]; then RUN_ARGS="--repeats $REPEATS $RUN_ARGS"; fi

log "run $RUN_ID: $MATRIX${REPEATS:+ x$REPEATS repeats}"
# shellcheck disable=SC2086  # RUN_ARGS is a list of flags
nvbench run "$MATRIX" --out "$RUN" --no-progress $RUN_ARGS
run_rc=$?
if [ "$run_rc" -ge 2 ]; then log "nvbench run exited $run_rc"; exit "$run_rc"; fi

report_rc=0
if [ -e "$BASELINE" ]; then
  log "judging against the baseline $BASELINE"
  # shellcheck disable=SC2086
  nvbench report "$RUN" --baseline "$BASELINE" --out "$RUN/report" --fail-on-regression $REPORT_ARGS
  report_rc=$?
  publish "$RUN/report"
elif [ -d "$HISTORY" ] && [ -n "$(ls -A "$HISTORY" 2>/dev/null)" ]; then
  log "screening against the history in $HISTORY"
  # shellcheck disable=SC2086
  nvbench report "$RUN" --history "$HISTORY" --out "$RUN/report" $REPORT_ARGS
  report_rc=$?
  publish "$RUN/report"
  only=$(python -c 'import json, sys
flags = sorted({f for s in json.load(open(sys.argv[1])) for f in s["only"]})
print(" ".join(f"--only {f}" for f in flags))' "$RUN/report/suspects.json" 2>/dev/null)
  if [ "$report_rc" -eq 0 ] && [ -n "$only" ]; then
    previous=$(ls -1d "$HISTORY"/*/ 2>/dev/null | sort | tail -n 1)
    log "suspects: confirming with a rerun ($only) against ${previous:-nothing}"
    # shellcheck disable=SC2086
    nvbench run "$MATRIX" --out "$RUN-confirm" --no-progress $only $RUN_ARGS
    if [ -n "$previous" ]; then
      # shellcheck disable=SC2086
      nvbench report "$RUN-confirm" --baseline "$previous" --out "$RUN-confirm/report" --fail-on-regression $REPORT_ARGS
      report_rc=$?
      publish "$RUN-confirm/report"
    fi
  fi
else
  log "no baseline ($BASELINE) and no history ($HISTORY): describing the run only"
  nvbench report "$RUN" --out "$RUN/report"
  report_rc=$?
  publish "$RUN/report"
fi

# Tonight joins the history (a link, not a copy); fire drills never do.
case " $RUN_ARGS " in
  *" --fire-drill "*) log "fire drill: not added to the history" ;;
  *) mkdir -p "$HISTORY" && ln -sfn "$(cd "$RUN" && pwd)" "$HISTORY/$RUN_ID" ;;
esac

if [ "$report_rc" -ge 2 ]; then exit "$report_rc"; fi
if [ "$report_rc" -eq 1 ]; then log "confirmed regression"; exit 1; fi
if [ "$run_rc" -eq 1 ]; then log "cells failed (see the report's failed and skipped cells)"; exit 1; fi
log "ok"
exit 0
