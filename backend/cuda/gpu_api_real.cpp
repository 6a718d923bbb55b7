// The real GpuApi: thin forwards to the CUDA runtime, NCCL, cuBLAS and kernels/. Part of the
// CUDA plugin (plugin.h), built only with the CUDA toolkit and NCCL; meshsim reaches it through
// real_gpu_api(). Statuses are returned as they come; check.h turns them into errors.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include "backend/cuda/gpu_api.h"
#include "kernels/cuda_ops.h"
#include "kernels/reduce.h"
#include "kernels/stream_pass.h"
#ifdef MESHSIM_HAVE_CUDNN
#include "backend/cuda/cudnn_sdpa.h"
#include "core/error.h"
#endif

static_assert(sizeof(ncclUniqueId) == meshsim::cuda::kUniqueIdBytes, "ncclUniqueId size changed");

namespace meshsim::cuda {
namespace {

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::Bf16:
      return ncclBfloat16;
    case DType::Fp16:
      return ncclFloat16;
    case DType::Fp32:
      return ncclFloat32;
  }
  return ncclFloat32;
}

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::Bf16:
      return CUDA_R_16BF;
    case DType::Fp16:
      return CUDA_R_16F;
    case DType::Fp32:
      return CUDA_R_32F;
  }
  return CUDA_R_32F;
}

#ifdef MESHSIM_HAVE_CUDNN
// MESHSIM_ATTENTION, read at each call (run/validate/calibrate --attention set it): "meshsim"
// runs our attention kernel always; "cudnn" requires cuDNN (a bf16 attention call it cannot
// take fails, the reason on stderr); unset or "auto": cuDNN where it takes the call, else ours.
enum class AttentionChoice { Auto, Cudnn, Meshsim };
AttentionChoice attention_choice() {
  const char* v = std::getenv("MESHSIM_ATTENTION");
  const std::string s = v ? v : "";
  if (s == "meshsim") return AttentionChoice::Meshsim;
  if (s == "cudnn") return AttentionChoice::Cudnn;
  static bool warned = false;
  if (!s.empty() && s != "auto" && !warned) {
    warned = true;
    std::fprintf(stderr, "meshsim cuda: MESHSIM_ATTENTION='%s' is not auto, cudnn or meshsim; using auto\n", s.c_str());
  }
  return AttentionChoice::Auto;
}

// bf16 attention calls on cuDNN's fused flash attention (cudnn_sdpa.h): one plan per shape,
// built on first use (calibrate and the executor warm up before they time) and kept for the
// process, with its scratch (softmax_sum, dq_accum) and workspace in one allocation. Each
// shape's outcome is said once on stderr: the engine cuDNN chose, or why our kernel runs it.
// cuDNN writes dq, dk and dv where our kernel adds to them: the executor's calls start from
// zeroed or don't-care outputs, so only the timing and the values of one call are compared.
class CudnnAttention {
 public:
  // Runs `c` on cuDNN and sets *status (0 or a CUDA error); false when cuDNN does not take it.
  bool run(const KernelCall& c, float* ws, StreamH stream, AttentionChoice choice, int* status) {
    std::lock_guard<std::mutex> lock(mu_);
    const std::string key = describe(c);
    auto it = plans_.find(key);
    if (it == plans_.end()) it = plans_.emplace(key, build(c)).first;
    Entry& e = it->second;
    if (!e.plan) {
      if (choice == AttentionChoice::Cudnn) *status = static_cast<int>(cudaErrorNotSupported);
      return choice == AttentionChoice::Cudnn;
    }
    const sdpa::Graph& g = e.plan->graph();
    char* scratch = static_cast<char*>(e.scratch);
    std::map<std::int64_t, void*> ptrs;
    auto act = [&](int j) { return static_cast<void*>(c.bf16_operand(ws, j)); };
    auto f32 = [&](int j) { return static_cast<void*>(c.operand(ws, j)); };
    ptrs[sdpa::kQ] = act(0);
    ptrs[sdpa::kK] = act(1);
    ptrs[sdpa::kV] = act(2);
    ptrs[sdpa::kO] = act(3);
    if (g.backward) {
      ptrs[sdpa::kdO] = act(4);
      ptrs[sdpa::kStats] = f32(5);
      ptrs[sdpa::kdQ] = act(6);
      ptrs[sdpa::kdK] = act(7);
      ptrs[sdpa::kdV] = act(8);
      ptrs[sdpa::kSoftmaxSum] = scratch;
      if (e.dq_accum_bytes) ptrs[sdpa::kDqAccum] = scratch + e.softmax_sum_bytes;
    } else {
      ptrs[sdpa::kStats] = f32(4);
    }
    void* workspace = scratch + e.softmax_sum_bytes + e.dq_accum_bytes;
    cudnnStatus_t st = api_->set_stream(handle_, stream);
    if (st == CUDNN_STATUS_SUCCESS && e.dq_accum_bytes) {
      if (const cudaError_t ce = cudaMemsetAsync(ptrs[sdpa::kDqAccum], 0, e.dq_accum_bytes, stream)) {
        *status = static_cast<int>(ce);
        return true;
      }
    }
    if (st == CUDNN_STATUS_SUCCESS) st = e.plan->execute(handle_, ptrs, workspace);
    if (st == CUDNN_STATUS_SUCCESS) {
      *status = 0;
      return true;
    }
    say(key, "meshsim's kernel from now on: cuDNN failed to run it: " + cudnn_error(*api_, st));
    e.plan.reset();
    if (choice == AttentionChoice::Cudnn) *status = static_cast<int>(cudaErrorLaunchFailure);
    return choice == AttentionChoice::Cudnn;
  }

