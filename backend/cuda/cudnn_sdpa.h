// cuDNN's fused attention, forward and backward, from the graphs of sdpa_graph.h (issue 34,
// item 2). cuDNN is loaded at run time (dlopen, like the plugin itself), so meshsim links
// no cuDNN library and runs without one: when cuDNN is absent, or declines a graph, the
// cuda backend runs its own attention kernel and says why (gpu_api_real.cpp).
//
// This file speaks cuDNN's backend API (cudnn_graph.h) through a table of its functions,
// CudnnApi: load_cudnn() fills it from libcudnn.so.9; the tests fill it with a fake that
// records every descriptor (cudnn_sdpa_test.cpp), so the lowering is checked without a GPU.
//
//   std::string why;
//   const CudnnApi* api = load_cudnn(&why);                  // nullptr: why says what is missing
//   SdpaPlan plan(*api, handle, sdpa::forward_graph(shape));  // throws Error when cuDNN declines
//   plan.execute(handle, {{sdpa::kQ, q}, ...}, workspace);    // a device pointer per bound uid
//
// Lowering: one tensor descriptor per graph tensor (uid, bf16/float/int32/bool, 4 dims and
// strides, 16-byte alignment, virtual or by value), one operation per graph op (matmul with
// float accumulation, pointwise, reduction, reshape), the operation graph, cuDNN's
// heuristics (mode A), and the first engine configuration that finalizes into an
// execution plan. Scalars (the softmax scale, -inf, 1) are by-value tensors whose host values
// go into every variant pack.
#pragma once

#include <cudnn_graph.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "backend/cuda/sdpa_graph.h"

namespace meshsim::cuda {

struct CudnnApi {
  cudnnStatus_t (*create_descriptor)(cudnnBackendDescriptorType_t, cudnnBackendDescriptor_t*) = nullptr;
  cudnnStatus_t (*destroy_descriptor)(cudnnBackendDescriptor_t) = nullptr;
  cudnnStatus_t (*set_attribute)(cudnnBackendDescriptor_t, cudnnBackendAttributeName_t, cudnnBackendAttributeType_t,
                                 int64_t, const void*) = nullptr;
  cudnnStatus_t (*get_attribute)(cudnnBackendDescriptor_t, cudnnBackendAttributeName_t, cudnnBackendAttributeType_t,
                                 int64_t, int64_t*, void*) = nullptr;
  cudnnStatus_t (*finalize)(cudnnBackendDescriptor_t) = nullptr;
  cudnnStatus_t (*execute)(cudnnHandle_t, cudnnBackendDescriptor_t, cudnnBackendDescriptor_t) = nullptr;
  cudnnStatus_t (*create)(cudnnHandle_t*) = nullptr;
  cudnnStatus_t (*destroy)(cudnnHandle_t) = nullptr;
  cudnnStatus_t (*set_stream)(cudnnHandle_t, cudaStream_t) = nullptr;
  const char* (*error_string)(cudnnStatus_t) = nullptr;
  void (*last_error_string)(char*, size_t) = nullptr;
  size_t (*version)() = nullptr;
  std::string library;  // the file the table came from
};

// "cuDNN 9.19.0" from cudnnGetVersion()'s 91900.
std::string cudnn_version_text(std::size_t version);

// cuDNN's backend API, loaded once per process: the file $MESHSIM_CUDNN names when set, else
// libcudnn.so.9 by the dynamic loader's search (the CUDA toolkit's lib64, or the wheel's
// nvidia/cudnn/lib on LD_LIBRARY_PATH). nullptr when it cannot be loaded or lacks a function;
// *why then says which and how to fix it (one line).
const CudnnApi* load_cudnn(std::string* why);

// The table from `file` (a path or a soname), not cached: empty `library` and *why set when
// it cannot be used.
CudnnApi load_cudnn_file(const std::string& file, std::string* why);

// The GPU's properties as cuDNN serializes them (cuDNN >= 9.8; needs the device): the JSON that
// lets cuDNN run its heuristics and build plans later on a machine without that GPU
// (deviceless ahead-of-time compilation). Throws Error naming the step.
std::string cudnn_device_properties_json(const CudnnApi& api, int device);

// `status` as text: cuDNN's name for it plus its last error message when it has one.
std::string cudnn_error(const CudnnApi& api, cudnnStatus_t status);

// A GPU described by that JSON (cudnn_device_properties_json, e.g. the H200's of run 26 in
// validation/gpu-profiles/): cuDNN's heuristics and plan builds run against it on a machine
// without the GPU (cuDNN >= 9.8). Throws Error naming the step when cuDNN rejects the JSON.
class CudnnDevice {
 public:
  CudnnDevice(const CudnnApi& api, const std::string& json);
  ~CudnnDevice();
  CudnnDevice(const CudnnDevice&) = delete;
  CudnnDevice& operator=(const CudnnDevice&) = delete;
  cudnnBackendDescriptor_t descriptor() const { return d_; }

