#!/usr/bin/env bash
# Every all-reduce algorithm of the registry, run for real with its numerics checked
# (tools/gpu/acceptance.sh step 15; also runs with the cpu backend):
#
#   tools/gpu/every_allreduce.sh MESHSIM N TOPOLOGY [RUN ARGS...]
#
# For each algorithm `meshsim algorithms` lists for allreduce, starts N ranks of
# `meshsim run examples/scenarios/allreduce-cpu.yaml --set workload.algorithm=A
# --set topology=TOPOLOGY --json RUN ARGS...` through tools/gpu/one_gpu_ranks.sh (each rank
# its own NCCL host) and reads the JSON: numerics_checked must be true and max_abs_error 0
# (every executor runs the same step program as the serial reference, so the sums are the
# same bit for bit). An algorithm the topology cannot run (nvls without a reducing switch) is
# listed as such, not failed. Prints one line per algorithm; exit 0 when every runnable one
# passed, 1 otherwise, 2: usage.
set -uo pipefail
[ $# -ge 3 ] || { echo "usage: every_allreduce.sh MESHSIM N TOPOLOGY [RUN ARGS...]" >&2; exit 2; }
meshsim="$1"
n="$2"
topology="$3"
shift 3
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
algos=$("$meshsim" algorithms | awk '$2 ~ /allreduce/ {print $1}')
[ -n "$algos" ] || { echo "every_allreduce: '$meshsim algorithms' lists no allreduce algorithm" >&2; exit 2; }
failed=0
ran=0
for a in $algos; do
  out=$("$here/one_gpu_ranks.sh" "$meshsim" "$n" run "$root/examples/scenarios/allreduce-cpu.yaml" \
    --set "workload.algorithm=$a" --set "topology=$topology" --json "$@" 2>&1)
  rc=$?
  if [ "$rc" -ne 0 ] && grep -q "cannot run\|unavailable\|no switch that reduces\|reduce_efficiency" <<<"$out"; then
    echo "$a: not runnable on $topology: $(grep -m1 'error' <<<"$out")"
    continue
  fi
  verdict=$(python3 -c '
import json, sys
text = sys.stdin.read()
try:
    j = json.JSONDecoder().raw_decode(text[text.index("{"):])[0]
except ValueError:
    print("no JSON result"); sys.exit(1)
ok = j.get("numerics_checked") is True and j.get("max_abs_error", 1) == 0
print("numerics checked: %s, max |error| %g" % (j.get("numerics_checked"), j.get("max_abs_error", float("nan"))))
sys.exit(0 if ok else 1)' <<<"$out")
  vrc=$?
  ran=$((ran + 1))
  if [ "$rc" -eq 0 ] && [ "$vrc" -eq 0 ]; then
    echo "$a: ok ($verdict)"
  else
    failed=1
    echo "$a: FAIL (exit $rc; $verdict); its output:"
    tail -5 <<<"$out"
  fi
done
[ "$ran" -gt 0 ] || { echo "every_allreduce: no algorithm ran"; exit 1; }
[ "$failed" -eq 0 ] && echo "every_allreduce: PASS: $ran algorithms, numerics exact" || echo "every_allreduce: FAIL"
exit "$failed"
