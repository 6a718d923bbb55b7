#!/usr/bin/env bash
# A rank fails in the middle of a run: do the other ranks stop by themselves, soon, and name it?
# (issue 16's failure detection, tools/gpu/acceptance.sh steps 13-14; docs/validation/robustness.md)
#
#   tools/gpu/peer_failure.sh [--signal STOP|KILL] [--victim R] [--after S] [--within S] MESHSIM N ARGS...
#
# Starts N ranks of `MESHSIM ARGS...` by hand, with no launcher watching them (a launcher
# would see the failure itself and stop the rest), so only the ranks' own detection acts:
# the store's heartbeat verdict, the transports' and the cuda watchdog's polls of it, NCCL's
# own errors. Each rank is its own NCCL host (as in one_gpu_ranks.sh), so on one GPU NCCL
# connects them over loopback sockets. --after S seconds (default 8) after the start, rank R
# (default 2) gets SIGSTOP (default; it keeps its sockets open: only its silence tells) or
# SIGKILL. Prints, for every other rank, its exit status, the seconds from the signal to its
# exit and its last line; then kills whatever is left.
# Exit 0 when every other rank exited non-zero within --within S seconds (default 12) of the
# signal, each naming "rank R"; 1 when one did not (said why); 2: usage.
set -uo pipefail

signal=STOP
victim=2
after=8
within=12
while [ $# -gt 0 ]; do
  case "$1" in
    --signal) signal="$2"; shift 2 ;;
    --victim) victim="$2"; shift 2 ;;
    --after) after="$2"; shift 2 ;;
    --within) within="$2"; shift 2 ;;
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "peer_failure: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) break ;;
  esac
done
[ $# -ge 3 ] || { echo "usage: peer_failure.sh [--signal STOP|KILL] [--victim R] [--after S] [--within S] MESHSIM N ARGS..." >&2; exit 2; }
case "$signal" in STOP|KILL) ;; *) echo "peer_failure: --signal takes STOP or KILL, not '$signal'" >&2; exit 2 ;; esac
meshsim="$1"
n="$2"
shift 2
[[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 2 ] || { echo "peer_failure: N must be a whole number >= 2, not '$n'" >&2; exit 2; }
[[ "$victim" =~ ^[0-9]+$ ]] && [ "$victim" -lt "$n" ] || { echo "peer_failure: --victim must be a rank below $n, not '$victim'" >&2; exit 2; }

now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.1f", b - a}'; }
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -CONT "$p" 2>/dev/null; kill -KILL "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export MESHSIM_WORLD_SIZE="$n" MESHSIM_MASTER_ADDR=127.0.0.1 MESHSIM_MASTER_PORT="$port"
export MESHSIM_TOKEN="peer-failure-$$-$RANDOM"
export NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 NCCL_NET=Socket
# Each rank runs in a subshell that records its exit status and time in rank-R.end; the
# rank's own pid (the one signalled) is in rank-R.pid.
for ((r = 0; r < n; r++)); do
  (
    MESHSIM_RANK=$r NCCL_HOSTID="meshsim-rank-$r" "$meshsim" "$@" >"$tmp/rank-$r.log" 2>&1 &
    echo $! >"$tmp/rank-$r.pid"
    wait $! 2>/dev/null
    echo "$? $(now)" >"$tmp/rank-$r.end"
  ) &
  pids+=($!)
done
for ((r = 0; r < n; r++)); do
  until [ -s "$tmp/rank-$r.pid" ]; do sleep 0.05; done
  pids+=("$(cat "$tmp/rank-$r.pid")")
done

sleep "$after"
for ((r = 0; r < n; r++)); do
  if [ -e "$tmp/rank-$r.end" ]; then
    echo "peer_failure: rank $r ended before the signal (exit $(cut -d' ' -f1 "$tmp/rank-$r.end")): give a longer workload or a shorter --after; its output:"
    tail -5 "$tmp/rank-$r.log"
    exit 1
  fi
done
t_sig=$(now)
kill -"$signal" "$(cat "$tmp/rank-$victim.pid")"
echo "peer_failure: SIG$signal to rank $victim of $n, $after s after the start"

deadline=$(awk -v t="$t_sig" -v w="$within" 'BEGIN {printf "%.3f", t + w}')
while true; do
  left=0
  for ((r = 0; r < n; r++)); do [ "$r" -eq "$victim" ] || [ -e "$tmp/rank-$r.end" ] || left=$((left + 1)); done
  [ "$left" -gt 0 ] || break
  awk -v a="$(now)" -v d="$deadline" 'BEGIN {exit !(a < d)}' || break
  sleep 0.1
done

ok=1
for ((r = 0; r < n; r++)); do
  [ "$r" -ne "$victim" ] || continue
  last=$(grep -v '^\s*$' "$tmp/rank-$r.log" | tail -1)
  if [ ! -e "$tmp/rank-$r.end" ]; then
    echo "rank $r: still running $within s after the signal (FAIL); last line: $last"
    ok=0
    continue
  fi
  read -r rc t_end <"$tmp/rank-$r.end"
  verdict=ok
  if [ "$rc" -eq 0 ]; then verdict="FAIL: exit 0 (it did not notice)"; ok=0
  elif ! grep -q "rank $victim\b" "$tmp/rank-$r.log"; then verdict="FAIL: its output does not name rank $victim"; ok=0
  fi
  echo "rank $r: exit $rc after $(secs "$t_sig" "$t_end") s ($verdict): $last"
done
if [ "$ok" -eq 1 ]; then
  echo "peer_failure: PASS: every other rank stopped within $within s of SIG$signal to rank $victim, naming it"
  exit 0
fi
echo "peer_failure: FAIL (whole logs follow)"
for ((r = 0; r < n; r++)); do echo "--- rank $r"; tail -20 "$tmp/rank-$r.log"; done
# Where a rank that did not stop is waiting: each thread's state and kernel wait channel, and
# its stack where gdb is installed.
for ((r = 0; r < n; r++)); do
  [ "$r" -ne "$victim" ] && [ ! -e "$tmp/rank-$r.end" ] || continue
  pid=$(cat "$tmp/rank-$r.pid")
  echo "--- rank $r (pid $pid) still running: its threads (name, state, wait channel)"
  for t in /proc/"$pid"/task/*; do
    echo "  $(cat "$t/comm" 2>/dev/null) $(awk '{print $3}' "$t/stat" 2>/dev/null) $(cat "$t/wchan" 2>/dev/null)"
  done
  if command -v gdb >/dev/null 2>&1; then
    timeout 30 gdb -q -batch -p "$pid" -ex 'thread apply all bt 12' 2>&1 | grep -E '^(Thread|#)' | head -80
  else
    echo "  (no gdb here for the stacks)"
  fi
done
exit 1
