#!/usr/bin/env bash
# Runs one case of the bad-input catalogue (tests/bad_inputs/*.case): meshsim with the
# case's arguments must end within the time limit with the case's exit code, and its
# stderr must match the case's pattern (grep -E) in one line. Usage: run.sh MESHSIM CASE
#
# A case file:
#   # what it checks (issue 16's class: crash, silent wrong number, hang, unit typo, ...)
#   args: collective allreduce --chunks 1000000000     ({dir}: this directory; {src}: the tree)
#   exit: 2
#   message: chunks: got 1000000000; use 0 for the algorithm default
set -u
bin=$1 case=$2
dir=$(cd "$(dirname "$case")" && pwd) src=$(cd "$dir/../.." && pwd)
field() { sed -n "s/^$1: //p" "$case" | head -1; }
args=$(field args) want_exit=$(field exit) pattern=$(field message)
args=${args//\{dir\}/$dir}
args=${args//\{src\}/$src}
[[ -n $args && -n $want_exit ]] || { echo "bad case file $case: needs args: and exit:"; exit 2; }
err=$(mktemp)
trap 'rm -f "$err"' EXIT
cd "$src"
# shellcheck disable=SC2086  # the arguments are split as a shell would
timeout 60 "$bin" $args >/dev/null 2>"$err"
got=$?
if [[ $got == 124 ]]; then echo "FAIL $case: still running after 60 s (a hang)"; exit 1; fi
if [[ $got != "$want_exit" ]]; then
  echo "FAIL $case: exit $got, expected $want_exit; stderr:"; cat "$err"; exit 1
fi
if [[ -n $pattern ]]; then
  lines=$(grep -c . "$err")
  if ! grep -Eq -- "$pattern" "$err"; then echo "FAIL $case: stderr does not match /$pattern/:"; cat "$err"; exit 1; fi
  if [[ $lines != 1 ]]; then echo "FAIL $case: $lines lines on stderr, expected one:"; cat "$err"; exit 1; fi
  if grep -q "internal error" "$err"; then echo "FAIL $case: an internal error:"; cat "$err"; exit 1; fi
fi
echo "ok $case: exit $got, $(head -c 160 "$err")"
