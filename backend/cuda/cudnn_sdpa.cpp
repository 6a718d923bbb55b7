#include "backend/cuda/cudnn_sdpa.h"

#include <dlfcn.h>

#include <cstdlib>

#include "core/error.h"

// OPERATIONGRAPH_HANDLE and EXECUTION_PLAN_HANDLE are marked deprecated in cuDNN 9.19's
// header, yet they are how a graph and a plan are bound to a handle there.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace meshsim::cuda {

std::string cudnn_version_text(std::size_t v) {
  // 9.x and later: major * 10000 + minor * 100 + patch.
  return "cuDNN " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

namespace {

template <class F>
bool bind(void* lib, const char* name, F*& slot, std::string* missing) {
  slot = reinterpret_cast<F*>(dlsym(lib, name));
  if (!slot && missing->empty()) *missing = name;
  return slot != nullptr;
}

}  // namespace

CudnnApi load_cudnn_file(const std::string& file, std::string* why) {
  CudnnApi a;
  void* lib = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* e = dlerror();
    *why = "cannot load " + file + " (" + (e ? e : "unknown error") +
           "); put cuDNN 9's lib folder (the CUDA toolkit's, or the nvidia-cudnn wheel's nvidia/cudnn/lib) on "
           "LD_LIBRARY_PATH, or set MESHSIM_CUDNN to libcudnn.so.9";
    return a;
  }
  std::string missing;
  bind(lib, "cudnnBackendCreateDescriptor", a.create_descriptor, &missing);
  bind(lib, "cudnnBackendDestroyDescriptor", a.destroy_descriptor, &missing);
  bind(lib, "cudnnBackendSetAttribute", a.set_attribute, &missing);
  bind(lib, "cudnnBackendGetAttribute", a.get_attribute, &missing);
  bind(lib, "cudnnBackendFinalize", a.finalize, &missing);
  bind(lib, "cudnnBackendExecute", a.execute, &missing);
  bind(lib, "cudnnCreate", a.create, &missing);
  bind(lib, "cudnnDestroy", a.destroy, &missing);
  bind(lib, "cudnnSetStream", a.set_stream, &missing);
  bind(lib, "cudnnGetErrorString", a.error_string, &missing);
  bind(lib, "cudnnGetLastErrorString", a.last_error_string, &missing);
  bind(lib, "cudnnGetVersion", a.version, &missing);
  if (!missing.empty()) {
    *why = file + " lacks " + missing + ": it is not cuDNN 9 (meshsim needs cuDNN 9's backend API)";
    return CudnnApi{};
  }
  if (a.version() < 90000) {
    *why = file + " is " + cudnn_version_text(a.version()) + "; meshsim's attention graphs need cuDNN 9";
    return CudnnApi{};
  }
  a.library = file;
  return a;
}

const CudnnApi* load_cudnn(std::string* why) {
  static std::string failure;
  static const CudnnApi api = [] {
    const char* env = std::getenv("MESHSIM_CUDNN");
    return load_cudnn_file(env && *env ? env : "libcudnn.so.9", &failure);
  }();
  if (api.library.empty()) {
    if (why) *why = failure;
    return nullptr;
  }
  return &api;
}

std::string cudnn_error(const CudnnApi& api, cudnnStatus_t status) {
  std::string s = api.error_string ? api.error_string(status) : "status " + std::to_string(static_cast<int>(status));
  if (api.last_error_string) {
    char buf[512] = {0};
    api.last_error_string(buf, sizeof buf);
    if (buf[0]) s += std::string(": ") + buf;
  }
  return s;
}

std::string cudnn_device_properties_json(const CudnnApi& api, int device) {
  cudnnBackendDescriptor_t d = nullptr;
  auto fail = [&](const std::string& step, cudnnStatus_t st) {
    if (d) api.destroy_descriptor(d);
    return Error("cuDNN device properties: " + step + ": " + cudnn_error(api, st));
  };
  cudnnStatus_t st = api.create_descriptor(CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR, &d);
  if (st != CUDNN_STATUS_SUCCESS) throw fail("create", st);
  const std::int32_t id = device;
  if ((st = api.set_attribute(d, CUDNN_ATTR_DEVICEPROP_DEVICE_ID, CUDNN_TYPE_INT32, 1, &id)) != CUDNN_STATUS_SUCCESS)
    throw fail("device id", st);
  if ((st = api.finalize(d)) != CUDNN_STATUS_SUCCESS) throw fail("finalize", st);
  std::int64_t n = 0;
  if ((st = api.get_attribute(d, CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION, CUDNN_TYPE_CHAR, 0, &n, nullptr)) !=
      CUDNN_STATUS_SUCCESS)
    throw fail("size", st);
  std::string json(static_cast<std::size_t>(n), '\0');
  if ((st = api.get_attribute(d, CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION, CUDNN_TYPE_CHAR, n, &n, json.data())) !=
      CUDNN_STATUS_SUCCESS)
    throw fail("json", st);
  api.destroy_descriptor(d);
  while (!json.empty() && json.back() == '\0') json.pop_back();
  return json;
}

