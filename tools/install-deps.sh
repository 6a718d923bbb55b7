#!/usr/bin/env bash
# Installs the Debian packages meshsim needs to build and test. Idempotent.
# The CUDA toolkit (nvcc, cuBLAS, NCCL) is optional: CUDA parts build when it is found.
set -euo pipefail
pkgs=(cmake ninja-build g++ libyaml-cpp-dev nlohmann-json3-dev libcli11-dev libfmt-dev libtbb-dev
      libopenblas-dev pkg-config clang-format
      libboost-dev libgtest-dev libgmock-dev libbenchmark-dev graphviz
      chromium   # chromium: report_test renders the HTML report headlessly (skipped without it)
      iproute2 python3   # netns_validate: ip netns, veth, tc tbf (tools/netns_validate.py; skipped without root)
      python3-dev pybind11-dev python3-pytest python3-venv python3-wheel-whl   # the Python module (python/), its tests, pip install .
      python3-pandas python3-matplotlib   # the Python example's DataFrame and plot (examples/python/)
      libopenmpi-dev openmpi-bin   # sweep under mpirun: the plugin libmeshsim_mpi.so and CTest sweep_mpi
      libmuparser-dev   # sweep --where: the expression parser
      libssl-dev)  # the rendezvous handshake: HMAC-SHA256 and nonces from OpenSSL's libcrypto
missing=()
for p in "${pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all packages present"
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
