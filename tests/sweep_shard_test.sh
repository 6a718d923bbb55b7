#!/usr/bin/env bash
# sweep beyond one machine (report/sweep_run.h, docs/scenarios.md "Sweeps across machines"):
#   sweep_shard_test.sh MESHSIM shard   --shard K/N runs merged by sweep-merge print and write
#                                        exactly what the whole sweep does; bad shards are one
#                                        clear error each
#   sweep_shard_test.sh MESHSIM mpi     mpirun -np 2 and 3 give the single-process bytes; a bad
#                                        flag, an unwritable file or a missing plugin under
#                                        mpirun is one error line, never a hang, and a rank
#                                        stopped mid-sweep is named within seconds (SKIP, 77,
#                                        without mpirun or libmeshsim_mpi.so)
# Run from the source directory (the example scenario's path is relative).
set -u
M=$1
mode=$2
S=examples/scenarios/gpt3-175b-1024xh100.yaml
# 72 variants: fitting, out-of-memory and invalid ones.
args=(sweep "$S" --fidelity formula --vary parallel.tp=1,2,4,8 --vary parallel.pp=4,8,16 --vary parallel.dp=8,16,32
      --vary parallel.zero=0,3)
. "$(dirname "$0")/cli_test_lib.sh"
# expect_error WANT COMMAND...: exits 2 with exactly one stderr line containing WANT
expect_error() {
  local want=$1
  shift
  timeout 120 "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  [ "$rc" -ne 0 ] || fail "expected an error from: $*"
  [ "$rc" -ne 124 ] || fail "hung: $*"
  grep -q -- "$want" "$tmp/err" || { cat "$tmp/err"; fail "no '$want' in the error of: $*"; }
  local n
  n=$(grep -c "meshsim: error" "$tmp/err")
  [ "$n" -eq 1 ] || { cat "$tmp/err"; fail "$n error lines (want 1) from: $*"; }
  echo "ok: $(grep "meshsim: error" "$tmp/err")"
}

"$M" "${args[@]}" --csv "$tmp/one.csv" --jsonl "$tmp/one.jsonl" >"$tmp/one.txt" 2>/dev/null || fail "the single sweep"
"$M" "${args[@]}" --json >"$tmp/one.json" || fail "the single sweep --json"
"$M" "${args[@]}" --report "$tmp/one.html" >/dev/null 2>&1 || fail "the single sweep --report"
grep -q "72 variants:" "$tmp/one.txt" || fail "the single sweep has no 72-variant summary"

