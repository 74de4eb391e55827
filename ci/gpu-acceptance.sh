#!/usr/bin/env bash
# One command that proves a GPU build end to end (see ci/gpu_acceptance.py for what it runs):
#   bash ci/gpu-acceptance.sh [OUT_DIR] [--budget-s 540]
# Writes OUT_DIR/gpu-acceptance.md and .json. Without a GPU it runs the CPU-meaningful part and exits 0
# when that passed. Run from the project root with the interpreter that has nvbench's dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."
exec "${PYTHON:-python3}" ci/gpu_acceptance.py "$@"
