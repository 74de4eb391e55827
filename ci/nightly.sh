#!/usr/bin/env bash
# Nightly benchmark: run the matrix, judge it, publish the report.
#
#   ci/nightly.sh                      # defaults below; every knob is an environment variable
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
set -uo pipefail

MATRIX=${NVBENCH_MATRIX:-matrices/resnet50.toml}
REPORTS=${NVBENCH_REPORTS:-reports}
BASELINE=${NVBENCH_BASELINE:-$REPORTS/baselines/current}
HISTORY=${NVBENCH_HISTORY:-$REPORTS/history}
REPEATS=${NVBENCH_REPEATS-10}         # repeats per cell (one process each); empty = the matrix's run.repeats
RUN_ARGS=${NVBENCH_RUN_ARGS:-}        # e.g. "--fire-drill 10" for a monthly drill: the job must fail
SLOTS=${NVBENCH_SLOTS:-}              # jobs at once (nvbench run/ab --slots N|auto); empty = nvbench's auto: one per
                                      # GPU for the backends this machine's calibration cleared (docs/performance.md)
REPORT_ARGS=${NVBENCH_REPORT_ARGS:-}  # e.g. "--floor 2"
CONFIRM=${NVBENCH_CONFIRM:-auto}     # auto | interleaved | every | sequential (see above)
CONFIRM_REPEATS=${NVBENCH_CONFIRM_REPEATS-10}  # first pairs of an A/B confirmation; empty = REPEATS
CONFIRM_MAX_REPEATS=${NVBENCH_CONFIRM_MAX_REPEATS-20}  # pairs an inconclusive cell may grow to; empty = no more
KERNEL_REPEATS=${NVBENCH_KERNEL_REPEATS:-}  # profiled processes a side when the A/B calls a change (where the time
                                            # went, to the kernel); empty = nvbench ab's default; 0 = none
WORK_REPEATS=${NVBENCH_WORK_REPEATS-1}  # counted processes per cell after the night's timed jobs (work.parquet: what
                                        # a step does, counted; never timed); 0 = none
RUN_ID=${NVBENCH_RUN_ID:-nightly-$(date -u +%Y%m%d-%H%M%S)}
RUN=$REPORTS/$RUN_ID
LAST_REPORT=$RUN/report  # the report whose verdicts decide the night (an A/B's or a confirmation's, when one ran)
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
case "$CONFIRM" in auto|interleaved|every|sequential) ;;
  *) echo "nightly: NVBENCH_CONFIRM=$CONFIRM: must be auto, interleaved, every or sequential" >&2; exit 2 ;;
esac
BISECT=${NVBENCH_BISECT:-work}        # off | work | auto: name the commit of an alarm opened tonight (see below)
BISECT_BUDGET_S=${NVBENCH_BISECT_BUDGET_S:-1800}  # seconds the culprit step's bisect may take
case "$BISECT" in off|work|auto) ;;
  *) echo "nightly: NVBENCH_BISECT=$BISECT: must be off, work or auto" >&2; exit 2 ;;
esac

log() { echo "nightly: $*" >&2; }

