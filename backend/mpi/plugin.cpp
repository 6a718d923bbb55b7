// libmeshsim_mpi.so: the MPI side of the seam in plugin.h. The only file of meshsim that
// includes mpi.h; linked against libmpi, loaded by `meshsim sweep` under a launcher.
#include "backend/mpi/plugin.h"

// The C API only: no MPI C++ bindings (and no libmpi_cxx).
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

namespace {

const char* library() {
  static std::string text = [] {
    std::string s(MPI_MAX_LIBRARY_VERSION_STRING, '\0');
    int n = 0;
    MPI_Get_library_version(s.data(), &n);
    s.resize(static_cast<std::size_t>(n));
    const auto eol = s.find_first_of("\r\n");
    return eol == std::string::npos ? s : s.substr(0, eol);
  }();
  return text.c_str();
}

std::string init(int* rank, int* size, int* local_size) {
  int provided = 0;
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) return "MPI_Init_thread failed";
  MPI_Comm_rank(MPI_COMM_WORLD, rank);
  MPI_Comm_size(MPI_COMM_WORLD, size);
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, *rank, MPI_INFO_NULL, &node);
  MPI_Comm_size(node, local_size);
  MPI_Comm_free(&node);
  return "";
}

// Byte counts travel as int (MPI's count type); sweep sends blocks far below 2 GiB.
std::vector<std::string> gather(const std::string& bytes) {
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int mine = static_cast<int>(bytes.size());
  std::vector<int> counts(rank == 0 ? static_cast<std::size_t>(size) : 0), offsets(counts.size());
  MPI_Gather(&mine, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  std::string all;
  if (rank == 0) {
    std::int64_t total = 0;
    for (std::size_t r = 0; r < counts.size(); ++r) {
      offsets[r] = static_cast<int>(total);
      total += counts[r];
    }
    all.resize(static_cast<std::size_t>(total));
  }
  MPI_Gatherv(bytes.data(), mine, MPI_BYTE, all.data(), counts.data(), offsets.data(), MPI_BYTE, 0, MPI_COMM_WORLD);
  std::vector<std::string> out;
  for (std::size_t r = 0; r < counts.size(); ++r)
    out.push_back(all.substr(static_cast<std::size_t>(offsets[r]), static_cast<std::size_t>(counts[r])));
  return out;
}

std::vector<std::string> all_gather(const std::string& text) {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int mine = static_cast<int>(text.size());
  std::vector<int> counts(static_cast<std::size_t>(size)), offsets(counts.size());
  MPI_Allgather(&mine, 1, MPI_INT, counts.data(), 1, MPI_INT, MPI_COMM_WORLD);
  int total = 0;
  for (std::size_t r = 0; r < counts.size(); ++r) {
    offsets[r] = total;
    total += counts[r];
  }
  std::string all(static_cast<std::size_t>(total), '\0');
  MPI_Allgatherv(text.data(), mine, MPI_BYTE, all.data(), counts.data(), offsets.data(), MPI_BYTE, MPI_COMM_WORLD);
  std::vector<std::string> out;
  for (std::size_t r = 0; r < counts.size(); ++r)
    out.push_back(all.substr(static_cast<std::size_t>(offsets[r]), static_cast<std::size_t>(counts[r])));
  return out;
}

void finalize() { MPI_Finalize(); }

[[noreturn]] void abort_all(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  __builtin_unreachable();
}

const MeshsimMpiPlugin kTable{meshsim::mpi::kMpiPluginAbi, library, init, gather, all_gather, finalize, abort_all};

}  // namespace

extern "C" const MeshsimMpiPlugin* meshsim_mpi_plugin(int /*abi_version*/) { return &kTable; }
