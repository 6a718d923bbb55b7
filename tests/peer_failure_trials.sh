#!/usr/bin/env bash
# Blame, repeated (issue 40: "blame names the stopped or killed rank in 10 of 10 trials"):
# runs tools/gpu/peer_failure.sh TRIALS times on 3 cpu-backend ranks, alternating SIGKILL and
# SIGSTOP and the victim (rank 2, rank 1), and passes only when in every trial every other
# rank stopped within the script's limit and its last line, the error it ends with, names the
# victim: one verdict, not a rank blaming whichever peer happened to close first.
#
#   tests/peer_failure_trials.sh MESHSIM [TRIALS]        (from the source directory)
set -uo pipefail
meshsim="$1"
trials="${2:-10}"
here="$(cd "$(dirname "$0")/.." && pwd)"
pass=0
for ((t = 0; t < trials; t++)); do
  signal=$([ $((t % 2)) -eq 0 ] && echo KILL || echo STOP)
  victim=$([ $(((t / 2) % 2)) -eq 0 ] && echo 2 || echo 1)
  out=$(bash "$here/tools/gpu/peer_failure.sh" --signal "$signal" --victim "$victim" --after 1.5 \
          "$meshsim" 3 run "$here/examples/scenarios/allreduce-cpu.yaml" --timeout 60 \
          --set workload.iterations=100000 --set workload.bytes=1MiB 2>&1)
  rc=$?
  blamed=1
  while IFS= read -r line; do
    last="${line#*: meshsim: error: }"
    [[ "$last" =~ rank\ $victim[^0-9] ]] || { blamed=0; echo "trial $t: does not name rank $victim: $line"; }
  done < <(grep -E '^rank [0-9]+: exit' <<<"$out")
  if [ "$rc" -eq 0 ] && [ "$blamed" -eq 1 ]; then
    pass=$((pass + 1))
    echo "trial $t: SIG$signal to rank $victim: every other rank named it"
  else
    echo "trial $t: SIG$signal to rank $victim: FAIL"
    echo "$out" | tail -20
  fi
done
echo "peer_failure_trials: $pass of $trials trials named the failed rank"
[ "$pass" -eq "$trials" ]