# Stopping: every command runs as a child this shell waits for (`wait` returns when a signal arrives, where a
# foreground command would make bash hold the signal until it ended), so SIGTERM, SIGINT or SIGHUP stop the
# child as Ctrl-C stops nvbench (its cells end, its run stays resumable), remove the A/B's worktree, and the
# night exits 130. A child also gets SIGTERM when this shell is SIGKILLed (setpriv --pdeathsig, util-linux).
DIE_WITH_ME=()
if setpriv --pdeathsig TERM true >/dev/null 2>&1; then DIE_WITH_ME=(setpriv --pdeathsig TERM); fi
CHILD=""
WORKTREE=""  # the baseline's checkout while an A/B confirmation runs
stop() {
  trap '' TERM INT HUP
  if [ -n "$CHILD" ]; then kill -TERM "$CHILD" 2>/dev/null; wait "$CHILD"; fi
  if [ -n "$WORKTREE" ]; then git -C "$ROOT" worktree remove --force "$WORKTREE" >/dev/null 2>&1; fi
  log "stopped by SIG$1; finish the run with: nvbench run --resume $RUN"
  exit 130
}
trap 'stop TERM' TERM
trap 'stop INT' INT
trap 'stop HUP' HUP
child() {  # child CMD...: CMD as the night's one running child; its exit status
  "${DIE_WITH_ME[@]}" "$@" &
  CHILD=$!
  wait "$CHILD"
  local rc=$?
  CHILD=""
  return "$rc"
}
NO_AB=4  # confirm_ab: no A/B confirmation could be had (3 is nvbench's "inconclusive")
publish() {  # GitHub Actions: Markdown as the job summary, the report folder as a step output
  if [ -n "${GITHUB_STEP_SUMMARY:-}" ] && [ -f "$1/summary.md" ]; then cat "$1/summary.md" >> "$GITHUB_STEP_SUMMARY"; fi
  if [ -n "${GITHUB_OUTPUT:-}" ]; then echo "report_dir=$1" >> "$GITHUB_OUTPUT"; fi
}

# confirm_ab BASE_RUN OUT ONLY...: the cells selected by ONLY, interleaved, under the baseline's commit
# (A) and tonight's checkout (B); nvbench ab's exit status (0, 1, 3 inconclusive), or NO_AB when an A/B
# confirmation cannot be had.
confirm_ab() {
  local base=$1 out=$2 sha head src rc
  shift 2
  if [ "${1:-}" = --only-all ]; then shift; fi  # NVBENCH_CONFIRM=every: no filter, every cell
  [ "$CONFIRM" != sequential ] || return $NO_AB
  sha=$(python -m harness.orchestrate.workflows.nightly code "$base") || return $NO_AB
  if [ -z "$sha" ]; then log "the baseline's commit is not recorded clean: no A/B confirmation"; return $NO_AB; fi
  head=$(python -m harness.orchestrate.workflows.nightly code)
  if [ "$CONFIRM" = auto ] && [ "$sha" = "$head" ]; then
    log "tonight runs the baseline's code ($sha): no A/B confirmation (NVBENCH_CONFIRM=interleaved forces one)"
    return $NO_AB
  fi
  src="$out-baseline-src"
  WORKTREE=$src
  if ! git -C "$ROOT" worktree add --detach --force "$src" "$sha" >/dev/null 2>&1; then
    WORKTREE=""
    log "cannot check out the baseline's commit $sha: no A/B confirmation"; return $NO_AB
  fi
  log "confirming by A/B: A = $sha (baseline), B = tonight${head:+ ($head)}: $*"
  # shellcheck disable=SC2086  # RUN_ARGS and REPORT_ARGS are lists of flags
  child nvbench ab "$MATRIX" --a-checkout "$src" --out "$out" "$@" $RUN_ARGS ${CONFIRM_REPEATS:+--repeats "$CONFIRM_REPEATS"} \
    ${CONFIRM_MAX_REPEATS:+--max-repeats "$CONFIRM_MAX_REPEATS"} ${KERNEL_REPEATS:+--kernel-repeats "$KERNEL_REPEATS"} \
    --fail-on-regression $REPORT_ARGS
  rc=$?
  git -C "$ROOT" worktree remove --force "$src" >/dev/null 2>&1
  WORKTREE=""
  if [ "$rc" -eq 130 ]; then log "interrupted during the A/B confirmation (rows so far in $out)"; exit 130; fi
  if [ "$rc" -eq 2 ] || [ "$rc" -gt 3 ] || ! python -m harness.orchestrate.workflows.nightly ran "$out"; then
    log "the A/B confirmation did not run (exit $rc): no A/B confirmation"; return $NO_AB
  fi
  publish "$out/report"
  LAST_REPORT="$out/report"
  return "$rc"
}

# Verdicts compare repeats, never single samples: fewer than 5 per side can never be a confirmed regression.
if [ -n "$REPEATS" ]; then RUN_ARGS="--repeats $REPEATS $RUN_ARGS"; fi
if [ -n "$SLOTS" ]; then RUN_ARGS="--slots $SLOTS $RUN_ARGS"; fi  # the run, its rerun and its A/B alike