if [ "$mode" = shard ]; then
  for n in 2 3; do
    for ((k = 0; k < n; k++)); do
      "$M" "${args[@]}" --shard "$k/$n" --jsonl "$tmp/p$k-$n.jsonl" --csv "$tmp/p$k-$n.csv" >/dev/null 2>&1 ||
        fail "--shard $k/$n"
    done
  done
  # the shards in any order: the whole sweep's table, CSV, JSON lines and --json
  "$M" sweep-merge "$tmp/p1-2.jsonl" "$tmp/p0-2.jsonl" --csv "$tmp/m.csv" --jsonl "$tmp/m.jsonl" >"$tmp/m.txt" 2>/dev/null ||
    fail "merge 2"
  same "$tmp/one.txt" "$tmp/m.txt" "merged 0/2+1/2 and single-process ranked output"
  same "$tmp/one.csv" "$tmp/m.csv" "merged and single-process --csv"
  same "$tmp/one.jsonl" "$tmp/m.jsonl" "merged and single-process --jsonl"
  "$M" sweep-merge "$tmp/p0-2.jsonl" "$tmp/p1-2.jsonl" --report "$tmp/m.html" >/dev/null 2>&1 || fail "merge --report"
  same "$tmp/one.html" "$tmp/m.html" "merged and single-process --report"
  "$M" sweep-merge "$tmp/p2-3.jsonl" "$tmp/p0-3.jsonl" "$tmp/p1-3.jsonl" --json >"$tmp/m3.json" || fail "merge 3"
  same "$tmp/one.json" "$tmp/m3.json" "merged 3 shards and single-process --json"
  head -1 "$tmp/p0-2.csv" | grep -q '^index,variant,' || fail "a shard's CSV has no index column"
  sed -n 2p "$tmp/p1-2.jsonl" | grep -q '^{"index":1,' || fail "a shard's JSON lines have no index"
  echo "ok: --shard 0/2 + 1/2 and 0/3 + 1/3 + 2/3 merged = the single sweep (table, --csv, --jsonl, --json, --report)"
  # bad --shard values
  expect_error "is not K/N" "$M" "${args[@]}" --shard 1 --jsonl "$tmp/x.jsonl"
  expect_error "is not K/N" "$M" "${args[@]}" --shard -1/2 --jsonl "$tmp/x.jsonl"
  expect_error "K counts from 0" "$M" "${args[@]}" --shard 2/2 --jsonl "$tmp/x.jsonl"
  expect_error "N must be at least 1" "$M" "${args[@]}" --shard 0/0 --jsonl "$tmp/x.jsonl"
  expect_error "add --jsonl" "$M" "${args[@]}" --shard 0/2
  # shards that do not belong together
  expect_error "shard 1/2 is missing" "$M" sweep-merge "$tmp/p0-2.jsonl"
  expect_error "shards 0/3, 2/3 are missing" "$M" sweep-merge "$tmp/p1-3.jsonl"
  expect_error "both shard 0/2" "$M" sweep-merge "$tmp/p0-2.jsonl" "$tmp/p0-2.jsonl" "$tmp/p1-2.jsonl"
  expect_error "is shard 0/3" "$M" sweep-merge "$tmp/p0-2.jsonl" "$tmp/p0-3.jsonl"
  "$M" "${args[@]}" --set parallel.microbatches=32 --shard 1/2 --jsonl "$tmp/other.jsonl" >/dev/null 2>&1
  expect_error "different sweeps" "$M" sweep-merge "$tmp/p0-2.jsonl" "$tmp/other.jsonl"
  head -n -3 "$tmp/p1-2.jsonl" >"$tmp/cut.jsonl"
  expect_error "33 of the 36 rows of shard 1/2" "$M" sweep-merge "$tmp/p0-2.jsonl" "$tmp/cut.jsonl"
  expect_error "not a sweep shard" "$M" sweep-merge "$tmp/one.jsonl"
  expect_error "cannot read" "$M" sweep-merge "$tmp/nonexistent.jsonl"
  # started by a launcher without the MPI plugin: one line with the fix; outside one, no plugin is looked for
  OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=0 MESHSIM_MPI_PLUGIN=$tmp/nonexistent.so \
    expect_error "cannot load the MPI plugin .*apt-get install libopenmpi-dev openmpi-bin" "$M" "${args[@]}"
  MESHSIM_MPI_PLUGIN=$tmp/nonexistent.so "$M" "${args[@]}" 2>/dev/null | cmp -s - "$tmp/one.txt" ||
    fail "outside a launcher the MPI plugin setting changed the sweep"
  echo "PASS"
  exit 0
fi

# mode mpi
need_mpi "$M"
run() { timeout 300 "$MPIRUN" --oversubscribe "$@"; }
MPI=("$MPIRUN" --oversubscribe)
run -np 2 "$M" "${args[@]}" --csv "$tmp/r2.csv" --jsonl "$tmp/r2.jsonl" >"$tmp/r2.txt" 2>"$tmp/r2.err" ||
  { cat "$tmp/r2.err"; fail "mpirun -np 2"; }
