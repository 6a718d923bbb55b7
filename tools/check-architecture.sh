#!/usr/bin/env bash
# Checks docs/ARCHITECTURE.md against the tree: every path it names in backticks exists (a name
# with a '/' from the repository root, a bare file name such as `plan.cpp` somewhere in the
# tree), it names every command `meshsim --help` lists, and the layers it draws hold: each
# folder includes only from the folders below it (kernels/ nothing of backend/, backend/cuda
# nothing of backend/cpu).
#   tools/check-architecture.sh build/cli/meshsim
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
meshsim=${1:?usage: check-architecture.sh MESHSIM_BINARY}
doc="$root/docs/ARCHITECTURE.md"
bad=0
while IFS= read -r tok; do
  case "$tok" in
    */*)
      [[ -e "$root/$tok" ]] || { echo "ARCHITECTURE.md names '$tok', which does not exist"; bad=1; } ;;
    *.h|*.cpp|*.sh|*.cu|*.py)
      [[ -n $(find "$root" -path "$root/build" -prune -o -name "$tok" -print -quit) ]] ||
        { echo "ARCHITECTURE.md names '$tok', which is nowhere in the tree"; bad=1; } ;;
  esac
done < <(grep -o '`[^`]*`' "$doc" | tr -d '`' | sed 's/ .*//' | grep -E '/|\.(h|cpp|sh|cu|py)$' | sed 's/[(:].*//' | sort -u)
commands=$("$meshsim" --help | awk '/^Subcommands:/ {on=1; next} on && NF {print $1}')
[[ -n "$commands" ]] || { echo "no commands in '$meshsim --help'"; exit 1; }
for c in $commands; do
  grep -q "\`$c\`" "$doc" || { echo "ARCHITECTURE.md does not name the command '$c'"; bad=1; }
done
# The layers it draws point one way: each folder includes (tests included) only from these.
declare -A allowed=(
  [core]="core" [topology]="core topology" [schedule]="core topology schedule"
  [sim]="core topology schedule sim" [kernels]="core kernels"
  [backend]="core topology schedule kernels backend" [report]="core topology schedule sim report backend"
)
for dir in "${!allowed[@]}"; do
  while IFS=: read -r file inc; do
    top=${inc%%/*}
    [[ " ${allowed[$dir]} " == *" $top "* ]] ||
      { echo "$file includes $inc: $dir/ may include only ${allowed[$dir]}"; bad=1; }
  done < <(cd "$root" && grep -rHoE '^#include "[a-z_]+/[^"]+"' "$dir" --include='*.h' --include='*.cpp' \
             --include='*.cu' --include='*.cuh' | sed 's/#include "//; s/"$//')
done
while IFS= read -r hit; do
  echo "$hit: backend/cuda includes nothing of backend/cpu (the launch layer is backend/launch)"; bad=1
done < <(cd "$root" && grep -rlE '^#include "backend/cpu/' backend/cuda)
[[ $bad == 0 ]] && echo "ARCHITECTURE.md: every path exists, every command named ($(echo $commands | wc -w) commands); layers point one way"
exit $bad