log "run $RUN_ID: $MATRIX${REPEATS:+ x$REPEATS repeats}"
# What the run will cost (its estimate is the dry run's last line) and, once it ran, beside what it took.
# shellcheck disable=SC2086  # RUN_ARGS is a list of flags
log "$(nvbench run "$MATRIX" --dry-run --reports "$REPORTS" ${WORK_REPEATS:+--work-repeats "$WORK_REPEATS"} $RUN_ARGS 2>&1 | tail -n 1)"
# shellcheck disable=SC2086  # RUN_ARGS is a list of flags
child nvbench run "$MATRIX" --out "$RUN" --reports "$REPORTS" --no-progress ${WORK_REPEATS:+--work-repeats "$WORK_REPEATS"} $RUN_ARGS
run_rc=$?
if [ -f "$RUN/manifest.json" ]; then log "$(python -m harness.orchestrate.cost.pricing "$RUN")"; fi
if [ "$run_rc" -ge 2 ]; then log "nvbench run exited $run_rc"; exit "$run_rc"; fi
if [ "$run_rc" -eq 1 ] && ! python -m harness.orchestrate.workflows.nightly finished "$RUN"; then
  # A full disk (its one line above names the folder and the bytes) or nvbench itself stopped: nothing to judge.
  log "the run stopped before its end: nothing is judged tonight; once fixed, finish it with: nvbench run --resume $RUN"
  exit 1
fi

report_rc=0
if [ -e "$BASELINE" ]; then
  log "judging against the baseline $BASELINE"
  # shellcheck disable=SC2086
  child nvbench report "$RUN" --baseline "$BASELINE" --out "$RUN/report" --fail-on-regression $REPORT_ARGS
  report_rc=$?
  only=$(python -m harness.orchestrate.workflows.nightly targets "$RUN/report" 2>/dev/null)
  ab_only=$only
  if [ "$CONFIRM" = every ]; then ab_only="--only-all"; fi
  ab_rc=$NO_AB
  if { [ "$report_rc" -le 1 ] || [ "$report_rc" -eq 3 ]; } && [ -n "$ab_only" ]; then
    publish "$RUN/report"  # the screen; the A/B's report follows it
    # shellcheck disable=SC2086  # the targets are a list of flags
    confirm_ab "$BASELINE" "$RUN-ab" $ab_only
    ab_rc=$?
  fi
  if [ "$ab_rc" -ne "$NO_AB" ]; then
    report_rc=$ab_rc
  elif [ "$report_rc" -le 1 ] || [ "$report_rc" -eq 3 ]; then
    # No A/B: the comparison across nights is the verdict. Across nights the fast-step rate sees a slower
    # machine as sharply as slower code (docs/performance.md), so that verdict rests on throughput alone.
    log "no A/B confirmation: the baseline verdict stands, judged on throughput alone"
    # shellcheck disable=SC2086
    child nvbench report "$RUN" --baseline "$BASELINE" --out "$RUN/report" --fail-on-regression --no-fast-steps $REPORT_ARGS
    report_rc=$?
    publish "$RUN/report"
  else
    publish "$RUN/report"
  fi
