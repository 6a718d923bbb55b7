#!/usr/bin/env bash
# meshsim simulate under mpirun (cli/training_cmd.cpp, TimingShare in sim/schedule_sim.h): the
# ranks share out a flow simulation's collective timings, and rank 0 prints and writes exactly
# what one process does (--json, the summary, --links) on 2 and 3 ranks; a scenario's error is
# one error line, never a hang; MESHSIM_MPI=0 leaves each rank to itself. SKIP (77) without
# mpirun or libmeshsim_mpi.so. Run from the source directory (the scenario's path is relative).
#   simulate_mpi_test.sh MESHSIM
set -u
M=$1
S=examples/scenarios/gpt3-175b-1024xh100.yaml
args=(simulate "$S" --set run.fidelity=flow)
. "$(dirname "$0")/cli_test_lib.sh"
need_mpi "$M"
run() { timeout 300 "$MPIRUN" --oversubscribe "$@"; }

"$M" "${args[@]}" --json >"$tmp/one.json" || fail "one process --json"
"$M" "${args[@]}" --links "$tmp/one.csv" >"$tmp/one.txt" 2>/dev/null || fail "one process"
grep -q "distinct collective timings" "$tmp/one.txt" || fail "the summary names no collective timings"
for np in 2 3; do
  run -np "$np" "$M" "${args[@]}" --json >"$tmp/r.json" 2>"$tmp/r.err" || { cat "$tmp/r.err"; fail "mpirun -np $np --json"; }
  same "$tmp/one.json" "$tmp/r.json" "mpirun -np $np and one process --json"
  run -np "$np" "$M" "${args[@]}" --links "$tmp/r.csv" >"$tmp/r.txt" 2>"$tmp/r.err" || { cat "$tmp/r.err"; fail "mpirun -np $np"; }
  same "$tmp/one.txt" "$tmp/r.txt" "mpirun -np $np and one process summary"
  same "$tmp/one.csv" "$tmp/r.csv" "mpirun -np $np and one process --links"
done
echo "ok: mpirun -np 2 and -np 3 = one process (--json, summary, --links)"

# A scenario's error: every rank meets it, rank 0 says it once, the job ends with status 2.
timeout 120 "$MPIRUN" --oversubscribe -np 2 "$M" "${args[@]}" --set parallel.tp=3 >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" -ne 124 ] || fail "mpirun with a bad layout hung"
[ "$rc" -ne 0 ] || fail "mpirun with a bad layout exited 0"
n=$(grep -c "meshsim: error" "$tmp/err")
[ "$n" -eq 1 ] || { cat "$tmp/err"; fail "$n error lines (want 1) from a bad layout under mpirun"; }
grep -q "tp" "$tmp/err" || { cat "$tmp/err"; fail "the error does not name tp"; }
[ ! -s "$tmp/out" ] || fail "a failed run printed results"
echo "ok: $(grep "meshsim: error" "$tmp/err")"

MESHSIM_MPI=0 run -np 2 "$M" "${args[@]}" >"$tmp/off.txt" 2>/dev/null || fail "MESHSIM_MPI=0 under mpirun"
[ "$(grep -c 'distinct collective timings' "$tmp/off.txt")" -eq 2 ] || fail "MESHSIM_MPI=0: each rank should run alone"
# Without the plugin (a build without Open MPI) a simulation needs no MPI: each rank runs alone and
# says why, once.
MESHSIM_MPI_PLUGIN=$tmp/nonexistent.so run -np 2 "$M" "${args[@]}" >"$tmp/noplugin.txt" 2>"$tmp/noplugin.err" ||
  { cat "$tmp/noplugin.err"; fail "simulate under mpirun without the plugin"; }
[ "$(grep -c 'distinct collective timings' "$tmp/noplugin.txt")" -eq 2 ] || fail "without the plugin each rank should run alone"
[ "$(grep -c 'warning: simulate: started by an MPI launcher' "$tmp/noplugin.err")" -eq 2 ] ||
  { cat "$tmp/noplugin.err"; fail "without the plugin each rank should say why"; }
echo "PASS"