 private:
  struct Entry {
    std::unique_ptr<SdpaPlan> plan;
    void* scratch = nullptr;
    std::size_t softmax_sum_bytes = 0, dq_accum_bytes = 0;
  };
  // "attention_bwd 64x4096x4096x128 causal" (KernelCall::text() lives outside the plugin).
  static std::string describe(const KernelCall& c) {
    return std::string(c.fn == KernelCall::Fn::AttentionBwd ? "attention_bwd " : "attention_fwd ") +
           std::to_string(c.shape.batch_heads) + "x" + std::to_string(c.shape.seq_q) + "x" +
           std::to_string(c.shape.seq_kv) + "x" + std::to_string(c.shape.head_dim) + (c.causal ? " causal" : "");
  }
  static std::size_t round_up(std::size_t b) { return (b + 255) / 256 * 256; }
  static void say(const std::string& call, const std::string& what) {
    std::fprintf(stderr, "meshsim cuda: attention %s: %s\n", call.c_str(), what.c_str());
  }

  Entry build(const KernelCall& c) {
    Entry e;
    if (!api_ && why_.empty()) {
      api_ = load_cudnn(&why_);
      if (api_) {
        if (const cudnnStatus_t st = api_->create(&handle_)) {
          why_ = "cudnnCreate: " + cudnn_error(*api_, st);
          api_ = nullptr;
        }
      }
    }
    if (!api_) {
      say(describe(c), "meshsim's kernel: " + why_);
      return e;
    }
    const sdpa::Shape s{.batch = 1,
                        .heads_q = c.shape.batch_heads,
                        .heads_kv = c.shape.batch_heads,
                        .seq_q = c.shape.seq_q,
                        .seq_kv = c.shape.seq_kv,
                        .head_dim = c.shape.head_dim,
                        .causal = c.causal,
                        .scale = c.scale()};
    if (const std::string why = sdpa::unsupported(s); !why.empty()) {
      say(describe(c), "meshsim's kernel: " + why);
      return e;
    }
    const bool backward = c.fn == KernelCall::Fn::AttentionBwd;
    try {
      // MESHSIM_CUDNN_DQ_ACCUM=1 or 0 forces the backward's fp32 dQ accumulator on or off (a
      // test hook: SdpaGraphOnCudnn checks that path at a size it can afford); unset, cuDNN's
      // rule by the scores' bytes decides.
      const char* force = std::getenv("MESHSIM_CUDNN_DQ_ACCUM");
      const bool accum = force && *force ? std::string(force) == "1" : sdpa::backward_uses_dq_accum(s);
      auto plan = std::make_unique<SdpaPlan>(*api_, handle_,
                                             backward ? sdpa::backward_graph(s, accum) : sdpa::forward_graph(s));
      if (backward) {
        const auto rows = static_cast<std::size_t>(s.heads_q * s.seq_q);
        e.softmax_sum_bytes = round_up(rows * sizeof(float));
        if (accum) e.dq_accum_bytes = round_up(rows * static_cast<std::size_t>(s.head_dim) * sizeof(float));
      }
      const std::size_t bytes = e.softmax_sum_bytes + e.dq_accum_bytes +
                                round_up(static_cast<std::size_t>(std::max<std::int64_t>(plan->workspace_bytes(), 0)));
      if (const cudaError_t ce = cudaMalloc(&e.scratch, std::max<std::size_t>(bytes, 256))) {
        say(describe(c), std::string("meshsim's kernel: no memory for cuDNN's scratch (") + std::to_string(bytes) +
                             " B): " + cudaGetErrorString(ce));
        return Entry{};
      }
      say(describe(c), cudnn_version_text(api_->version()) + " fused attention, " + plan->text());
      e.plan = std::move(plan);
    } catch (const Error& err) {
      say(describe(c), std::string("meshsim's kernel: ") + err.what());
    }
    return e;
  }