same "$tmp/one.txt" "$tmp/r2.txt" "mpirun -np 2 and single-process ranked output"
same "$tmp/one.csv" "$tmp/r2.csv" "mpirun -np 2 and single-process --csv"
same "$tmp/one.jsonl" "$tmp/r2.jsonl" "mpirun -np 2 and single-process --jsonl"
run -np 3 "$M" "${args[@]}" --json >"$tmp/r3.json" 2>"$tmp/r3.err" || { cat "$tmp/r3.err"; fail "mpirun -np 3"; }
same "$tmp/one.json" "$tmp/r3.json" "mpirun -np 3 and single-process --json"
run -np 2 "$M" "${args[@]}" --report "$tmp/r2.html" >/dev/null 2>&1 || fail "mpirun -np 2 --report"
same "$tmp/one.html" "$tmp/r2.html" "mpirun -np 2 and single-process --report"
# a shard under mpirun: the same shard file as one process writes
"$M" "${args[@]}" --shard 1/2 --jsonl "$tmp/s1.jsonl" >"$tmp/s1.txt" 2>/dev/null
run -np 2 "$M" "${args[@]}" --shard 1/2 --jsonl "$tmp/s1r.jsonl" >"$tmp/s1r.txt" 2>/dev/null || fail "mpirun --shard"
same "$tmp/s1.jsonl" "$tmp/s1r.jsonl" "mpirun -np 2 --shard 1/2 and single-process --shard 1/2 files"
same "$tmp/s1.txt" "$tmp/s1r.txt" "mpirun -np 2 --shard 1/2 and single-process --shard 1/2 output"
echo "ok: mpirun -np 2 and -np 3 = the single sweep (table, --csv, --jsonl, --json, --report, --shard)"
expect_error "K counts from 0" "${MPI[@]}" -np 2 "$M" "${args[@]}" --shard 5/2 --jsonl "$tmp/x.jsonl"
expect_error "--csv: cannot write" "${MPI[@]}" -np 2 "$M" "${args[@]}" --csv "$tmp/no/such/dir/x.csv"
MESHSIM_MPI_PLUGIN=$tmp/nonexistent.so expect_error "cannot load the MPI plugin" "${MPI[@]}" -np 2 "$M" "${args[@]}"
# a rank stopped mid-sweep (SIGSTOP): the others are not left in MPI_Gather for ever; rank 0's
# store names it after MESHSIM_HEARTBEAT_TIMEOUT and every rank exits (status 2)
long=(sweep "$S" --fidelity formula --vary parallel.tp=1,2,4,8 --vary parallel.pp=1,2,4,8,16
      --vary parallel.microbatches=8,16,32,64,128 --vary parallel.micro_batch_size=1,2 --vary parallel.zero=0,1
      --vary model.layers=48,96 --vary parallel.sp=true,false)
MESHSIM_HEARTBEAT_TIMEOUT=2 timeout 120 "$MPIRUN" --oversubscribe -np 3 sh -c \
  'echo $$ >"$0/pid.$OMPI_COMM_WORLD_RANK"; exec "$@"' "$tmp" "$M" "${long[@]}" \
  >/dev/null 2>"$tmp/stop.err" &
mpi_pid=$!
for _ in $(seq 100); do [ -s "$tmp/pid.2" ] && break; sleep 0.1; done
sleep 2
kill -STOP "$(cat "$tmp/pid.2")" || fail "could not stop rank 2"
stopped=$(date +%s)
wait "$mpi_pid" && fail "mpirun with rank 2 stopped exited 0"
took=$(( $(date +%s) - stopped ))
grep -q "sweep: rank 2 stopped answering for 2 s" "$tmp/stop.err" || { cat "$tmp/stop.err"; fail "a stopped rank not named"; }
[ "$took" -le 15 ] || fail "a stopped rank took ${took} s to stop the sweep"
echo "ok: rank 2 stopped under mpirun: named, every rank gone ${took} s later"
MESHSIM_MPI=0 run -np 2 "$M" "${args[@]}" >"$tmp/off.txt" 2>/dev/null || fail "MESHSIM_MPI=0 under mpirun"
[ "$(grep -c '^72 variants:' "$tmp/off.txt")" -eq 2 ] || fail "MESHSIM_MPI=0: each rank should run the whole sweep"
echo "PASS"
