#!/usr/bin/env bash
# Every command that writes a trace writes a well-formed one (issue 37: one time unit, a name for
# every track, no mis-nested slices; tools/check_trace.py says what it checks): simulate (the op
# level, a pipeline), collective (flows), validate on the cpu backend (a training step and a
# collective workload: measured and predicted side by side).
#   tests/traces_test.sh MESHSIM_BINARY
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$root"
"$bin" simulate examples/scenarios/gpt3-175b-1024xh100.yaml --set parallel.microbatches=8 --trace "$work/simulate.json" >/dev/null 2>&1
"$bin" collective allreduce -n 8 -b 64MiB --trace "$work/collective.json" >/dev/null
"$bin" validate examples/scenarios/tiny-gpt-cpu.yaml --trace "$work/validate-training.json" >/dev/null 2>&1
"$bin" validate examples/scenarios/allreduce-cpu.yaml -n 4 --trace "$work/validate-collective.json" >/dev/null 2>&1
python3 "$root/tools/check_trace.py" "$work"/*.json
