// measure_cuda: cuBLAS GEMM rates over a grid of shapes and dtypes, device memory
// bandwidth and the per-kernel launch cost, timed with CUDA events on one stream.
#include "backend/cuda/cuda_calibrate.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

namespace meshsim::cuda {

namespace {

// Device resources released on every path (the Checker throws on a failed call).
struct Scope {
  explicit Scope(GpuApi& a) : api(a) {}
  GpuApi& api;
  StreamH stream = nullptr;
  EventH start = nullptr, stop = nullptr;
  BlasH blas = nullptr;
  std::vector<void*> buffers;
  ~Scope() {
    for (void* p : buffers) api.free(p);
    if (blas) api.blas_destroy(blas);
    if (start) api.event_destroy(start);
    if (stop) api.event_destroy(stop);
    if (stream) api.stream_destroy(stream);
  }
};

}  // namespace

std::vector<std::uint16_t> calibration_operands(std::size_t words) {
  std::vector<std::uint16_t> out(std::max<std::size_t>(words, 1));
  std::uint64_t x = 0x9E3779B97F4A7C15ull;
  for (std::uint16_t& w : out) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;  // xorshift64
    w = static_cast<std::uint16_t>((static_cast<std::uint16_t>(x >> 24) & 0x83FFu) | 0x3800u);
  }
  return out;
}

void copy_calibration_operands(GpuApi& api, Checker& check, void* dst, std::size_t bytes, const std::string& what) {
  const std::vector<std::uint16_t> chunk =
      calibration_operands(std::min<std::size_t>(bytes, std::size_t{16} << 20) / 2);
  const std::size_t chunk_bytes = chunk.size() * 2;
  for (std::size_t off = 0; off < bytes; off += chunk_bytes)
    check.cuda(api.memcpy_to_device(static_cast<char*>(dst) + off, chunk.data(), std::min(chunk_bytes, bytes - off)),
               "cudaMemcpy", fmt::format("{} ({} bytes)", what, bytes));
}

