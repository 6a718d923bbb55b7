#!/usr/bin/env bash
# Prepares the GPU acceptance run (docs/validation/gpu.md) on a machine WITHOUT a GPU:
# builds a Release tree for sm_90 (Hopper: H100, H200) and packs what the GPU machine runs
# into one folder, with every library it needs that the GPU machine may lack, so that
# tools/gpu/acceptance.sh can run there with nothing but a driver, CUDA's cuBLAS/cudart and
# NCCL (the Python wheels' copies do).
#
#   tools/gpu/prepare.sh                      # build build-gpu/ (sm_90), pack gpu-bundle/
#   tools/gpu/prepare.sh --no-build --build-dir build --out /tmp/b   # pack an existing tree
#
# The pack (default gpu-bundle/, ignored by git; carried to the GPU machine as
# gpu-bundle.tar.gz beside it, a third of the size) holds:
#   bin/<the build tree's own paths>   meshsim, libmeshsim_cuda.so, kernels_test,
#                                      backend_cuda_test (+ its two stand-in plugins), kernels_bench,
#                                      cudnn_sdpa_test (where cuDNN's header was found)
#   lib/                               the shared libraries they load, except glibc's and CUDA's
#   MANIFEST                           source and build folders baked into the tests, commit, date
# Checks, each fatal: the pack and the tracked source together fit the 64 MiB a device run
# carries, and `ldd` resolves every library of every packed file from lib/ or the system's C
# library, leaving only CUDA's and NCCL's (libcudart, libcublas, libcublasLt, libnccl, libcuda)
# to the GPU machine. Exit 0: ready; 1: a check failed (named); 2: usage; 77: nothing to
# pack (this build has no CUDA plugin: the CUDA toolkit or NCCL was not found).
set -euo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
build_dir="$root/build-gpu"
out="$root/gpu-bundle"
do_build=1
limit=$((64 * 1024 * 1024))

usage() { sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build_dir="$(cd "$2" 2>/dev/null && pwd)" || { echo "prepare: --build-dir '$2' does not exist" >&2; exit 2; }; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --no-build) do_build=0; shift ;;
    --limit-bytes) limit="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "prepare: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

if [ "$do_build" -eq 1 ]; then
  "$root/tools/install-deps.sh"
  # sm_90 only: the GPU machines lent here are Hopper (H100, H200); half the device code of
  # the default 80;90. Tests and the kernel benchmark are built too.
  cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DMESHSIM_BUILD_TESTS=ON -DMESHSIM_BUILD_BENCH=ON
  cmake --build "$build_dir" -j"$(nproc)" --target meshsim meshsim_cuda kernels_test backend_cuda_test kernels_bench
  # cudnn_sdpa_test exists where cuDNN's header was found (cuDNN attention, docs/kernels.md).
  if ninja -C "$build_dir" -t targets all 2>/dev/null | grep -q '^cudnn_sdpa_test:'; then
    cmake --build "$build_dir" -j"$(nproc)" --target cudnn_sdpa_test
  fi
fi

# What the GPU machine runs, as paths in the build tree (kept: the tests find the CUDA
# plugin and the stand-in plugins by the absolute paths they were built with).
files=(cli/meshsim cli/libmeshsim_cuda.so kernels/kernels_test backend/backend_cuda_test
       backend/libfake_cuda_plugin_ok.so backend/libfake_cuda_plugin_other_abi.so bench/kernels_bench)
[ -f "$build_dir/backend/cudnn_sdpa_test" ] && files+=(backend/cudnn_sdpa_test)
if [ ! -f "$build_dir/cli/libmeshsim_cuda.so" ]; then
  echo "prepare: SKIP: $build_dir has no CUDA plugin (cli/libmeshsim_cuda.so): this build found no CUDA toolkit" \
       "or no NCCL; install them (README, 'On a GPU machine') and build again" >&2
  exit 77
fi
for f in "${files[@]}"; do
  [ -f "$build_dir/$f" ] || { echo "prepare: $build_dir/$f is missing: build it (cmake --build $build_dir --target $(basename "$f" .so))" >&2; exit 1; }