CudnnDevice::CudnnDevice(const CudnnApi& api, const std::string& json) : api_(api) {
  auto fail = [&](const std::string& step, cudnnStatus_t st) {
    if (d_) api_.destroy_descriptor(d_);
    return Error("cuDNN device description: " + step + ": " + cudnn_error(api_, st) +
                 " (the JSON cudnn_device_properties_json wrote on the GPU, cuDNN >= 9.8)");
  };
  cudnnStatus_t st = api_.create_descriptor(CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR, &d_);
  if (st != CUDNN_STATUS_SUCCESS) throw fail("create", st);
  st = api_.set_attribute(d_, CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION, CUDNN_TYPE_CHAR,
                          static_cast<std::int64_t>(json.size()), json.data());
  if (st != CUDNN_STATUS_SUCCESS) throw fail("json", st);
  if ((st = api_.finalize(d_)) != CUDNN_STATUS_SUCCESS) throw fail("finalize", st);
}

CudnnDevice::~CudnnDevice() { api_.destroy_descriptor(d_); }

namespace {

cudnnDataType_t data_type(sdpa::DataType t) {
  switch (t) {
    case sdpa::DataType::Float:
      return CUDNN_DATA_FLOAT;
    case sdpa::DataType::Bf16:
      return CUDNN_DATA_BFLOAT16;
    case sdpa::DataType::Int32:
      return CUDNN_DATA_INT32;
    case sdpa::DataType::Bool:
      return CUDNN_DATA_BOOLEAN;
  }
  return CUDNN_DATA_FLOAT;
}

cudnnPointwiseMode_t pointwise_mode(sdpa::Pointwise p) {
  using P = sdpa::Pointwise;
  switch (p) {
    case P::Add:
      return CUDNN_POINTWISE_ADD;
    case P::Sub:
      return CUDNN_POINTWISE_SUB;
    case P::Mul:
      return CUDNN_POINTWISE_MUL;
    case P::Div:
      return CUDNN_POINTWISE_DIV;
    case P::Exp:
      return CUDNN_POINTWISE_EXP;
    case P::Log:
      return CUDNN_POINTWISE_LOG;
    case P::Identity:
      return CUDNN_POINTWISE_IDENTITY;
    case P::GenIndex:
      return CUDNN_POINTWISE_GEN_INDEX;
    case P::CmpGe:
      return CUDNN_POINTWISE_CMP_GE;
    case P::BinarySelect:
      return CUDNN_POINTWISE_BINARY_SELECT;
  }
  return CUDNN_POINTWISE_IDENTITY;
}

}  // namespace

cudnnBackendDescriptor_t SdpaPlan::make(cudnnBackendDescriptorType_t type, const std::string& step) {
  cudnnBackendDescriptor_t d = nullptr;
  const cudnnStatus_t st = api_.create_descriptor(type, &d);
  if (st != CUDNN_STATUS_SUCCESS)
    throw Error("cuDNN attention: " + step + ": creating a descriptor failed: " + cudnn_error(api_, st));
  owned_.push_back(d);
  return d;
}

void SdpaPlan::set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                   std::int64_t count, const void* value, const std::string& step) {
  const cudnnStatus_t st = api_.set_attribute(d, name, type, count, value);
  if (st != CUDNN_STATUS_SUCCESS)
    throw Error("cuDNN attention: " + step + ": attribute " + std::to_string(static_cast<int>(name)) +
                " refused: " + cudnn_error(api_, st));
}

void SdpaPlan::finalize(cudnnBackendDescriptor_t d, const std::string& step) {
  const cudnnStatus_t st = api_.finalize(d);
  if (st != CUDNN_STATUS_SUCCESS) throw Error("cuDNN attention: " + step + ": not finalized: " + cudnn_error(api_, st));
}

SdpaPlan::SdpaPlan(const CudnnApi& api, cudnnHandle_t handle, const sdpa::Graph& g, Until until)
    : api_(api), graph_(g) {
  build(handle, nullptr, until);
}

SdpaPlan::SdpaPlan(const CudnnApi& api, const CudnnDevice& device, const sdpa::Graph& g, Until until)
    : api_(api), graph_(g), deviceless_(true) {
  build(nullptr, device.descriptor(), until);
}

