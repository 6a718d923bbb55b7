#!/usr/bin/env bash
# Checks that the C++ sources are formatted as .clang-format says (Google style, 120 columns)
# and names every file that is not. Fix: clang-format -i FILE... (or tools/check-format.sh --fix).
# CTest runs it (test `clang_format`); it needs clang-format 14 (Debian 12's, tools/install-deps.sh):
# another version may break lines differently, so it says so and skips rather than fail.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
fmt=${CLANG_FORMAT:-clang-format}
if ! command -v "$fmt" >/dev/null; then
  echo "check-format: $fmt not found; install it (tools/install-deps.sh) -- skipped"
  exit 77
fi
version=$("$fmt" --version | sed -n 's/.*version \([0-9]*\).*/\1/p')
if [[ $version != 14 ]]; then
  echo "check-format: $fmt is version $version, the house style is pinned to 14 -- skipped"
  exit 77
fi
if git rev-parse --git-dir >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files '*.cpp' '*.h' '*.cu' '*.cuh')
else
  mapfile -t files < <(find . -path ./build -prune -o \( -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) -print)
fi
if [[ ${1:-} == --fix ]]; then
  "$fmt" -i "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  "$fmt" --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [[ ${#bad[@]} -gt 0 ]]; then
  echo "check-format: ${#bad[@]} file(s) not in the house style (.clang-format):"
  printf '  %s\n' "${bad[@]}"
  echo "fix: tools/check-format.sh --fix (or clang-format -i FILE...), then review the diff"
  exit 1
fi
echo "check-format: ${#files[@]} files in the house style"