CudaMeasurements measure_cuda(GpuApi& api, Checker& check, int device, const CudaCalibrateOptions& opt) {
  const char* where = "calibrate";
  check.cuda(api.set_device(device), "cudaSetDevice", where);
  Scope s(api);
  check.cuda(api.stream_create(&s.stream), "cudaStreamCreate", where);
  check.cuda(api.event_create(&s.start), "cudaEventCreate", where);
  check.cuda(api.event_create(&s.stop), "cudaEventCreate", where);
  check.cublas(api.blas_create(&s.blas), "cublasCreate", where);
  check.cublas(api.blas_set_stream(s.blas, s.stream), "cublasSetStream", where);

  const std::int64_t largest = *std::max_element(opt.gemm_sizes.begin(), opt.gemm_sizes.end());
  std::size_t gemm_bytes = static_cast<std::size_t>(largest * largest) * 4;  // fp32 is the widest
  for (const GemmShape& g : opt.model_gemms)
    gemm_bytes = std::max(gemm_bytes, static_cast<std::size_t>(std::max({g.m * g.k, g.k * g.n, g.m * g.n})) * 2);
  const std::int64_t rows = std::max<std::int64_t>(static_cast<std::int64_t>(opt.kernel_bytes / 4) / opt.row, 1);
  const std::vector<CalibrationCall> calls = calibration_calls(rows, opt.row, opt.attention, !opt.fp32_kernels);
  std::vector<CalibrationCall> sweep;
  for (std::int64_t w : opt.row_widths) {
    const std::vector<CalibrationCall> at =
        row_kernel_calls(static_cast<std::int64_t>(opt.kernel_bytes / 4), w, !opt.fp32_kernels);
    sweep.insert(sweep.end(), at.begin(), at.end());
  }
  for (std::int64_t w : opt.vocab_widths)
    for (const CalibrationCall& c : row_kernel_calls(opt.vocab_rows * w, w, !opt.fp32_kernels))
      if (c.fn == KernelFn::CrossEntropy) sweep.push_back(c);
  const std::vector<CalibrationCall> attention_sweep =
      attention_calls(opt.attention.batch_heads, opt.attention.head_dim, opt.attention_seqs, !opt.fp32_kernels);
  std::size_t kernel_floats = 0;  // the largest call, in the first buffer
  for (const std::vector<CalibrationCall>* list : {&calls, &std::as_const(sweep), &attention_sweep})
    for (const CalibrationCall& c : *list)
      kernel_floats = std::max(kernel_floats, static_cast<std::size_t>(c.call.floats()));
  const std::size_t buf_bytes = std::max({gemm_bytes, opt.memory_bytes, kernel_floats * 4});
  void* buf[3] = {};
  for (void*& b : buf) {
    check.cuda(api.malloc(&b, buf_bytes), "cudaMalloc", fmt::format("{} ({} bytes)", where, buf_bytes));
    s.buffers.push_back(b);
  }
  for (void* b : buf) copy_calibration_operands(api, check, b, buf_bytes, "calibrate operands");

  // Seconds per call of `body`: one warm-up call, then `repeats` between two events; when
  // those took less than min_window_s, again over as many calls as fill the window.
  auto time_calls = [&](const std::string& what, const std::function<void()>& body, std::int64_t calls) {
    check.cuda(api.event_record(s.start, s.stream), "cudaEventRecord", what);
    for (std::int64_t i = 0; i < calls; ++i) body();
    check.cuda(api.event_record(s.stop, s.stream), "cudaEventRecord", what);
    bool done = false;
    while (!done) check.cuda(api.event_query(s.stop, &done), "cudaEventQuery", what);
    float ms = 0;
    check.cuda(api.event_elapsed_ms(&ms, s.start, s.stop), "cudaEventElapsedTime", what);
    return static_cast<double>(ms) * 1e-3;
  };
  auto time_per_call = [&](const std::string& what, const std::function<void()>& body, int repeats = 0) {
    if (repeats <= 0) repeats = opt.repeats;
    body();
    const double first = time_calls(what, body, repeats);
    if (first >= opt.min_window_s) return first / repeats;
    constexpr double kMostCalls = 100000;
    const double wanted = first > 0 ? std::ceil(repeats * opt.min_window_s / first) : kMostCalls;
    const auto calls = static_cast<std::int64_t>(std::min(wanted, kMostCalls));
    return time_calls(what, body, calls) / static_cast<double>(calls);
  };

  // A GEMM figure, then a gap of memory passes that keeps the GEMMs' share of the wall time at
  // gemm_duty: copies, not idle time, since an idle GPU drops its clock and the next figure would
  // start at it (1024^3 measured at 0.64x the preset after idle gaps, run 27).
  const std::size_t gap_floats = std::min<std::size_t>(buf_bytes / 4, std::size_t{16} << 20);
  auto time_gemm = [&](const std::string& what, const std::function<void()>& body) {
    const auto t0 = std::chrono::steady_clock::now();
    const double secs = time_per_call(what, body);
    if (opt.gemm_duty > 0 && opt.gemm_duty < 1) {
      const auto busy = std::chrono::steady_clock::now() - t0;
      const auto until =
          t0 + busy +
          std::chrono::duration_cast<std::chrono::steady_clock::duration>(busy * ((1 - opt.gemm_duty) / opt.gemm_duty));
      while (std::chrono::steady_clock::now() < until) {
        check.cuda(
            api.stream_pass(static_cast<float*>(buf[2]), static_cast<const float*>(buf[0]), gap_floats, s.stream),
            "stream_pass", what + " (the gap after it)");
        check.cuda(api.event_record(s.stop, s.stream), "cudaEventRecord", what);
        for (bool done = false; !done;) check.cuda(api.event_query(s.stop, &done), "cudaEventQuery", what);
      }
    }
    return secs;
  };

  CudaMeasurements m;
  for (DType t : opt.dtypes)
    for (std::int64_t mm : opt.gemm_sizes)
      for (std::int64_t nn : opt.gemm_sizes)
        for (std::int64_t kk : opt.gemm_sizes) {
          const std::string what = fmt::format("calibrate gemm {}x{}x{} {}", mm, nn, kk, to_string(t));
          const double secs = time_gemm(what, [&] {
            check.cublas(api.gemm(s.blas, mm, nn, kk, t, buf[0], buf[1], buf[2]), "cublasGemmEx", what);
          });
          m.gemm.push_back({mm, nn, kk, t, 2.0 * static_cast<double>(mm) * nn * kk / secs});
        }

  for (const GemmShape& g : opt.model_gemms) {
    const std::string what = fmt::format("calibrate gemm {}x{}x{} bf16 (a model's shape)", g.m, g.n, g.k);
    const double secs = time_gemm(what, [&] {
      check.cublas(api.gemm(s.blas, g.m, g.n, g.k, DType::Bf16, buf[0], buf[1], buf[2]), "cublasGemmEx", what);
    });
    m.model_gemm.push_back({g.m, g.n, g.k, DType::Bf16, 2.0 * static_cast<double>(g.m) * g.n * g.k / secs});
  }

  const std::size_t floats = opt.memory_bytes / 4;
  const double pass = time_per_call("calibrate memory bandwidth", [&] {
    check.cuda(api.stream_pass(static_cast<float*>(buf[1]), static_cast<const float*>(buf[0]), floats, s.stream),
               "stream_pass", "calibrate memory bandwidth");
  });
  m.memory_bandwidth = 2.0 * static_cast<double>(floats) * 4 / pass;
  for (const auto& [list, out] : {std::pair{&calls, &m.kernels}, std::pair{&std::as_const(sweep), &m.row_sweep}})
    for (const CalibrationCall& c : *list) {
      const std::string what = "calibrate " + c.call.text();
      if (const int j = targets_operand(c.call); j >= 0)  // valid ids, as in training (kernel_call.h)
        check.cuda(api.memset_async(c.call.operand(static_cast<float*>(buf[0]), j), 0, targets_bytes(c.call), s.stream),
                   "cudaMemsetAsync", what + " (its targets)");
      const double secs = time_per_call(
          what, [&] { check.cuda(api.kernel(c.call, static_cast<float*>(buf[0]), s.stream), c.call.text(), what); });
      out->push_back({c, secs});
    }
  for (const CalibrationCall& c : attention_sweep) {
    const std::string what = "calibrate " + c.call.text();
    const double secs = time_per_call(
        what, [&] { check.cuda(api.kernel(c.call, static_cast<float*>(buf[0]), s.stream), c.call.text(), what); },
        opt.attention_repeats);
    m.attention_sweep.push_back({c, secs});
  }
  m.launch_overhead_s = time_per_call("calibrate launch overhead", [&] {
    check.cuda(api.stream_pass(static_cast<float*>(buf[1]), static_cast<const float*>(buf[0]), 256, s.stream),
               "stream_pass", "calibrate launch overhead");
  });
  return m;
}

}  // namespace meshsim::cuda