void SdpaPlan::build(cudnnHandle_t handle, cudnnBackendDescriptor_t device, Until until) {
  try {
    // Tensors.
    for (const sdpa::Tensor& t : graph_.tensors) {
      const std::string step = "tensor " + t.name;
      cudnnBackendDescriptor_t d = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR, step);
      const cudnnDataType_t dt = data_type(t.type);
      const std::int64_t align = 16;
      const bool is_virtual = t.is_virtual, by_value = t.by_value;
      set(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt, step);
      set(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, t.dims.data(), step);
      set(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, t.strides.data(), step);
      set(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &t.uid, step);
      set(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, step);
      set(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual, step);
      if (by_value) {
        set(d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value, step);
        scalar_uids_.push_back(t.uid);
        scalar_values_.push_back(static_cast<float>(t.value));
      }
      finalize(d, step);
      tensors_[t.uid] = d;
    }
    auto tensor = [&](std::int64_t uid) { return &tensors_.at(uid); };

    // Operations.
    std::vector<cudnnBackendDescriptor_t> ops;
    for (const sdpa::Op& op : graph_.ops) {
      const std::string step = "op " + op.name;
      cudnnBackendDescriptor_t o = nullptr;
      switch (op.kind) {
        case sdpa::OpKind::Matmul: {
          cudnnBackendDescriptor_t m = make(CUDNN_BACKEND_MATMUL_DESCRIPTOR, step);
          const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
          set(m, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp, step);
          finalize(m, step);
          o = make(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, step);
          set(o, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, tensor(op.in[0]), step);
          set(o, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, tensor(op.in[1]), step);
          set(o, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, tensor(op.out), step);
          set(o, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &m, step);
          break;
        }
        case sdpa::OpKind::Pointwise: {
          cudnnBackendDescriptor_t p = make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, step);
          const cudnnPointwiseMode_t mode = pointwise_mode(op.pw);
          const cudnnDataType_t prec = data_type(op.compute);
          set(p, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, step);
          set(p, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec, step);
          if (op.pw == sdpa::Pointwise::GenIndex) {
            const std::int64_t axis = op.axis;
            set(p, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, step);
          }
          finalize(p, step);
          o = make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, step);
          set(o, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &p, step);
          set(o, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, tensor(op.in[0]), step);
          if (op.in.size() > 1)
            set(o, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, tensor(op.in[1]), step);
          if (op.in.size() > 2)
            set(o, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, tensor(op.in[2]), step);
          set(o, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, tensor(op.out), step);
          break;
        }
        case sdpa::OpKind::Reduction: {
          cudnnBackendDescriptor_t r = make(CUDNN_BACKEND_REDUCTION_DESCRIPTOR, step);
          const cudnnReduceTensorOp_t rop =
              op.reduce == sdpa::Reduce::Max ? CUDNN_REDUCE_TENSOR_MAX : CUDNN_REDUCE_TENSOR_ADD;
          const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
          set(r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &rop, step);
          set(r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp, step);
          finalize(r, step);
          o = make(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, step);
          set(o, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, tensor(op.in[0]), step);
          set(o, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, tensor(op.out), step);
          set(o, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &r, step);
          break;
        }
        case sdpa::OpKind::Reshape:
          o = make(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, step);
          set(o, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, tensor(op.in[0]), step);
          set(o, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, tensor(op.out), step);
          break;
      }
      finalize(o, step);
      ops.push_back(o);
    }

    // The operation graph, the heuristics' engine configurations, the first plan that finalizes.
    cudnnBackendDescriptor_t graph = make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph");
    if (handle) set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle, "operation graph");
    set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<std::int64_t>(ops.size()),
        ops.data(), "operation graph");
    finalize(graph, "operation graph");
    if (until == Until::OperationGraph) return;

    cudnnBackendDescriptor_t heur = make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "heuristics");
    const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    set(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph, "heuristics");
    set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "heuristics");
    if (device) set(heur, CUDNN_ATTR_ENGINEHEUR_DEVICEPROP, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &device, "heuristics");
    finalize(heur, "heuristics");
    std::int64_t count = 0;
    cudnnStatus_t st =
        api_.get_attribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr);
    if (st != CUDNN_STATUS_SUCCESS)
      throw Error("cuDNN attention: heuristics: no result count: " + cudnn_error(api_, st));
    if (count <= 0)
      throw Error("cuDNN attention: heuristics: no engine takes this graph (" + cudnn_error(api_, st) + ")");
    std::vector<cudnnBackendDescriptor_t> cfgs;
    for (std::int64_t k = 0; k < count; ++k) cfgs.push_back(make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "heuristics"));
    std::int64_t got = 0;
    st = api_.get_attribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got,
                            cfgs.data());
    if (st != CUDNN_STATUS_SUCCESS) throw Error("cuDNN attention: heuristics: results: " + cudnn_error(api_, st));
    configs_ = static_cast<int>(got);
    if (got <= 0)
      throw Error("cuDNN attention: heuristics: none of its " + std::to_string(count) +
                  " engine configurations passes cuDNN's support checks here (" + cudnn_error(api_, st) + ")");
    for (std::int64_t k = 0; k < got; ++k) ranked_.push_back(engine_of(cfgs[static_cast<std::size_t>(k)]));
    if (until == Until::Heuristics) {
      engine_ = ranked_.front();
      chosen_ = 1;
      return;
    }
    std::string last;
    for (std::int64_t k = 0; k < got && !plan_; ++k) {
      cudnnBackendDescriptor_t plan = make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, "execution plan");
      if (device)
        set(plan, CUDNN_ATTR_EXECUTION_PLAN_DEVICEPROP, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &device, "execution plan");
      else
        set(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle, "execution plan");
      set(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfgs[k], "execution plan");
      st = api_.finalize(plan);
      if (st != CUDNN_STATUS_SUCCESS) {
        last = cudnn_error(api_, st);
        continue;
      }
      plan_ = plan;
      chosen_ = static_cast<int>(k) + 1;
      std::int64_t n = 0;
      st = api_.get_attribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &workspace_);
      if (st != CUDNN_STATUS_SUCCESS)
        throw Error("cuDNN attention: execution plan: workspace size: " + cudnn_error(api_, st));
      engine_ = ranked_[static_cast<std::size_t>(k)];
    }
    if (!plan_)
      throw Error("cuDNN attention: execution plan: none of the " + std::to_string(got) +
                  " engine configurations finalizes (last: " + last + ")");
  } catch (...) {
    for (auto it = owned_.rbegin(); it != owned_.rend(); ++it) api_.destroy_descriptor(*it);
    owned_.clear();
    throw;
  }
}

