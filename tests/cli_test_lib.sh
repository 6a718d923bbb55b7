# Shared by the shell tests of the CLI (sourced): a scratch folder removed on exit, and checks.
#   . "$(dirname "$0")/cli_test_lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() {
  echo "FAIL: $*"
  exit 1
}
same() {  # same FILE FILE WHAT
  cmp -s "$1" "$2" || { diff "$1" "$2" | head -20; fail "$3 differ"; }
}
# need_mpi MESHSIM: MPIRUN set and Open MPI told to run here (root, shared memory only); exits 77
# (SKIP) without mpirun or the plugin beside MESHSIM.
need_mpi() {
  MPIRUN=$(command -v mpirun) ||
    { echo "SKIP: mpirun not found (apt-get install openmpi-bin libopenmpi-dev, or tools/install-deps.sh)"; exit 77; }
  [ -f "$(dirname "$1")/libmeshsim_mpi.so" ] ||
    { echo "SKIP: no libmeshsim_mpi.so beside $1 (meshsim was built without MPI: install libopenmpi-dev, rerun cmake)"; exit 77; }
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  # shared memory only; no ptrace-based single copy (containers refuse it)
  export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1
}
