#!/usr/bin/env bash
# A pull request judged against its base on the same runner, in the same job: `nvbench ab --base`, side A the
# base's code (a git worktree nvbench makes and removes), side B this checkout, in interleaved pairs, each cell's
# work counted in one process a side. Writes $NVBENCH_OUT/pr-comment.md (ci/pr_comment.py: every cell's work line
# first, exact; the timed verdicts with their intervals; what could not be told and the repeats that would) and
# appends it to $GITHUB_STEP_SUMMARY where that is set; the A/B folder is the step output `report_dir`
# (report/junit.xml, report/report.html inside). ci/README.md, "Pull requests".
#
#   NVBENCH_MATRIX=matrices/resnet50.toml NVBENCH_ONLY="world_size=1" bash ci/pull-request.sh
#
# Exit: 1 a confirmed regression, a failed cell or a broken work gate ([judge.work_gates] of the matrix); 3 nothing
# regressed but some cell stayed inconclusive (the job could not tell: the comment says how many repeats would);
# 0 otherwise; 2 bad input (a base that does not resolve, a checkout outside git); 130 interrupted (SIGTERM, SIGINT
# or SIGHUP stop the A/B as Ctrl-C does, and its worktree is removed).
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON=${PYTHON:-python}
MATRIX=${NVBENCH_MATRIX:-matrices/resnet50.toml}
ONLY=${NVBENCH_ONLY:-}                    # space-separated AXIS=VALUE filters (nvbench ab --only each)
REPEATS=${NVBENCH_REPEATS-10}             # first pairs a cell; empty = the matrix's run.repeats
MAX_REPEATS=${NVBENCH_MAX_REPEATS-20}     # pairs an inconclusive cell may grow to; empty = no more
AB_ARGS=${NVBENCH_AB_ARGS:-}              # more nvbench ab flags, e.g. "--kernel-repeats 0" or "--floor 2"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"  # side B is this checkout, whatever nvbench is installed

log() { echo "pull-request: $*" >&2; }

if ! HEAD_SHA=$(git -C "$ROOT" rev-parse HEAD 2>/dev/null); then
  log "$ROOT is not a git checkout: a pull request is judged against a commit of its repository"; exit 2
fi
BASE=${NVBENCH_BASE:-}  # nvbench ab --base: A runs the merge-base of HEAD and it
if [ -z "$BASE" ]; then
  if git -C "$ROOT" rev-parse --verify -q origin/HEAD >/dev/null; then BASE=origin/HEAD; else BASE=main; fi
fi
OUT=${NVBENCH_OUT:-reports/pr-${HEAD_SHA:0:12}}

# Stopping: the A/B runs as a child this shell waits for, so a stop signal reaches it at once: it stops as on Ctrl-C
# (its cells end, its worktree is removed) and the job exits 130. It also gets SIGTERM if this shell is SIGKILLed.
DIE_WITH_ME=()
if setpriv --pdeathsig TERM true >/dev/null 2>&1; then DIE_WITH_ME=(setpriv --pdeathsig TERM); fi
CHILD=""
stop() {
  trap '' TERM INT HUP
  if [ -n "$CHILD" ]; then kill -TERM "$CHILD" 2>/dev/null; wait "$CHILD"; fi
  log "stopped by SIG$1; the pairs so far are in $OUT (nvbench ab --resume $OUT finishes them)"
  exit 130
}
trap 'stop TERM' TERM
trap 'stop INT' INT
trap 'stop HUP' HUP

ONLY_ARGS=()
for filter in $ONLY; do ONLY_ARGS+=(--only "$filter"); done
log "A/B of $HEAD_SHA (B, this checkout) against the merge-base of HEAD and $BASE (A), into $OUT"
# shellcheck disable=SC2086  # AB_ARGS is a list of flags
"${DIE_WITH_ME[@]}" "$PYTHON" -m harness ab "$MATRIX" --base "$BASE" --out "$OUT" "${ONLY_ARGS[@]}" \
  ${REPEATS:+--repeats "$REPEATS"} ${MAX_REPEATS:+--max-repeats "$MAX_REPEATS"} --fail-on-regression $AB_ARGS &
CHILD=$!
wait "$CHILD"
rc=$?
CHILD=""
if [ "$rc" -eq 2 ] || [ "$rc" -eq 130 ] || [ ! -f "$OUT/ab.json" ]; then
  log "nvbench ab exited $rc before it judged anything: no comment"
  exit "$rc"
fi

"$PYTHON" "$ROOT/ci/pr_comment.py" "$OUT" "$rc" >/dev/null
final=$?
if [ -f "$OUT/pr-comment.md" ]; then
  if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then cat "$OUT/pr-comment.md" >> "$GITHUB_STEP_SUMMARY"; fi
  cat "$OUT/pr-comment.md"
fi
if [ -n "${GITHUB_OUTPUT:-}" ]; then echo "report_dir=$OUT" >> "$GITHUB_OUTPUT"; fi
log "exit $final (nvbench ab: $rc)"
exit "$final"
