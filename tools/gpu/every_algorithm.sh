#!/usr/bin/env bash
# Every algorithm of the registry for the given collective kinds, run for real with its
# numerics checked (tools/gpu/acceptance.sh steps 15 and 16; also runs with the cpu backend):
#
#   tools/gpu/every_algorithm.sh [--kinds K1,K2,...] MESHSIM N TOPOLOGY [RUN ARGS...]
#
# Kinds: allreduce, allgather, reducescatter, broadcast, reduce, alltoall (default: all six).
# For each kind K and each algorithm `meshsim algorithms` lists for K, starts N ranks of
# `meshsim run examples/scenarios/allreduce-cpu.yaml --set workload.collective=K
# --set workload.algorithm=A --set topology=TOPOLOGY --json RUN ARGS...` through
# tools/gpu/one_gpu_ranks.sh (each rank its own NCCL host) and reads the JSON:
# numerics_checked must be true and max_abs_error 0 (every executor runs the same step
# program as the serial reference, so the results are the same bit for bit). An algorithm the
# topology cannot run (nvls without a reducing switch) is listed as such, not failed. Prints
# one line per (kind, algorithm) and a verdict line starting with "every_algorithm: PASS" (or
# the name in $EVERY_NAME; tools/gpu/every_allreduce.sh sets it); exit 0 when every runnable
# one passed, 1 otherwise, 2: usage.
set -uo pipefail
name="${EVERY_NAME:-every_algorithm}"
kinds="allreduce,allgather,reducescatter,broadcast,reduce,alltoall"
if [ "${1:-}" = "--kinds" ]; then
  [ $# -ge 2 ] || { echo "$name: --kinds takes a comma-separated list" >&2; exit 2; }
  kinds="$2"
  shift 2
fi
[ $# -ge 3 ] || { echo "usage: $name.sh [--kinds K1,K2,...] MESHSIM N TOPOLOGY [RUN ARGS...]" >&2; exit 2; }
meshsim="$1"
n="$2"
topology="$3"
shift 3
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
listing=$("$meshsim" algorithms) || { echo "$name: '$meshsim algorithms' failed" >&2; exit 2; }
pairs=()
for k in ${kinds//,/ }; do
  case "$k" in allreduce|allgather|reducescatter|broadcast|reduce|alltoall) ;;
    *) echo "$name: --kinds: '$k' is not one of allreduce, allgather, reducescatter, broadcast, reduce, alltoall" >&2; exit 2 ;;
  esac
  algos=$(awk -v k="$k" '{  # NAME KIND, KIND, ... DESCRIPTION
    for (i = 2; i <= NF; i++) { t = $i; more = sub(/,$/, "", t); if (t == k) print $1; if (!more) break } }' <<<"$listing")
  [ -n "$algos" ] || { echo "$name: '$meshsim algorithms' lists no $k algorithm" >&2; exit 2; }
  for a in $algos; do pairs+=("$k:$a"); done
done
failed=0
ran=0
for pair in "${pairs[@]}"; do
  k="${pair%%:*}"
  a="${pair#*:}"
  out=$("$here/one_gpu_ranks.sh" "$meshsim" "$n" run "$root/examples/scenarios/allreduce-cpu.yaml" \
    --set "workload.collective=$k" --set "workload.algorithm=$a" --set "topology=$topology" --json "$@" 2>&1)
  rc=$?
  if [ "$rc" -ne 0 ] && grep -q "cannot run\|unavailable\|no switch that reduces\|reduce_efficiency" <<<"$out"; then
    echo "$k $a: not runnable on $topology: $(grep -m1 'error' <<<"$out")"
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
    echo "$k $a: ok ($verdict)"
  else
    failed=1
    echo "$k $a: FAIL (exit $rc; $verdict); its output:"
    tail -5 <<<"$out"
  fi
done
[ "$ran" -gt 0 ] || { echo "$name: no algorithm ran"; exit 1; }
[ "$failed" -eq 0 ] && echo "$name: PASS: $ran algorithms ($kinds), numerics exact" || echo "$name: FAIL"
exit "$failed"
