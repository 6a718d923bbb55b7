#!/usr/bin/env bash
# Checks docs/ARCHITECTURE.md against the tree: every path it names in backticks exists (a name
# with a '/' from the repository root, a bare file name such as `plan.cpp` somewhere in the
# tree), and it names every command `meshsim --help` lists.
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
[[ $bad == 0 ]] && echo "ARCHITECTURE.md: every path exists, every command named ($(echo $commands | wc -w) commands)"
exit $bad
