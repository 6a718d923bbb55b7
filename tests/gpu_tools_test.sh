#!/usr/bin/env bash
# CTest gpu_tools (issue 13): the GPU acceptance tools work on a machine without a GPU.
#   tests/gpu_tools_test.sh BUILD_DIR
# 1. tools/gpu/prepare.sh packs BUILD_DIR (no new build): the archive unpacks, every packed
#    file's libraries resolve from the pack or the C library, except CUDA's and NCCL's, and
#    the archive and the tracked tree fit the 64 MiB a device run carries (checked here
#    again, independently of prepare's own checks). A size limit too small is one error.
# 2. tools/gpu/acceptance.sh without a GPU, or without a results folder, exits 2 with one line.
# Exit 77 (skip) when the build has no CUDA plugin.
set -uo pipefail
build="$1"
root="$(cd "$(dirname "$0")/.." && pwd)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$root/tools/gpu/prepare.sh" --no-build --build-dir "$build" --out "$tmp/pack" >"$tmp/prepare.out" 2>&1
rc=$?
[ "$rc" -ne 77 ] || { cat "$tmp/prepare.out"; exit 77; }
[ "$rc" -eq 0 ] || { cat "$tmp/prepare.out"; fail "prepare.sh exited $rc"; }

mkdir "$tmp/x" && tar -xzf "$tmp/pack.tar.gz" -C "$tmp/x" || fail "the archive does not unpack"
pack="$tmp/x/pack"
[ -f "$pack/MANIFEST" ] || fail "no MANIFEST in the archive"
grep -q "^build_dir=$(cd "$build" && pwd)$" "$pack/MANIFEST" || fail "MANIFEST does not name the build folder"
n=0
while IFS= read -r f; do
  n=$((n + 1))
  while read -r name _ path _; do
    case "$name" in
      libcudart.so*|libcublas.so*|libcublasLt.so*|libnccl.so*|libcuda.so*) continue ;;
      libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|libresolv.so*|libutil.so*|ld-linux*) continue ;;
    esac
    [[ "$path" == "$pack/lib/"* ]] || fail "${f#$pack/} loads $name from '$path', not from the pack"
  done < <(LD_LIBRARY_PATH="$pack/lib" ldd "$f" | awk '/=>/ {print $1, $2, $3, $4}')
done < <(find "$pack/bin" -type f)
# Seven files, and cudnn_sdpa_test where the build found cuDNN's header.
want=7
[ -f "$build/backend/cudnn_sdpa_test" ] && want=8
[ "$n" -eq "$want" ] || fail "expected $want packed files, found $n"
tree=$(git -C "$root" ls-files -z | (cd "$root" && xargs -0 stat -c %s) | awk '{s += $1} END {print s + 0}')
total=$(($(stat -c %s "$tmp/pack.tar.gz") + tree))
[ "$total" -le $((64 * 1024 * 1024)) ] || fail "archive + tree = $total bytes, over 64 MiB"
echo "pack: $n files, archive + tracked tree $total bytes"

"$root/tools/gpu/prepare.sh" --no-build --build-dir "$build" --out "$tmp/small" --limit-bytes 1000 >"$tmp/small.out" 2>&1
rc=$?
[ "$rc" -eq 1 ] && grep -q "CHECK FAILED: .* over the" "$tmp/small.out" || { cat "$tmp/small.out"; fail "a 1000-byte limit was not one error (exit $rc)"; }

out=$("$root/tools/gpu/acceptance.sh" 2>&1)
rc=$?
[ "$rc" -eq 2 ] && [ "$(wc -l <<<"$out")" -eq 1 ] && grep -q "give the folder" <<<"$out" ||
  fail "acceptance.sh without a folder: exit $rc, '$out'"
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "a GPU is present: acceptance.sh's no-GPU message not tested here"
else
  out=$("$root/tools/gpu/acceptance.sh" "$tmp/results" 2>&1)
  rc=$?
  [ "$rc" -eq 2 ] && [ "$(wc -l <<<"$out")" -eq 1 ] && grep -q "^acceptance: no GPU here" <<<"$out" ||
    fail "acceptance.sh without a GPU: exit $rc, '$out'"
  [ ! -e "$tmp/results" ] || fail "acceptance.sh without a GPU wrote results"
  echo "no GPU: $out"
fi
echo "PASS"