 private:
  const CudnnApi& api_;
  cudnnBackendDescriptor_t d_ = nullptr;
};

class SdpaPlan {
 public:
  // How far to lower: the whole way; to cuDNN's heuristics (the engine configurations it ranks
  // for the graph, none built); or to a finalized operation graph (cuDNN checks every tensor, op
  // and the graph's structure; no handle, so no GPU, is needed: `handle` may be nullptr). Only a
  // plan lowered the whole way with a handle can execute.
  enum class Until { OperationGraph, Heuristics, ExecutionPlan };
  // Throws Error, one line naming the step ("tensor S_scaled", "op bmm1", "heuristics",
  // "execution plan"), cuDNN's status and message, when cuDNN does not take the graph.
  SdpaPlan(const CudnnApi& api, cudnnHandle_t handle, const sdpa::Graph& g, Until until = Until::ExecutionPlan);
  // Deviceless: the heuristics (and with Until::ExecutionPlan the plan) for `device`, no handle
  // and no GPU. cuDNN's support checks for its run-time compiled engines want a libcuda.so.1
  // loaded (the toolkit's stub does), and compiling a plan needs the real driver; such a plan
  // cannot execute here.
  SdpaPlan(const CudnnApi& api, const CudnnDevice& device, const sdpa::Graph& g, Until until = Until::Heuristics);
  ~SdpaPlan();
  SdpaPlan(const SdpaPlan&) = delete;
  SdpaPlan& operator=(const SdpaPlan&) = delete;

  const sdpa::Graph& graph() const { return graph_; }
  std::int64_t workspace_bytes() const { return workspace_; }
  std::int64_t engine() const { return engine_; }  // the chosen engine's global index, -1 if unknown
  int configs() const { return configs_; }         // engine configurations the heuristics offered
  // Their engines' global indices, in the heuristics' order (-1 where unreadable).
  const std::vector<std::int64_t>& ranked_engines() const { return ranked_; }
  std::string text() const;  // "engine 8 (config 1 of 3), workspace 0 B"; "..., not built" before a plan

  // Runs the plan on the handle's stream: `ptrs` holds the device pointer of every uid in
  // graph().bound_uids() (kDqAccum zeroed by the caller); the workspace holds at least
  // workspace_bytes(). Returns cuDNN's status (a missing pointer, or a plan lowered only to
  // its operation graph, or built deviceless: CUDNN_STATUS_BAD_PARAM).
  cudnnStatus_t execute(cudnnHandle_t handle, const std::map<std::int64_t, void*>& ptrs, void* workspace) const;

 private:
  cudnnBackendDescriptor_t make(cudnnBackendDescriptorType_t type, const std::string& step);
  void set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
           std::int64_t count, const void* value, const std::string& step);
  void finalize(cudnnBackendDescriptor_t d, const std::string& step);
  void build(cudnnHandle_t handle, cudnnBackendDescriptor_t device, Until until);
  std::int64_t engine_of(cudnnBackendDescriptor_t cfg);

  const CudnnApi& api_;
  sdpa::Graph graph_;
  std::vector<cudnnBackendDescriptor_t> owned_;  // destroyed in reverse order
  std::map<std::int64_t, cudnnBackendDescriptor_t> tensors_;
  std::vector<std::int64_t> scalar_uids_;
  std::vector<float> scalar_values_;  // host values of the by-value tensors, passed to execute
  cudnnBackendDescriptor_t plan_ = nullptr;
  std::int64_t workspace_ = 0, engine_ = -1;
  std::vector<std::int64_t> ranked_;
  int configs_ = 0, chosen_ = 0;
  bool deviceless_ = false;
};

}  // namespace meshsim::cuda
