#!/usr/bin/env bash
# Every example a user is shown runs (issue 37: "every README and --help example run by a
# test"): the `build/cli/meshsim ...` lines of the README's sh blocks and the `meshsim ...`
# lines under "Examples:" in every command's --help, continuation lines joined, each run from
# a scratch directory laid out like the source tree (examples/, validation/, build/cli/meshsim,
# `meshsim` on the PATH) and required to exit 0. Skipped, and said so: the examples that need a
# GPU (--backend cuda, a GPU profile), mpirun, or a file only a GPU run writes.
#   tests/examples_run_test.sh MESHSIM_BINARY
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/build/cli" "$work/bin"
ln -s "$bin" "$work/build/cli/meshsim"
ln -s "$bin" "$work/bin/meshsim"
ln -s "$root/examples" "$work/examples"
ln -s "$root/validation" "$work/validation"
# The help's placeholder scenario: a small layout that tp 1..8 and pp 1..4 can split.
printf 'model: {preset: gpt3-175b, layers: 8}\nparallel: {dp: auto, microbatches: 8}\ntopology: dgx-h100:nodes=2\n' \
  >"$work/s.yaml"

# Joins lines ending in a backslash with the next; drops a trailing "# comment".
join_lines() { sed -e ':a' -e '/\\$/N; s/\\\n *//; ta' | sed 's/[[:space:]]\{2,\}#.*$//; s/[[:space:]]*$//'; }

readme=$(awk '/^```sh/ {on=1; next} /^```/ {on=0} on' "$root/README.md" | join_lines | grep '^build/cli/meshsim ')
helps=""
commands=$("$bin" --help | awk '/^Subcommands:/ {on=1; next} on && NF {print $1}')
for c in $commands topology\ show topology\ list; do
  # shellcheck disable=SC2086
  helps+=$("$bin" $c --help 2>/dev/null | awk '/^Examples?:/ {on=1; next} on' | join_lines |
    sed -n 's/^ *\(meshsim .*\)$/\1/p')$'\n'
done

ran=0 skipped=0 failed=0
while IFS= read -r cmd; do
  [[ -z "$cmd" ]] && continue
  if [[ "$cmd" =~ (--backend\ cuda|gpu\.yaml|SCENARIO\.yaml|h100-node\.yaml|^mpirun) ]]; then
    echo "skip (needs a GPU or mpirun): $cmd"
    skipped=$((skipped + 1))
    continue
  fi
  out=$(cd "$work" && PATH="$work/bin:$PATH" timeout 300 bash -c "$cmd" 2>&1 </dev/null)
  rc=$?
  if [[ $rc -ne 0 ]]; then
    echo "FAIL (exit $rc): $cmd"
    printf '%s\n' "$out" | tail -5 | sed 's/^/    /'
    failed=$((failed + 1))
  else
    echo "ok: $cmd"
  fi
  ran=$((ran + 1))
done < <(printf '%s\n%s\n' "$readme" "$helps" | awk 'NF && !seen[$0]++')
echo "examples: $ran run, $failed failed, $skipped skipped (need a GPU or mpirun)"
[[ $ran -ge 30 ]] || { echo "too few examples found ($ran): did the README or --help layout change?"; exit 1; }
[[ $failed -eq 0 ]]