// A configuration's engine (its global index): for the record only, so -1 when unreadable.
std::int64_t SdpaPlan::engine_of(cudnnBackendDescriptor_t cfg) {
  std::int64_t n = 0, index = -1;
  cudnnBackendDescriptor_t engine = make(CUDNN_BACKEND_ENGINE_DESCRIPTOR, "engine");
  if (api_.get_attribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &engine) !=
          CUDNN_STATUS_SUCCESS ||
      api_.get_attribute(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &index) !=
          CUDNN_STATUS_SUCCESS)
    return -1;
  return index;
}

SdpaPlan::~SdpaPlan() {
  for (auto it = owned_.rbegin(); it != owned_.rend(); ++it) api_.destroy_descriptor(*it);
}

std::string SdpaPlan::text() const {
  return "engine " + std::to_string(engine_) + " (config " + std::to_string(chosen_) + " of " +
         std::to_string(configs_) + ")" + (plan_ ? ", workspace " + std::to_string(workspace_) + " B" : ", not built");
}

cudnnStatus_t SdpaPlan::execute(cudnnHandle_t handle, const std::map<std::int64_t, void*>& ptrs,
                                void* workspace) const {
  if (!plan_ || deviceless_) return CUDNN_STATUS_BAD_PARAM;
  std::vector<std::int64_t> uids;
  std::vector<void*> data;
  for (std::int64_t uid : graph_.bound_uids()) {
    auto it = ptrs.find(uid);
    if (it == ptrs.end() || !it->second) return CUDNN_STATUS_BAD_PARAM;
    uids.push_back(uid);
    data.push_back(it->second);
  }
  for (std::size_t k = 0; k < scalar_uids_.size(); ++k) {
    uids.push_back(scalar_uids_[k]);
    data.push_back(const_cast<float*>(&scalar_values_[k]));
  }
  cudnnBackendDescriptor_t pack = nullptr;
  cudnnStatus_t st = api_.create_descriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack);
  if (st != CUDNN_STATUS_SUCCESS) return st;
  const auto n = static_cast<std::int64_t>(uids.size());
  if ((st = api_.set_attribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids.data())) ==
          CUDNN_STATUS_SUCCESS &&
      (st = api_.set_attribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, data.data())) ==
          CUDNN_STATUS_SUCCESS &&
      (st = api_.set_attribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace)) ==
          CUDNN_STATUS_SUCCESS &&
      (st = api_.finalize(pack)) == CUDNN_STATUS_SUCCESS)
    st = api_.execute(handle, plan_, pack);
  api_.destroy_descriptor(pack);
  return st;
}

}  // namespace meshsim::cuda
