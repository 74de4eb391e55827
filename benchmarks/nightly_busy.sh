#!/usr/bin/env bash
# Issue 58's nightly acceptance by hand: ci/nightly.sh of the suite's tiny cell (3 repeats a night), each night pinned
# to one core. Night 1 is the baseline; night 2 a +300 % fire drill (its alarm opens), then acknowledged; night 3,
# undrilled, runs beside a busy loop on the same core for the whole night. Prints each night's exit and wall time and
# whether the alarms and acknowledgements are as they were before night 3.
#
#   bash benchmarks/nightly_busy.sh /tmp/nb        # ~1.5 min on the 2-core machine; nothing else may run beside it
set -u
OUT=${1:?usage: nightly_busy.sh OUT_DIR}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CORE=${CORE:-0}
cd "$ROOT"
rm -rf "$OUT" && mkdir -p "$OUT/reports"
R=$OUT/reports
python - "$OUT" <<'PY'
import sys
sys.path.insert(0, "tests")
from conftest import TINY  # the suite's tiny cell: resnet18, 16 px, batch 4, 3 steps
out = sys.argv[1]
open(f"{out}/tiny.toml", "w").write(TINY.format(axes='backend = ["synthetic"]', repeats=3, timeout=120,
                                                cache=f"{out}/cache", nvtx="false", device="cpu"))
PY
export NVBENCH_MATRIX=$OUT/tiny.toml NVBENCH_REPORTS=$R NVBENCH_REPEATS=3 NVBENCH_CONFIRM=sequential NVBENCH_SLOTS=1 \
  NVBENCH_REPORT_ARGS="--min-repeats 3 --fdr 0.1 --no-speed-adjust" NVBENCH_WORK_REPEATS=0
night() {
  local id=$1; shift
  local t0; t0=$(date +%s.%N)
  env NVBENCH_RUN_ID="$id" "$@" taskset -c "$CORE" bash ci/nightly.sh > "$OUT/$id.out" 2> "$OUT/$id.err"
  local rc=$?
  echo "$id exit $rc, $(python -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$t0" "$(date +%s.%N)") s"
}
night night1
mkdir -p "$R/baselines" && echo "../night1" > "$R/baselines/current"
night night2 NVBENCH_RUN_ARGS="--fire-drill 300"
python -m harness ack backend=synthetic --reason "rehearsal" --reports "$R" 2>&1 | tail -1
cp "$R/alarms.json" "$OUT/alarms-before.json"
cp "$R/baselines/acks.json" "$OUT/acks-before.json"
taskset -c "$CORE" python -c "while True: pass" &
NEIGHBOUR=$!
night night3
kill "$NEIGHBOUR"
python - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
before, after = (json.load(open(p)) for p in (f"{out}/alarms-before.json", f"{out}/reports/alarms.json"))
print("alarms (open, events) as before night3:", before["open"] == after["open"] and before["events"] == after["events"])
same = open(f"{out}/acks-before.json", "rb").read() == open(f"{out}/reports/baselines/acks.json", "rb").read()
print("acknowledgements as before night3:", same)
PY
grep -E "^OPEN|^FIXED|^GONE" "$OUT/night3.err"
tail -1 "$OUT/night3.err"
