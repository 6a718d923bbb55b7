// The lowering of the attention graphs to cuDNN's backend API (cudnn_sdpa.h), two ways:
// - against the real cuDNN 9 library where it loads (the build machine has the toolkit's):
//   cuDNN itself checks and finalizes every tensor, op and the operation graph. That needs no
//   GPU; the heuristics and the plan do, and run in the GPU acceptance run.
// - against a fake that records every descriptor: the plan's control flow (engine configs that
//   fail to finalize, none offered), the variant pack, and that every descriptor is destroyed.
#include "backend/cuda/cudnn_sdpa.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>

#include "core/error.h"

namespace meshsim::cuda {
namespace {

using sdpa::Shape;

const Shape kLlama{
    .batch = 1, .heads_q = 64, .heads_kv = 8, .seq_q = 4096, .seq_kv = 4096, .head_dim = 128, .causal = true};
const Shape kGpt3{
    .batch = 1, .heads_q = 96, .heads_kv = 96, .seq_q = 2048, .seq_kv = 2048, .head_dim = 128, .causal = true};

// ---- the real library ----

const CudnnApi* real_cudnn() {
  static std::string why;
  static const CudnnApi api = load_cudnn_file("libcudnn.so.9", &why);
  return api.library.empty() ? nullptr : &api;
}

TEST(CudnnSdpaReal, CudnnTakesEveryGraphUpToTheOperationGraph) {
  const CudnnApi* api = real_cudnn();
  if (!api) GTEST_SKIP() << "libcudnn.so.9 does not load here: nothing to check the lowering against";
  std::cout << "checking against " << cudnn_version_text(api->version()) << "\n";
  for (const Shape& base :
       {kLlama, kGpt3, Shape{.heads_q = 8, .heads_kv = 8, .seq_q = 512, .seq_kv = 1024, .head_dim = 64}})
    for (bool causal : {false, true}) {
      Shape s = base;
      s.causal = causal;
      for (const sdpa::Graph& g :
           {sdpa::forward_graph(s), sdpa::backward_graph(s, false), sdpa::backward_graph(s, true)}) {
        EXPECT_NO_THROW(SdpaPlan(*api, nullptr, g, SdpaPlan::Until::OperationGraph))
            << (g.backward ? "backward " : "forward ") << s.heads_q << "x" << s.seq_q << "x" << s.head_dim
            << (causal ? " causal" : "");
      }
    }
}

// Without a GPU, against the H200 of run 26 as cuDNN described it there (the JSON that
// OnAGpuEveryGraphGetsAnExecutionPlan wrote, kept in validation/gpu-profiles/): cuDNN's own
// heuristics rank, first for the Llama-3 and GPT-3 layers' graphs, the engines that ran them on
// that GPU in runs 26-28 (docs/validation/gpu-h200.md): 2 forward, 6 backward. cuDNN's support
// checks of its run-time compiled engines want a libcuda loaded: where none is (no driver), the
// CUDA toolkit's stub stands in (its calls fail, and the heuristics make none). Building the plans
// would compile and load the kernels, which needs a real driver.
TEST(CudnnSdpaReal, DevicelessHeuristicsRankTheEnginesTheH200Ran) {
  const CudnnApi* api = real_cudnn();
  if (!api) GTEST_SKIP() << "libcudnn.so.9 does not load here: no heuristics to run";
  if (api->version() < 90800) GTEST_SKIP() << cudnn_version_text(api->version()) << " has no deviceless builds (9.8)";
  if (!dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL) && !dlopen(MESHSIM_CUDA_STUB, RTLD_NOW | RTLD_GLOBAL))
    GTEST_SKIP() << "no libcuda.so.1 and no stub at " << MESHSIM_CUDA_STUB << ": cuDNN's support checks refuse";
  const std::string path =
      std::string(MESHSIM_SOURCE_DIR) + "/validation/gpu-profiles/run26-h200-cudnn-deviceprop.json";
  std::FILE* f = std::fopen(path.c_str(), "rb");
  ASSERT_NE(f, nullptr) << path;
  std::string json;
  for (int c; (c = std::fgetc(f)) != EOF;) json.push_back(static_cast<char>(c));
  std::fclose(f);
  const CudnnDevice h200(*api, json);
  for (const Shape& base : {kLlama, kGpt3})
    for (bool causal : {false, true}) {
      Shape s = base;
      s.causal = causal;
      for (const sdpa::Graph& g : {sdpa::forward_graph(s), sdpa::backward_graph(s)}) {
        const std::string what = std::string(g.backward ? "backward " : "forward ") + std::to_string(s.heads_q) + "x" +
                                 std::to_string(s.seq_q) + "x" + std::to_string(s.head_dim) + (causal ? " causal" : "");
        try {
          const SdpaPlan plan(*api, h200, g);
          std::cout << what << " on the H200, deviceless: " << plan.text() << "\n";
          ASSERT_FALSE(plan.ranked_engines().empty()) << what;
          EXPECT_EQ(plan.ranked_engines().front(), g.backward ? 6 : 2) << what;
          EXPECT_EQ(plan.execute(nullptr, {}, nullptr), CUDNN_STATUS_BAD_PARAM) << "a deviceless plan cannot run";
        } catch (const Error& e) {
          ADD_FAILURE() << what << ": " << e.what();
        }
      }
    }
}

// On a GPU: cuDNN's heuristics and plans, all the way, for the shapes the acceptance run
// times; each plan's engine is printed. The GPU's properties as cuDNN serializes them go to
// $MESHSIM_CUDNN_DEVICEPROP_OUT when set (acceptance keeps them, so later sessions without a GPU
// can build plans deviceless).
TEST(CudnnSdpaReal, OnAGpuEveryGraphGetsAnExecutionPlan) {
  const CudnnApi* api = real_cudnn();
  if (!api) GTEST_SKIP() << "libcudnn.so.9 does not load here";
  cudnnHandle_t handle = nullptr;
  if (const cudnnStatus_t st = api->create(&handle))
    GTEST_SKIP() << "no GPU for cuDNN here (cudnnCreate: " << cudnn_error(*api, st) << "): plans are built on the GPU";
  if (const char* out = std::getenv("MESHSIM_CUDNN_DEVICEPROP_OUT")) {
    const std::string json = cudnn_device_properties_json(*api, 0);
    EXPECT_FALSE(json.empty());
    std::FILE* f = std::fopen(out, "w");
    ASSERT_NE(f, nullptr) << out;
    std::fputs(json.c_str(), f);
    std::fclose(f);
  }
  for (const Shape& base : {kLlama, kGpt3})
    for (bool causal : {true, false}) {
      Shape s = base;
      s.heads_kv = s.heads_q;  // as the executor's calls carry them
      s.causal = causal;
      for (const sdpa::Graph& g : {sdpa::forward_graph(s), sdpa::backward_graph(s)}) {
        try {
          SdpaPlan plan(*api, handle, g);
          std::cout << (g.backward ? "backward " : "forward ") << s.heads_q << "x" << s.seq_q << "x" << s.head_dim
                    << (causal ? " causal: " : ": ") << plan.text() << "\n";
        } catch (const Error& e) {
          ADD_FAILURE() << e.what();
        }
      }
    }
  api->destroy(handle);
}

TEST(CudnnSdpaReal, CudnnRefusesABrokenGraphNamingTheStep) {
  // The check above can fail: a matmul whose inner dimensions disagree is refused by cuDNN.
  const CudnnApi* api = real_cudnn();
  if (!api) GTEST_SKIP() << "libcudnn.so.9 does not load here";
  sdpa::Graph g = sdpa::forward_graph({.heads_q = 2, .heads_kv = 2, .seq_q = 64, .seq_kv = 64, .head_dim = 64});
  for (sdpa::Tensor& t : g.tensors)
    if (t.uid == sdpa::kV) t.dims[3] = 32, t.strides = {4096, 2048, 32, 1};  // V's head dim no longer O's
  try {
    SdpaPlan plan(*api, nullptr, g, SdpaPlan::Until::OperationGraph);
    ADD_FAILURE() << "cuDNN took a matmul of [64,64] x [64,32] into [64,64]";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cuDNN attention: op bmm2"), std::string::npos) << e.what();
  }
}

TEST(CudnnSdpaReal, LoaderNamesTheFileAndTheFix) {
  std::string why;
  EXPECT_TRUE(load_cudnn_file("/nonexistent/libcudnn.so.9", &why).library.empty());
  EXPECT_NE(why.find("cannot load /nonexistent/libcudnn.so.9"), std::string::npos) << why;
  EXPECT_NE(why.find("LD_LIBRARY_PATH"), std::string::npos) << why;
  why.clear();
  EXPECT_TRUE(load_cudnn_file("libm.so.6", &why).library.empty());
  EXPECT_NE(why.find("lacks cudnnBackendCreateDescriptor"), std::string::npos) << why;
  EXPECT_EQ(cudnn_version_text(91900), "cuDNN 9.19.0");
}

// ---- the fake ----

struct FakeDesc {
  cudnnBackendDescriptorType_t type;
  std::map<int, std::vector<std::int64_t>> ints;  // INT64 attributes
  std::map<int, std::vector<void*>> ptrs;         // descriptor, handle and pointer attributes
  std::map<int, std::vector<float>> floats;       // none set by us; kept for completeness
  bool by_value = false, is_virtual = false, finalized = false, destroyed = false;
};

struct Fake {
  std::vector<std::unique_ptr<FakeDesc>> all;
  int configs = 3;        // engine configurations the heuristics offer
  int failing_plans = 0;  // plans that fail to finalize first
  std::int64_t workspace = 1 << 20;
  int executed = 0;
  std::vector<std::int64_t> exec_uids;
  std::vector<void*> exec_ptrs;
  void* exec_workspace = nullptr;
  int live() const {
    int n = 0;
    for (const auto& d : all) n += !d->destroyed;
    return n;
  }
  int count(cudnnBackendDescriptorType_t t) const {
    int n = 0;
    for (const auto& d : all) n += d->type == t;
    return n;
  }
};
Fake* fake = nullptr;

FakeDesc* of(cudnnBackendDescriptor_t d) { return static_cast<FakeDesc*>(d); }

cudnnStatus_t f_create(cudnnBackendDescriptorType_t t, cudnnBackendDescriptor_t* d) {
  fake->all.push_back(std::make_unique<FakeDesc>());
  fake->all.back()->type = t;
  *d = fake->all.back().get();
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t f_destroy(cudnnBackendDescriptor_t d) {
  EXPECT_FALSE(of(d)->destroyed) << "destroyed twice";
  of(d)->destroyed = true;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t f_set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                    int64_t n, const void* v) {
  FakeDesc* x = of(d);
  if (x->finalized) return CUDNN_STATUS_BAD_PARAM;
  switch (type) {
    case CUDNN_TYPE_INT64: {
      const auto* p = static_cast<const std::int64_t*>(v);
      x->ints[name].assign(p, p + n);
      break;
    }
    case CUDNN_TYPE_BACKEND_DESCRIPTOR:
    case CUDNN_TYPE_HANDLE:
    case CUDNN_TYPE_VOID_PTR: {
      const auto* p = static_cast<void* const*>(v);
      for (int64_t k = 0; k < n; ++k)
        if (type == CUDNN_TYPE_BACKEND_DESCRIPTOR && !of(p[k])->finalized) return CUDNN_STATUS_BAD_PARAM;
      x->ptrs[name].assign(p, p + n);
      break;
    }
    case CUDNN_TYPE_BOOLEAN:
      if (name == CUDNN_ATTR_TENSOR_IS_BY_VALUE) x->by_value = *static_cast<const bool*>(v);
      if (name == CUDNN_ATTR_TENSOR_IS_VIRTUAL) x->is_virtual = *static_cast<const bool*>(v);
      break;
    default:  // enums: data types, modes, operators
      x->ints[name] = {static_cast<std::int64_t>(*static_cast<const int*>(v))};
      break;
  }
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t f_get(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t,
                    int64_t requested, int64_t* count, void* out) {
  FakeDesc* x = of(d);
  if (!x->finalized) return CUDNN_STATUS_NOT_INITIALIZED;
  switch (name) {
    case CUDNN_ATTR_ENGINEHEUR_RESULTS:
      *count = std::min<int64_t>(fake->configs, requested > 0 ? requested : fake->configs);
      for (int64_t k = 0; k < requested && k < fake->configs; ++k) {
        FakeDesc* cfg = of(static_cast<cudnnBackendDescriptor_t*>(out)[k]);
        cfg->ints[0] = {k};
        cfg->finalized = true;
      }
      return CUDNN_STATUS_SUCCESS;
    case CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE:
      *count = 1;
      *static_cast<std::int64_t*>(out) = fake->workspace;
      return CUDNN_STATUS_SUCCESS;
    case CUDNN_ATTR_ENGINECFG_ENGINE: {
      FakeDesc* e = of(*static_cast<cudnnBackendDescriptor_t*>(out));
      e->ints[CUDNN_ATTR_ENGINE_GLOBAL_INDEX] = {8 + x->ints[0][0]};
      e->finalized = true;
      *count = 1;
      return CUDNN_STATUS_SUCCESS;
    }
    case CUDNN_ATTR_ENGINE_GLOBAL_INDEX:
      *count = 1;
      *static_cast<std::int64_t*>(out) = x->ints.at(CUDNN_ATTR_ENGINE_GLOBAL_INDEX)[0];
      return CUDNN_STATUS_SUCCESS;
    default:
      return CUDNN_STATUS_NOT_SUPPORTED;
  }
}
cudnnStatus_t f_finalize(cudnnBackendDescriptor_t d) {
  FakeDesc* x = of(d);
  if (x->type == CUDNN_BACKEND_TENSOR_DESCRIPTOR &&
      (x->ints[CUDNN_ATTR_TENSOR_DIMENSIONS].size() != 4 || x->ints[CUDNN_ATTR_TENSOR_STRIDES].size() != 4 ||
       x->ints[CUDNN_ATTR_TENSOR_UNIQUE_ID].size() != 1 || !x->ints.count(CUDNN_ATTR_TENSOR_DATA_TYPE)))
    return CUDNN_STATUS_BAD_PARAM;
  if (x->type == CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR && fake->failing_plans > 0) {
    --fake->failing_plans;
    return CUDNN_STATUS_NOT_SUPPORTED;
  }
  x->finalized = true;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t f_execute(cudnnHandle_t, cudnnBackendDescriptor_t plan, cudnnBackendDescriptor_t pack) {
  EXPECT_TRUE(of(plan)->finalized);
  EXPECT_TRUE(of(pack)->finalized);
  ++fake->executed;
  fake->exec_uids = of(pack)->ints[CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS];
  fake->exec_ptrs = of(pack)->ptrs[CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS];
  fake->exec_workspace = of(pack)->ptrs[CUDNN_ATTR_VARIANT_PACK_WORKSPACE].at(0);
  return CUDNN_STATUS_SUCCESS;
}
const char* f_error_string(cudnnStatus_t s) { return s == CUDNN_STATUS_NOT_SUPPORTED ? "NOT_SUPPORTED" : "OTHER"; }
void f_last_error(char* buf, size_t n) { std::snprintf(buf, n, "fake: no kernel for this graph"); }

CudnnApi fake_api() {
  CudnnApi a;
  a.create_descriptor = f_create;
  a.destroy_descriptor = f_destroy;
  a.set_attribute = f_set;
  a.get_attribute = f_get;
  a.finalize = f_finalize;
  a.execute = f_execute;
  a.error_string = f_error_string;
  a.last_error_string = f_last_error;
  a.library = "fake";
  return a;
}

class CudnnSdpaFake : public ::testing::Test {
 protected:
  void SetUp() override { fake = &f_; }
  void TearDown() override { fake = nullptr; }
  Fake f_;
  CudnnApi api_ = fake_api();
  cudnnHandle_t handle_ = reinterpret_cast<cudnnHandle_t>(0x1);
};

TEST_F(CudnnSdpaFake, EveryTensorAndOpBecomesAFinalizedDescriptor) {
  const sdpa::Graph g = sdpa::backward_graph(kLlama);
  {
    SdpaPlan plan(api_, handle_, g);
    EXPECT_EQ(f_.count(CUDNN_BACKEND_TENSOR_DESCRIPTOR), static_cast<int>(g.tensors.size()));
    int tensors = 0;
    for (const auto& d : f_.all) {
      if (d->type != CUDNN_BACKEND_TENSOR_DESCRIPTOR) continue;
      const sdpa::Tensor& t = g.tensors.at(static_cast<std::size_t>(tensors++));
      EXPECT_TRUE(d->finalized) << t.name;
      EXPECT_EQ(d->ints[CUDNN_ATTR_TENSOR_UNIQUE_ID], std::vector<std::int64_t>{t.uid}) << t.name;
      EXPECT_EQ(d->ints[CUDNN_ATTR_TENSOR_DIMENSIONS], t.dims) << t.name;
      EXPECT_EQ(d->ints[CUDNN_ATTR_TENSOR_STRIDES], t.strides) << t.name;
      EXPECT_EQ(d->is_virtual, t.is_virtual) << t.name;
      EXPECT_EQ(d->by_value, t.by_value) << t.name;
    }
    // The operation graph holds one operation per graph op, in order.
    for (const auto& d : f_.all) {
      if (d->type == CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR) {
        EXPECT_EQ(d->ptrs[CUDNN_ATTR_OPERATIONGRAPH_OPS].size(), g.ops.size());
      }
    }
    EXPECT_EQ(f_.count(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR), 5);   // QK^T, P^T dO, dO V^T, dS^T Q, dS K
    EXPECT_EQ(f_.count(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR), 3);  // P^T, dS^T, K
    EXPECT_EQ(plan.workspace_bytes(), 1 << 20);
    EXPECT_EQ(plan.text(), "engine 8 (config 1 of 3), workspace 1048576 B");
  }
  EXPECT_EQ(f_.live(), 0) << "descriptors left after the plan is gone";
}

TEST_F(CudnnSdpaFake, TakesTheFirstEngineConfigThatFinalizes) {
  f_.failing_plans = 2;
  SdpaPlan plan(api_, handle_, sdpa::forward_graph(kGpt3));
  EXPECT_EQ(plan.engine(), 10);
  EXPECT_EQ(plan.text(), "engine 10 (config 3 of 3), workspace 1048576 B");
}

TEST_F(CudnnSdpaFake, NoConfigFinalizesIsOneErrorWithCudnnsMessage) {
  f_.failing_plans = 3;
  try {
    SdpaPlan plan(api_, handle_, sdpa::forward_graph(kGpt3));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "cuDNN attention: execution plan: none of the 3 engine configurations finalizes (last: NOT_SUPPORTED: "
              "fake: no kernel for this graph)");
  }
  EXPECT_EQ(f_.live(), 0) << "a failed plan leaks descriptors";
}

TEST_F(CudnnSdpaFake, NoConfigOfferedIsOneError) {
  f_.configs = 0;
  EXPECT_THROW(
      {
        try {
          SdpaPlan plan(api_, handle_, sdpa::forward_graph(kGpt3));
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("heuristics: no engine takes this graph"), std::string::npos);
          throw;
        }
      },
      Error);
  EXPECT_EQ(f_.live(), 0);
}

// Deviceless: the device description goes to the heuristics (and to a plan, when one is asked
// for) in place of a handle; by default no plan is built, and nothing executes.
TEST_F(CudnnSdpaFake, DevicelessSetsTheDescriptionWhereTheHandleWent) {
  {
    const CudnnDevice device(api_, R"({"deviceName":"fake"})");
    const SdpaPlan ranked(api_, device, sdpa::forward_graph(kGpt3));
    EXPECT_EQ(ranked.ranked_engines(), (std::vector<std::int64_t>{8, 9, 10}));
    EXPECT_EQ(ranked.text(), "engine 8 (config 1 of 3), not built");
    EXPECT_EQ(f_.count(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR), 0);
    EXPECT_EQ(ranked.execute(handle_, {}, nullptr), CUDNN_STATUS_BAD_PARAM);
    const SdpaPlan built(api_, device, sdpa::forward_graph(kGpt3), SdpaPlan::Until::ExecutionPlan);
    EXPECT_EQ(built.text(), "engine 8 (config 1 of 3), workspace 1048576 B");
    for (const auto& d : f_.all) {
      if (d->type == CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR)
        EXPECT_EQ(d->ptrs[CUDNN_ATTR_ENGINEHEUR_DEVICEPROP], std::vector<void*>{device.descriptor()});
      if (d->type == CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR) {
        EXPECT_EQ(d->ptrs[CUDNN_ATTR_EXECUTION_PLAN_DEVICEPROP], std::vector<void*>{device.descriptor()});
        EXPECT_FALSE(d->ptrs.count(CUDNN_ATTR_EXECUTION_PLAN_HANDLE)) << "a handle on a deviceless plan";
      }
    }
    EXPECT_EQ(built.execute(handle_, {}, nullptr), CUDNN_STATUS_BAD_PARAM) << "a deviceless plan ran";
  }
  EXPECT_EQ(f_.live(), 0);
}

TEST_F(CudnnSdpaFake, ExecuteBindsEveryOperandTheScalarsAndTheWorkspace) {
  SdpaPlan plan(api_, handle_, sdpa::backward_graph(kLlama));
  std::map<std::int64_t, void*> ptrs;
  std::vector<char> mem(16);
  for (std::int64_t uid : plan.graph().bound_uids()) ptrs[uid] = &mem[static_cast<std::size_t>(uid)];
  char ws = 0;
  ASSERT_EQ(plan.execute(handle_, ptrs, &ws), CUDNN_STATUS_SUCCESS);
  ASSERT_EQ(f_.executed, 1);
  EXPECT_EQ(f_.exec_workspace, &ws);
  ASSERT_EQ(f_.exec_uids.size(), f_.exec_ptrs.size());
  std::map<std::int64_t, void*> bound;
  for (std::size_t k = 0; k < f_.exec_uids.size(); ++k) bound[f_.exec_uids[k]] = f_.exec_ptrs[k];
  for (const auto& [uid, p] : ptrs) EXPECT_EQ(bound.at(uid), p) << uid;
  // Scalars point at their host values: the scale, -inf, 1.
  std::vector<float> scalars;
  for (const sdpa::Tensor& t : plan.graph().tensors)
    if (t.by_value) scalars.push_back(*static_cast<const float*>(bound.at(t.uid)));
  EXPECT_EQ(scalars.size(), 4u);  // one, scale (P), minus_inf, scale (dS)
  EXPECT_FLOAT_EQ(scalars[0], 1.0f);
  EXPECT_FLOAT_EQ(scalars[1], static_cast<float>(1 / std::sqrt(128.0)));
  EXPECT_TRUE(std::isinf(scalars[2]) && scalars[2] < 0);
  for (const auto& d : f_.all) {
    if (d->type == CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR) {
      EXPECT_TRUE(d->destroyed) << "the variant pack outlives execute";
    }
  }
  // A missing operand is refused before cuDNN is called.
  ptrs.erase(sdpa::kDqAccum);
  EXPECT_EQ(plan.execute(handle_, ptrs, &ws), CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(f_.executed, 1);
}

}  // namespace
}  // namespace meshsim::cuda
