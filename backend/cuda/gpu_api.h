// The few CUDA, NCCL and cuBLAS calls the cuda executor makes, behind one interface.
//
// The executor never calls a CUDA library directly: it calls a GpuApi, and every status
// it gets back goes through one Checker (check.h). The real implementation (gpu_api_real.cpp)
// lives in the CUDA plugin, libmeshsim_cuda.so (plugin.h), built with the CUDA toolkit and NCCL
// and loaded by real_gpu_api() on first use; tests pass a fake that fails on demand, so the
// error paths, the watchdog and the executor's control flow run in CI without a GPU.
//
//   GpuApi& api = real_gpu_api();                 // throws Error when the plugin cannot be loaded
//   Checker check(api, rank);
//   StreamH s{};  check.cuda(api.stream_create(&s), "cudaStreamCreate", "setup");
//
// Handles are the libraries' own pointer types, forward-declared below, so this header
// needs no CUDA include. Every call returns the library's status as an int (0 = success):
// cudaError_t for the Lib::Cuda calls, ncclResult_t for Lib::Nccl, cublasStatus_t for
// Lib::Cublas (the kernels from kernels/ report cudaError_t).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "backend/kernel_call.h"
#include "core/dtype.h"
#include "schedule/collective.h"

struct CUstream_st;    // cudaStream_t
struct CUevent_st;     // cudaEvent_t
struct ncclComm;       // ncclComm_t
struct cublasContext;  // cublasHandle_t

namespace meshsim::cuda {

using StreamH = CUstream_st*;
using EventH = CUevent_st*;
using CommH = ncclComm*;
using BlasH = cublasContext*;

enum class Lib { Cuda, Nccl, Cublas };
const char* to_string(Lib lib);  // "CUDA", "NCCL", "cuBLAS"

// Element types of GEMMs and native collectives (core/dtype.h, shared with the model and the
// machine profiles). Our step programs move bytes and reduce float32.
using meshsim::DType;
using meshsim::dtype_bytes;
using meshsim::to_string;

inline constexpr std::size_t kUniqueIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES

class GpuApi {
 public:
  virtual ~GpuApi() = default;
  // The library's text for a status of `lib` (cudaGetErrorString, ncclGetErrorString,
  // cublasGetStatusString), plus NCCL's last-error detail when it has one.
  virtual std::string error_string(Lib lib, int status) = 0;

  // CUDA runtime
  virtual int set_device(int device) = 0;
  virtual int malloc(void** ptr, std::size_t bytes) = 0;
  virtual int free(void* ptr) = 0;
  virtual int memset_async(void* ptr, int value, std::size_t bytes, StreamH stream) = 0;
  virtual int memcpy_to_device(void* dst, const void* src, std::size_t bytes) = 0;  // synchronous
  virtual int memcpy_to_host(void* dst, const void* src, std::size_t bytes) = 0;    // synchronous
  virtual int stream_create(StreamH* stream) = 0;  // non-blocking w.r.t. the legacy stream
  virtual int stream_destroy(StreamH stream) = 0;
  virtual int event_create(EventH* event) = 0;
  virtual int event_destroy(EventH event) = 0;
  virtual int event_record(EventH event, StreamH stream) = 0;
  virtual int stream_wait_event(StreamH stream, EventH event) = 0;
  // *done = whether the work before the event has finished (cudaEventQuery: success or not ready).
  virtual int event_query(EventH event, bool* done) = 0;
  virtual int event_elapsed_ms(float* ms, EventH start, EventH end) = 0;

  // NCCL
  virtual int get_unique_id(std::string* id) = 0;  // kUniqueIdBytes bytes
  virtual int comm_init_rank(CommH* comm, int nranks, const std::string& id, int rank) = 0;
  virtual int comm_split(CommH comm, int color, int key, CommH* out) = 0;
  virtual int comm_get_async_error(CommH comm, int* async_status) = 0;
  virtual int comm_abort(CommH comm) = 0;
  virtual int comm_destroy(CommH comm) = 0;
  virtual int group_start() = 0;
  virtual int group_end() = 0;
  virtual int send(const void* buf, std::size_t bytes, int peer, CommH comm, StreamH stream) = 0;
  virtual int recv(void* buf, std::size_t bytes, int peer, CommH comm, StreamH stream) = 0;
  // A native NCCL collective (sum for the reducing kinds) of `count` elements per rank's
  // block as NCCL counts them (all-gather: the send count, reduce-scatter: the receive
  // count, all-to-all: the count per peer). SendRecv is not a native collective.
  virtual int collective(CollKind kind, const void* send, void* recv, std::size_t count, DType type, int root,
                         CommH comm, StreamH stream) = 0;

  // cuBLAS
  virtual int blas_create(BlasH* handle) = 0;
  virtual int blas_destroy(BlasH handle) = 0;
  virtual int blas_set_stream(BlasH handle, StreamH stream) = 0;
  virtual int blas_set_workspace(BlasH handle, void* ptr, std::size_t bytes) = 0;
  // C[m,n] = A[m,k] B[k,n] (column-major, fp32 accumulation).
  virtual int gemm(BlasH handle, std::int64_t m, std::int64_t n, std::int64_t k, DType type, const void* a,
                   const void* b, void* c) = 0;

  // Kernels (kernels/); status as cudaError_t.
  virtual int reduce_sum(float* dst, const float* src, std::size_t n, StreamH stream) = 0;
  virtual int stream_pass(float* dst, const float* src, std::size_t n,
                          StreamH stream) = 0;  // copy, kernels/stream_pass
  // One of our kernels (kernels/cuda_ops.h) as `call` describes it (backend/kernel_call.h),
  // its operands in `ws` (call.floats() floats, 16-byte aligned): what the executor runs for
  // every non-GEMM compute op and calibrate times.
  virtual int kernel(const KernelCall& call, float* ws, StreamH stream) = 0;
};

// The CUDA implementation, from the CUDA plugin (plugin.h: loaded on first use). Throws Error,
// one line naming the plugin file, dlerror() and the fix, when it cannot be loaded (builds
// without the CUDA toolkit or NCCL have no plugin).
GpuApi& real_gpu_api();

}  // namespace meshsim::cuda