  std::mutex mu_;
  const CudnnApi* api_ = nullptr;
  cudnnHandle_t handle_ = nullptr;
  std::string why_;
  std::map<std::string, Entry> plans_;  // by describe(call); kept, with their memory, for the process
};
#endif

class RealGpuApi final : public GpuApi {
 public:
  std::string error_string(Lib lib, int status) override {
    switch (lib) {
      case Lib::Cuda:
        return cudaGetErrorString(static_cast<cudaError_t>(status));
      case Lib::Cublas:
        return cublasGetStatusString(static_cast<cublasStatus_t>(status));
      case Lib::Nccl: {
        std::string s = ncclGetErrorString(static_cast<ncclResult_t>(status));
        const char* last = ncclGetLastError(nullptr);
        if (last != nullptr && *last != '\0') s += std::string(": ") + last;
        return s;
      }
    }
    return "unknown library";
  }

  int set_device(int device) override { return cudaSetDevice(device); }
  int malloc(void** ptr, std::size_t bytes) override { return cudaMalloc(ptr, bytes); }
  int free(void* ptr) override { return cudaFree(ptr); }
  int memset_async(void* ptr, int value, std::size_t bytes, StreamH stream) override {
    return cudaMemsetAsync(ptr, value, bytes, stream);
  }
  int memcpy_to_device(void* dst, const void* src, std::size_t bytes) override {
    return cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice);
  }
  int memcpy_to_host(void* dst, const void* src, std::size_t bytes) override {
    return cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost);
  }
  int stream_create(StreamH* stream) override { return cudaStreamCreateWithFlags(stream, cudaStreamNonBlocking); }
  int stream_destroy(StreamH stream) override { return cudaStreamDestroy(stream); }
  int event_create(EventH* event) override { return cudaEventCreate(event); }
  int event_destroy(EventH event) override { return cudaEventDestroy(event); }
  int event_record(EventH event, StreamH stream) override { return cudaEventRecord(event, stream); }
  int stream_wait_event(StreamH stream, EventH event) override { return cudaStreamWaitEvent(stream, event, 0); }
  int event_query(EventH event, bool* done) override {
    const cudaError_t e = cudaEventQuery(event);
    *done = e == cudaSuccess;
    if (e == cudaErrorNotReady) {
      (void)cudaGetLastError();  // not-ready is not sticky, but clear it so later checks see only real errors
      return cudaSuccess;
    }
    return e;
  }
  int event_elapsed_ms(float* ms, EventH start, EventH end) override { return cudaEventElapsedTime(ms, start, end); }

  int get_unique_id(std::string* id) override {
    ncclUniqueId u;
    const ncclResult_t r = ncclGetUniqueId(&u);
    id->assign(u.internal, sizeof(u.internal));
    return r;
  }
  int comm_init_rank(CommH* comm, int nranks, const std::string& id, int rank) override {
    ncclUniqueId u;
    if (id.size() != sizeof(u.internal)) return ncclInvalidArgument;
    std::memcpy(u.internal, id.data(), sizeof(u.internal));
    return ncclCommInitRank(comm, nranks, u, rank);
  }
  int comm_split(CommH comm, int color, int key, CommH* out) override {
    return ncclCommSplit(comm, color, key, out, nullptr);
  }
  int comm_get_async_error(CommH comm, int* async_status) override {
    ncclResult_t a = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(comm, &a);
    *async_status = a;
    return r;
  }
  int comm_abort(CommH comm) override { return ncclCommAbort(comm); }
  int comm_destroy(CommH comm) override { return ncclCommDestroy(comm); }
  int group_start() override { return ncclGroupStart(); }
  int group_end() override { return ncclGroupEnd(); }
  int send(const void* buf, std::size_t bytes, int peer, CommH comm, StreamH stream) override {
    return ncclSend(buf, bytes, ncclChar, peer, comm, stream);
  }
  int recv(void* buf, std::size_t bytes, int peer, CommH comm, StreamH stream) override {
    return ncclRecv(buf, bytes, ncclChar, peer, comm, stream);
  }
  int collective(CollKind kind, const void* send, void* recv, std::size_t count, DType type, int root, CommH comm,
                 StreamH stream) override {
    const ncclDataType_t t = nccl_type(type);
    switch (kind) {
      case CollKind::AllReduce:
        return ncclAllReduce(send, recv, count, t, ncclSum, comm, stream);
      case CollKind::AllGather:
        return ncclAllGather(send, recv, count, t, comm, stream);
      case CollKind::ReduceScatter:
        return ncclReduceScatter(send, recv, count, t, ncclSum, comm, stream);
      case CollKind::Broadcast:
        return ncclBroadcast(send, recv, count, t, root, comm, stream);
      case CollKind::Reduce:
        return ncclReduce(send, recv, count, t, ncclSum, root, comm, stream);
      case CollKind::AllToAll:
        return ncclAlltoAll(send, recv, count, t, comm, stream);
      case CollKind::SendRecv:
        break;
    }
    return ncclInvalidArgument;
  }

  int blas_create(BlasH* handle) override { return cublasCreate(handle); }
  int blas_destroy(BlasH handle) override { return cublasDestroy(handle); }
  int blas_set_stream(BlasH handle, StreamH stream) override { return cublasSetStream(handle, stream); }
  int blas_set_workspace(BlasH handle, void* ptr, std::size_t bytes) override {
    return cublasSetWorkspace(handle, ptr, bytes);
  }
  int gemm(BlasH handle, std::int64_t m, std::int64_t n, std::int64_t k, DType type, const void* a, const void* b,
           void* c) override {
    const float one = 1.0f, zero = 0.0f;
    const cudaDataType_t t = cuda_type(type);
    // Column-major: C (m x n, ld m) = A (m x k, ld m) * B (k x n, ld k).
    if (m <= INT_MAX && n <= INT_MAX && k <= INT_MAX)
      return cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(m), static_cast<int>(n),
                          static_cast<int>(k), &one, a, t, static_cast<int>(m), b, t, static_cast<int>(k), &zero, c, t,
                          static_cast<int>(m), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    return cublasGemmEx_64(handle, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, a, t, m, b, t, k, &zero, c, t, m,
                           CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  }

  int reduce_sum(float* dst, const float* src, std::size_t n, StreamH stream) override {
    return kernels::reduce_sum_cuda(dst, src, n, stream);
  }
  // The CUDA twin of run_kernel_call_cpu (backend/kernel_call.cpp), operand for operand: the
  // float32 kernels for a float32 call, their bf16 overloads (cuda_ops.h) for a bf16 one.
  int kernel(const KernelCall& c, float* ws, StreamH stream) override {
#ifdef MESHSIM_HAVE_CUDNN
    const AttentionChoice choice = attention_choice();  // read per call: a test may set it
    int status = 0;
    if (c.bf16 && choice != AttentionChoice::Meshsim &&
        (c.fn == KernelCall::Fn::AttentionFwd || c.fn == KernelCall::Fn::AttentionBwd) &&
        cudnn_.run(c, ws, stream, choice, &status))
      return status;
#endif
    if (c.bf16) return run_call(c, ws, stream, [&](int j) { return c.bf16_operand(ws, j); });
    return run_call(c, ws, stream, [&](int j) { return c.operand(ws, j); });
  }
  // `act(j)`: operand j as the call's activation type (float* or kernels::bf16*); statistics,
  // targets and AdamW's operands are float32 (or int64) in either.
  template <class Act>
  static int run_call(const KernelCall& c, float* ws, StreamH stream, Act act) {
    using Fn = KernelCall::Fn;
    namespace K = kernels;
    auto f32 = [&](int j) { return c.operand(ws, j); };
    auto ids = [&](int j) { return reinterpret_cast<const std::int64_t*>(f32(j)); };
    const std::int64_t r = c.rows, h = c.cols;
    const auto n = static_cast<std::size_t>(r * h);
    const std::uint64_t seed = 1234;
    const auto scale = static_cast<float>(c.scale());
    switch (c.fn) {
      case Fn::Pass:
        return K::stream_pass_cuda(f32(1), f32(0), static_cast<std::size_t>(h), 0.5f, stream);
      case Fn::LayerNormFwd:
        return K::layernorm_forward_cuda(act(0), act(1), act(2), act(3), f32(4), f32(5), r, h, 1e-5f, stream);
      case Fn::LayerNormBwd:
        return K::layernorm_backward_cuda(act(0), act(1), act(2), f32(3), f32(4), act(5), f32(6), f32(7), r, h, stream);
      case Fn::RmsNormFwd:
        return K::rmsnorm_forward_cuda(act(0), act(1), act(2), f32(3), r, h, 1e-5f, stream);
      case Fn::RmsNormBwd:
        return K::rmsnorm_backward_cuda(act(0), act(1), act(2), f32(3), act(4), f32(5), r, h, stream);
      case Fn::RopeFwd:
        return K::rope_forward_cuda(act(0), f32(1), act(2), r, c.full, h, stream);
      case Fn::RopeBwd:
        return K::rope_backward_cuda(act(0), f32(1), act(2), r, c.full, h, stream);
      case Fn::LayerNorm2dFwd:
        if (int e = K::layernorm2d_stats_cuda(act(0), f32(1), r, h, stream)) return e;
        return K::layernorm2d_apply_cuda(act(0), f32(1), act(2), act(3), act(4), f32(5), f32(6), r, h, c.full, 1e-5f,
                                         stream);
      case Fn::LayerNorm2dBwd:
        if (int e = K::layernorm2d_backward_stats_cuda(act(0), act(1), act(2), f32(3), f32(4), f32(5), r, h, stream))
          return e;
        return K::layernorm2d_backward_apply_cuda(act(0), act(1), act(2), f32(3), f32(4), f32(5), act(6), f32(7),
                                                  f32(8), r, h, c.full, stream);
      case Fn::GeluFwd:
        return K::gelu_forward_cuda(act(0), act(1), n, stream);
      case Fn::GeluBwd:
        return K::gelu_backward_cuda(act(0), act(1), act(2), n, stream);
      case Fn::SwigluFwd:
        return K::swiglu_forward_cuda(act(0), act(0) + h, 2 * h, act(1), r, h, stream);
      case Fn::SwigluBwd:
        return K::swiglu_backward_cuda(act(0), act(1), act(1) + h, 2 * h, act(2), act(2) + h, r, h, stream);
      case Fn::DropoutFwd:
        return K::dropout_forward_cuda(act(0), act(1), n, kDropoutP, seed, 0, stream);
      case Fn::DropoutBwd:
        return K::dropout_backward_cuda(act(0), act(1), n, kDropoutP, seed, 0, stream);
      case Fn::DropoutAddFwd:  // y = dropout(x) + residual, one pass (bit-identical to the CPU's two in float32)
        return K::dropout_add_forward_cuda(act(0), act(1), act(2), n, kDropoutP, seed, 0, stream);
      case Fn::SoftmaxFwd:
        return K::softmax_forward_cuda(act(0), act(1), 1, r, h, 1.0f, {}, stream);
      case Fn::SoftmaxBwd:
        return K::softmax_backward_cuda(act(0), act(1), act(2), 1, r, h, 1.0f, stream);
      case Fn::CrossEntropyFwd:
        if (int e = K::cross_entropy_local_max_cuda(act(0), f32(1), r, h, stream)) return e;
        if (int e = K::cross_entropy_local_stats_cuda(act(0), f32(1), ids(2), f32(3), r, h, 0, stream)) return e;
        return K::cross_entropy_loss_cuda(f32(1), f32(3), ids(2), f32(4), r, stream);
      case Fn::CrossEntropyBwd:
        return K::cross_entropy_backward_cuda(act(0), f32(1), f32(3), ids(2), 1.0f / static_cast<float>(r), act(4), r,
                                              h, 0, stream);
      case Fn::LseMerge:
        return K::attention_merge_cuda(act(0), f32(1), act(2), f32(3), act(4), f32(5), r, h, stream);
      case Fn::AttentionFwd:
        return K::attention_forward_cuda(act(0), act(1), act(2), act(3), f32(4), c.shape, scale, {c.causal, 0, 0},
                                         stream);
      case Fn::AttentionBwd:
        return K::attention_backward_cuda(act(0), act(1), act(2), act(3), act(4), f32(5), act(6), act(7), act(8),
                                          c.shape, scale, {c.causal, 0, 0}, stream);
      case Fn::AdamW:
        return K::adamw_step_cuda(f32(0), f32(1), f32(2), f32(3), n, {}, 1, stream);
    }
    return 1;  // cudaErrorInvalidValue
  }
  int stream_pass(float* dst, const float* src, std::size_t n, StreamH stream) override {
    return kernels::stream_pass_cuda(dst, src, n, 1.0f, stream);
  }

 private:
#ifdef MESHSIM_HAVE_CUDNN
  CudnnAttention cudnn_;
#endif
};

}  // namespace

// The plugin table's gpu_api (plugin.cpp).
GpuApi& plugin_gpu_api() {
  static RealGpuApi api;  // stateless forwards; one per process is enough
  return api;
}

}  // namespace meshsim::cuda