elif [ -d "$HISTORY" ] && [ -n "$(ls -A "$HISTORY" 2>/dev/null)" ]; then
  log "screening against the history in $HISTORY"
  # shellcheck disable=SC2086
  child nvbench report "$RUN" --history "$HISTORY" --out "$RUN/report" $REPORT_ARGS
  report_rc=$?
  publish "$RUN/report"
  only=$(python -m harness.orchestrate.workflows.nightly targets "$RUN/report" 2>/dev/null)
  ab_only=$only
  if [ "$CONFIRM" = every ]; then ab_only="--only-all"; fi
  previous=$(ls -1d "$HISTORY"/*/ 2>/dev/null | sort | tail -n 1)
  ab_rc=$NO_AB
  if [ "$report_rc" -eq 0 ] && [ -n "$ab_only" ] && [ -n "$previous" ]; then
    # shellcheck disable=SC2086
    confirm_ab "$previous" "$RUN-ab" $ab_only
    ab_rc=$?
    if [ "$ab_rc" -ne "$NO_AB" ]; then report_rc=$ab_rc; fi
  fi
  if [ "$report_rc" -eq 0 ] && [ -n "$only" ] && [ "$ab_rc" -eq "$NO_AB" ]; then
    log "suspects: confirming with a rerun ($only) against ${previous:-nothing}"
    # shellcheck disable=SC2086
    child nvbench run "$MATRIX" --out "$RUN-confirm" --no-progress $only $RUN_ARGS
    if [ -n "$previous" ]; then
      # shellcheck disable=SC2086
      child nvbench report "$RUN-confirm" --baseline "$previous" --out "$RUN-confirm/report" --fail-on-regression \
        --no-fast-steps $REPORT_ARGS
      report_rc=$?
      publish "$RUN-confirm/report"
      LAST_REPORT="$RUN-confirm/report"
    fi
  fi
else
  log "no baseline ($BASELINE) and no history ($HISTORY): describing the run only"
  child nvbench report "$RUN" --out "$RUN/report"
  report_rc=$?
  publish "$RUN/report"
fi

# A work gate ([judge.work_gates] of the matrix) fails the night from one counted process, whatever the timing and
# its confirmation say: read from tonight's report against the baseline (where both sides counted work; the A/B
# confirms the timing). Unlike a timing regression it fails every night it stays broken: promote a baseline to
# accept it.
gate_rc=0
if [ -f "$RUN/report/verdicts.parquet" ]; then
  python -m harness.orchestrate.workflows.nightly gates "$RUN/report" >&2
  gate_rc=$?
fi

# A regression alarms once: the decisive report's regressions against the alarms still open from earlier nights
# ($REPORTS/alarms.json) and the acknowledged changes ($REPORTS/baselines/acks.json, `nvbench ack`). Only a new
# one, or one worse than when it opened (or than its acknowledgement), fails the night; the open and
# acknowledged ones are listed apart in summary.md and are skipped tests in junit.xml, and so is every other
# alarm still open, with tonight's reading; an alarm tonight shows gone or fixed is closed, said so.
if [ -f "$LAST_REPORT/verdicts.parquet" ] && { [ "$report_rc" -le 1 ] || [ "$report_rc" -eq 3 ]; }; then
  child python -m harness.orchestrate.workflows.nightly alarms "$LAST_REPORT" --reports "$REPORTS" --night "$RUN_ID" \
    ${GITHUB_STEP_SUMMARY:+--summary "$GITHUB_STEP_SUMMARY"}
  alarm_rc=$?
  case "$alarm_rc" in
    0|1|3) report_rc=$alarm_rc ;;
    130) log "interrupted during the alarm step"; exit 130 ;;
    *) log "the alarm step failed (exit $alarm_rc)"; report_rc=$alarm_rc ;;
  esac
fi

# The commit that did it (NVBENCH_BISECT, default work): an alarm opened tonight whose cell's counted work changed (a
# broken work gate's alarm among them) is bisected by work between the baseline's commit and tonight's, one counted process a cell a commit, within
# NVBENCH_BISECT_BUDGET_S (its estimate said first); auto also bisects the others by timed A/Bs. The culprit joins
# the alarm's record, summary.md and the night's last lines; the night's exit status is not changed by it.
if [ "$BISECT" != off ] && { [ "$report_rc" -eq 1 ] || [ "$gate_rc" -eq 1 ]; } && [ -e "$BASELINE" ]; then
  child python -m harness.orchestrate.workflows.nightly culprits --reports "$REPORTS" --night "$RUN_ID" --run "$RUN" \
    --baseline "$BASELINE" --matrix "$MATRIX" --repo "$ROOT" --mode "$BISECT" --budget-s "$BISECT_BUDGET_S" \
    --summary "$LAST_REPORT/summary.md" ${GITHUB_STEP_SUMMARY:+--summary "$GITHUB_STEP_SUMMARY"}
  culprit_rc=$?
  case "$culprit_rc" in
    0) ;;
    130) log "interrupted during the culprit step"; exit 130 ;;
    *) log "the culprit step failed (exit $culprit_rc): the night's verdict stands" ;;
  esac
fi

# Tonight joins the history (a link, not a copy); fire drills never do.
history_rc=0
case " $RUN_ARGS " in
  *" --fire-drill "*) log "fire drill: not added to the history" ;;
  *) mkdir -p "$HISTORY" && ln -sfn "$(cd "$RUN" && pwd)" "$HISTORY/$RUN_ID"
     # The trend over the history, tonight included: $RUN/history/history.html, changes.parquet, changes.md;
     # tonight's new change points join the summary, each with what the A/B of its commits said.
     no_ab=""
     if [ "$CONFIRM" = sequential ]; then no_ab="NVBENCH_CONFIRM=sequential: no A/B"; fi
     # shellcheck disable=SC2086  # REPORT_ARGS is a list of flags
     child python -m harness.orchestrate.workflows.nightly history "$HISTORY" "$RUN/history" --matrix "$MATRIX" --repo "$ROOT" \
       --reports "$REPORTS" --summary "$RUN/report/summary.md" ${GITHUB_STEP_SUMMARY:+--summary "$GITHUB_STEP_SUMMARY"} \
       ${no_ab:+--no-ab "$no_ab"} -- ${CONFIRM_REPEATS:+--repeats "$CONFIRM_REPEATS"} \
       ${CONFIRM_MAX_REPEATS:+--max-repeats "$CONFIRM_MAX_REPEATS"} $REPORT_ARGS
     history_rc=$?
     case "$history_rc" in
       0) ;;
       1) log "a change point new tonight is confirmed by A/B of its commits (see $RUN/history/changes.md)" ;;
       3) log "the history had nothing to judge (its line above says what it left out and why)"; history_rc=0 ;;
       130) log "interrupted during the history's A/B confirmation"; exit 130 ;;
       *) log "the history step failed (exit $history_rc): no trend page tonight"; history_rc=0 ;;
     esac
     # The dashboard over every night and the alarms open: $REPORTS/dashboard, a static site to publish.
     child nvbench dashboard "$REPORTS" --history "$HISTORY" --out "$REPORTS/dashboard" > /dev/null
     dashboard_rc=$?  # 3: written, with nothing in the history to judge (the history step's line says why)
     if [ "$dashboard_rc" -ne 0 ] && [ "$dashboard_rc" -ne 3 ]; then
       log "the dashboard could not be written (exit $dashboard_rc): the night's verdict stands"
     fi ;;
esac

if [ "$report_rc" -eq 2 ] || [ "$report_rc" -gt 3 ]; then exit "$report_rc"; fi
if [ -f "$RUN/culprits.json" ]; then python -m harness.orchestrate.workflows.nightly culprit-lines "$RUN" >&2; fi
if [ "$report_rc" -eq 1 ]; then log "confirmed regression (new or worse) or failed cells"; exit 1; fi
if [ "$gate_rc" -eq 1 ]; then log "a work gate is broken (counted work, whatever the timing): see above"; exit 1; fi
if [ "$gate_rc" -ne 0 ]; then log "the work gate step failed (exit $gate_rc)"; exit "$gate_rc"; fi
if [ "$history_rc" -eq 1 ]; then log "confirmed change point"; exit 1; fi
if [ "$run_rc" -eq 1 ]; then log "cells failed (see the report's failed and skipped cells)"; exit 1; fi
if [ "$report_rc" -eq 3 ]; then
  # Last and loud: the night could not tell for these cells; absence of evidence is not a pass.
  log "INCONCLUSIVE: nothing regressed, but these cells could not be decided (more repeats would, or a quiet machine where it was busy):"
  python -m harness.orchestrate.workflows.nightly inconclusive "$LAST_REPORT" >&2
  exit 3
fi
log "ok"
exit 0
