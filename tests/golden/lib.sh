# shellcheck shell=bash
# Shared by check.sh and bless.sh (sourced, not run). Bash and coreutils/diffutils only.

GOLDEN_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$GOLDEN_DIR/../.." && pwd)  # the source directory: cases run from here
CASES="$GOLDEN_DIR/cases.txt"
# shellcheck disable=SC2034  # used by check.sh and bless.sh
EXPECTED="$GOLDEN_DIR/expected"

# resolve_meshsim PATH: PATH is the meshsim binary or a build directory (BUILD/cli/meshsim);
# prints the binary's absolute path, or fails.
resolve_meshsim() {
  local b=$1
  if [[ -d $b ]]; then b=$b/cli/meshsim; fi
  if [[ ! -x $b || -d $b ]]; then
    echo "golden: no meshsim binary at $b" >&2
    return 1
  fi
  echo "$(cd "$(dirname "$b")" && pwd)/$(basename "$b")"
}

# case_names: every case name in cases.txt, in order.
case_names() {
  local name rest
  while read -r name rest; do
    [[ -z $name || $name == \#* ]] && continue
    echo "$name"
  done <"$CASES"
}

# case_args NAME: the meshsim arguments of case NAME, one per line; fails if there is none.
case_args() {
  local name rest found=1
  while read -r name rest; do
    [[ $name == "$1" ]] || continue
    set -f  # arguments such as bunched:2x2 are never globbed
    local a
    for a in $rest; do printf '%s\n' "$a"; done
    set +f
    found=0
    break
  done <"$CASES"
  return $found
}

# run_case BIN NAME OUT ERR: runs the case from the source directory, stdout to OUT and
# stderr to ERR; returns meshsim's exit code. LC_ALL=C: no locale in number formatting.
run_case() {
  local bin=$1 name=$2 out=$3 err=$4 args
  if ! mapfile -t args < <(case_args "$name") || [[ ${#args[@]} -eq 0 ]]; then
    echo "golden: no case named $name in $CASES" >"$err"
    return 2
  fi
  (cd "$ROOT" && LC_ALL=C exec "$bin" "${args[@]}") >"$out" 2>"$err" </dev/null
}

# case_command NAME: the command line of a case, for messages.
case_command() {
  local args
  mapfile -t args < <(case_args "$1")
  echo "meshsim ${args[*]}"
}
