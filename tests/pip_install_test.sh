#!/usr/bin/env bash
# `pip install .` into a fresh virtual environment, offline (the venv's own setuptools, no
# package index), reusing the CMake build; then `import meshsim` and a simulation run from
# outside the source tree (docs/python.md).
#   tests/pip_install_test.sh PYTHON BUILD_DIR
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
python=${1:?usage: pip_install_test.sh PYTHON BUILD_DIR}
build=$(cd "${2:?usage: pip_install_test.sh PYTHON BUILD_DIR}" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$python" -m venv "$tmp/venv" ||
  { echo "pip_install: '$python -m venv' failed; install python3-venv (tools/install-deps.sh)"; exit 1; }
# setuptools builds the wheel with the `wheel` package, which a venv lacks: Debian ships it as a
# wheel file beside pip's and setuptools' (python3-wheel-whl).
"$tmp/venv/bin/python" -c "import wheel" 2>/dev/null ||
  "$tmp/venv/bin/python" -m pip install -q --no-index --find-links /usr/share/python-wheels wheel ||
  { echo "pip_install: no 'wheel' package offline; install python3-wheel-whl (tools/install-deps.sh)"; exit 1; }
MESHSIM_BUILD_DIR="$build" "$tmp/venv/bin/python" -m pip install -q --no-build-isolation --no-index --no-deps "$root"
cd "$tmp"
"$tmp/venv/bin/python" - <<'PY'
import meshsim
assert meshsim.__file__.startswith(__import__("sys").prefix), meshsim.__file__  # the installed copy
r = meshsim.simulate(fidelity="formula")
assert r["iteration_s"] > 0, r
print(f"pip_install: meshsim {meshsim.__version__} from {meshsim.__file__}: iteration {r['iteration_s']:.4f} s")
PY
