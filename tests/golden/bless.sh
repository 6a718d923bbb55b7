#!/usr/bin/env bash
# Re-bless the golden files: rewrites expected/NAME with the stdout of each case of
# cases.txt, run with the given meshsim from the source directory.
#
#   tests/golden/bless.sh BUILD_DIR [CASE...]      # or the meshsim binary instead of BUILD_DIR
#   cmake --build build --target golden-bless      # the same, with the build's meshsim
#
# Use it when a change to the model or to the output is intended, then review `git diff
# tests/golden` and commit the files with the change. A case that exits non-zero or writes
# to stderr is an error and its file is left alone; so is output holding the source or
# binary directory (golden files must not depend on where the tree lives). Blessing every
# case also deletes files under expected/ that no case names.
set -u
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

if [[ $# -lt 1 || $1 == -h || $1 == --help ]]; then
  sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
bin=$(resolve_meshsim "$1") || exit 2
shift
all=0
if [[ $# -gt 0 ]]; then names=("$@"); else mapfile -t names < <(case_names); all=1; fi
for name in "${names[@]}"; do
  case_args "$name" >/dev/null || { echo "golden: no case named $name in cases.txt" >&2; exit 2; }
done

mkdir -p "$EXPECTED"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
errors=0 changed=0
for name in "${names[@]}"; do
  run_case "$bin" "$name" "$tmp/out" "$tmp/err"
  rc=$?
  if [[ $rc -ne 0 || -s $tmp/err ]]; then
    if [[ $rc -ne 0 ]]; then why="exit code $rc (expected 0)"; else why="wrote to stderr (expected nothing)"; fi
    echo "error      $name: $why: $(case_command "$name")"
    cat "$tmp/err"
    errors=$((errors + 1))
    continue
  fi
  if grep -q -F -e "$ROOT" -e "$(dirname "$bin")" "$tmp/out"; then
    echo "error      $name: output holds an absolute path ($ROOT or $(dirname "$bin"))"
    errors=$((errors + 1))
    continue
  fi
  if [[ ! -f $EXPECTED/$name ]]; then
    echo "new        $name"
  elif cmp -s "$tmp/out" "$EXPECTED/$name"; then
    echo "unchanged  $name"
    continue
  else
    echo "updated    $name"
  fi
  cp "$tmp/out" "$EXPECTED/$name"
  changed=$((changed + 1))
done
if [[ $all -eq 1 ]]; then
  declare -A known=()
  for name in "${names[@]}"; do known[$name]=1; done
  for f in "$EXPECTED"/*; do
    [[ -e $f ]] || continue
    if [[ -z ${known[$(basename "$f")]:-} ]]; then
      echo "removed    $(basename "$f")"
      rm -f "$f"
      changed=$((changed + 1))
    fi
  done
fi
echo "golden: ${#names[@]} cases, $changed files written or removed, $errors errors"
[[ $errors -eq 0 ]]