done

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
for f in "${files[@]}"; do
  mkdir -p "$out/bin/$(dirname "$f")"
  # Symbols are not needed to run; stripping halves the pack.
  strip --strip-unneeded -o "$out/bin/$f" "$build_dir/$f"
done

# Libraries left to the GPU machine: its C library (glibc's own objects) and CUDA/NCCL.
glibc='^(linux-vdso\.so|ld-linux-x86-64\.so|libc\.so|libm\.so|libpthread\.so|libdl\.so|librt\.so|libresolv\.so|libutil\.so)'
cuda='^(libcudart\.so|libcublas\.so|libcublasLt\.so|libnccl\.so|libcuda\.so)'
# Everything else a packed file loads is copied into lib/ under its soname.
for f in "${files[@]}"; do
  while read -r name _ path _; do
    [[ "$name" =~ $glibc || "$name" =~ $cuda ]] && continue
    [ "$path" = "not" ] && { echo "prepare: $f needs $name, which is not found on this machine either" >&2; exit 1; }
    [ -f "$out/lib/$name" ] || cp -L "$path" "$out/lib/$name"
  done < <(ldd "$out/bin/$f" | awk '/=>/ {print $1, $2, $3, $4}')
done
strip --strip-unneeded "$out"/lib/*.so* 2>/dev/null || true

# Check 1: ldd, with only lib/ added, resolves every library from the pack or glibc, and
# leaves nothing but CUDA/NCCL.
bad=0
for f in "${files[@]}"; do
  while read -r name _ path _; do
    if [[ "$name" =~ $cuda ]]; then continue; fi
    if [[ "$name" =~ $glibc ]]; then continue; fi
    case "$path" in
      "$out/lib/"*) ;;
      *) echo "prepare: CHECK FAILED: $f loads $name from '$path', not from the pack" >&2; bad=1 ;;
    esac
  done < <(LD_LIBRARY_PATH="$out/lib" ldd "$out/bin/$f" | awk '/=>/ {print $1, $2, $3, $4}')
done
[ "$bad" -eq 0 ] || exit 1

cache="$build_dir/CMakeCache.txt"
archs=$(sed -n 's/^CMAKE_CUDA_ARCHITECTURES:[A-Z]*=//p' "$cache" 2>/dev/null || true)
nvcc_bin=$(sed -n 's/^CMAKE_CUDA_COMPILER:[A-Z]*=//p' "$cache" 2>/dev/null || true)
{
  echo "source_dir=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$cache")"
  echo "build_dir=$build_dir"
  echo "commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "built=$(date -u +%Y-%m-%dT%H:%MZ)"
  echo "cuda_architectures=${archs:-the CMakeLists default (80;90)}"
  echo "nvcc=$("${nvcc_bin:-nvcc}" --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
  echo "host=$(. /etc/os-release && echo "$PRETTY_NAME"), $(ldd --version | head -1 | awk '{print $NF}') glibc"
} > "$out/MANIFEST"

# Check 2: the size a device run carries: the packed archive plus the tracked source tree.
tar -czf "$out.tar.gz" -C "$(dirname "$out")" "$(basename "$out")"
pack=$(stat -c %s "$out.tar.gz")
tree=0
if git -C "$root" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  tree=$(git -C "$root" ls-files -z | (cd "$root" && xargs -0 stat -c %s 2>/dev/null) | awk '{s += $1} END {print s + 0}')
fi
total=$((pack + tree))
mib() { awk -v b="$1" 'BEGIN {printf "%.1f MiB", b / 1048576}'; }
if [ "$total" -gt "$limit" ]; then
  echo "prepare: CHECK FAILED: $out.tar.gz $(mib "$pack") + tracked tree $(mib "$tree") = $(mib "$total")," \
       "over the $(mib "$limit") a device run carries" >&2
  exit 1
fi

echo "prepare: packed $out ($(ls "$out/lib" | wc -l) libraries) as $out.tar.gz, $(mib "$pack"); with the tracked tree" \
     "$(mib "$total") of $(mib "$limit"); ldd resolves all but CUDA/NCCL"
echo "prepare: next, on the GPU machine: tools/gpu/acceptance.sh RESULTS_DIR (docs/validation/gpu.md)"
