#!/usr/bin/env bash
# Golden-output check, in the manner of SimGrid's tesh files: runs each case of cases.txt
# with the given meshsim and compares its stdout byte for byte with expected/NAME.
#
#   tests/golden/check.sh MESHSIM_OR_BUILD_DIR [CASE...]   # all cases, or the ones named
#   tests/golden/check.sh --manifest                       # cases.txt, expected/ and examples agree
#
# A case passes when meshsim exits 0, writes nothing to stderr, and its stdout equals the
# stored file; otherwise it prints why (exit code, stderr, or a unified diff expected ->
# actual). Exit status 0 when every case passes, 1 otherwise. Runs from the source
# directory whatever the caller's working directory. Re-bless with tests/golden/bless.sh.
set -u
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# --manifest: every case has its file and every file its case; every example scenario is
# named in cases.txt (in a case, or in a `# scenario:` line saying why it has none).
check_manifest() {
  local bad=0 name f
  declare -A known=()
  for name in $(case_names); do
    if [[ -n ${known[$name]:-} ]]; then echo "golden: case $name is listed twice"; bad=1; fi
    known[$name]=1
    [[ -f $EXPECTED/$name ]] || { echo "golden: case $name has no expected/$name (run bless.sh)"; bad=1; }
  done
  for f in "$EXPECTED"/*; do
    [[ -e $f ]] || continue
    name=$(basename "$f")
    [[ -n ${known[$name]:-} ]] || { echo "golden: expected/$name belongs to no case (bless.sh removes it)"; bad=1; }
  done
  for f in "$ROOT"/examples/scenarios/*.yaml; do
    name=examples/scenarios/$(basename "$f")
    grep -q -F "$name" "$CASES" || { echo "golden: $name appears in no case of cases.txt"; bad=1; }
  done
  [[ $bad -eq 0 ]] && echo "golden: manifest ok ($(case_names | wc -l) cases)"
  return $bad
}

if [[ $# -lt 1 || $1 == -h || $1 == --help ]]; then
  sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
if [[ $1 == --manifest ]]; then
  check_manifest
  exit
fi

bin=$(resolve_meshsim "$1") || exit 2
shift
if [[ $# -gt 0 ]]; then names=("$@"); else mapfile -t names < <(case_names); fi
for name in "${names[@]}"; do
  case_args "$name" >/dev/null || { echo "golden: no case named $name in cases.txt" >&2; exit 2; }
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0
for name in "${names[@]}"; do
  run_case "$bin" "$name" "$tmp/out" "$tmp/err"
  rc=$?
  why=""
  if [[ $rc -ne 0 ]]; then
    why="exit code $rc (expected 0)"
  elif [[ -s $tmp/err ]]; then
    why="wrote to stderr (expected nothing)"
  elif [[ ! -f $EXPECTED/$name ]]; then
    why="no expected/$name (run tests/golden/bless.sh)"
  elif ! cmp -s "$EXPECTED/$name" "$tmp/out"; then
    why="stdout differs from expected/$name"
  fi
  if [[ -z $why ]]; then
    echo "ok    $name"
    continue
  fi
  failed=$((failed + 1))
  echo "FAIL  $name: $why"
  echo "      $(case_command "$name")"
  if [[ -s $tmp/err ]]; then
    echo "--- stderr:"
    cat "$tmp/err"
  fi
  if [[ $rc -eq 0 && -f $EXPECTED/$name ]]; then
    diff -u --label "expected/$name" --label "actual: $(case_command "$name")" "$EXPECTED/$name" "$tmp/out"
  fi
done
if [[ ${#names[@]} -gt 1 ]]; then
  echo "golden: $((${#names[@]} - failed)) of ${#names[@]} cases pass"
fi
[[ $failed -eq 0 ]]
