// Machine profile YAML: reading and validating (format: docs/profile.md).
#include "sim/machine_profile.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <initializer_list>
#include <set>
#include <tuple>

#include "core/dtype.h"
#include "core/error.h"
#include "core/flag.h"
#include "core/yaml_reader.h"

namespace meshsim {

namespace {

// Reads one file's nodes, prefixing every error with "SOURCE:LINE: FIELD".
class Reader : public YamlReader {
 public:
  using YamlReader::YamlReader;
  std::int64_t positive_int(const YAML::Node& v, const std::string& field) const {
    if (!v.IsScalar()) fail(v, field, "expected a positive integer");
    std::int64_t x = 0;
    try {
      x = v.as<std::int64_t>();
    } catch (const YAML::Exception&) {
      fail(v, field, fmt::format("'{}' is not an integer", v.as<std::string>()));
    }
    if (x <= 0) fail(v, field, fmt::format("{} must be a positive integer", x));
    return x;
  }
  double fraction(const YAML::Node& v, const std::string& field) const {
    if (!v.IsScalar()) fail(v, field, "expected a number in (0, 1]");
    double x = 0;
    try {
      x = v.as<double>();
    } catch (const YAML::Exception&) {
      fail(v, field, fmt::format("'{}' is not a number; write a fraction such as 0.85", v.as<std::string>()));
    }
    if (!(x > 0 && x <= 1)) fail(v, field, fmt::format("{} must be in (0, 1]; e.g. 0.85 for 85% of peak", x));
    return x;
  }
  double flops(const YAML::Node& v, const std::string& field) const {
    const std::string t = text(v, field);
    return located(v, [&] { return parse_flops(t, field); });
  }
  Bandwidth bandwidth(const YAML::Node& v, const std::string& field) const {
    const std::string t = text(v, field);
    return located(v, [&] { return parse_bandwidth(t, field); });
  }
  Time time(const YAML::Node& v, const std::string& field) const {
    const std::string t = text(v, field);
    return located(v, [&] { return parse_time(t, field); });
  }
  Bytes bytes(const YAML::Node& v, const std::string& field) const {
    const std::string t = text(v, field);
    const Bytes b = located(v, [&] { return parse_bytes(t, field); });
    if (b <= 0) fail(v, field, fmt::format("'{}' must be positive; write e.g. 80GiB", t));
    return b;
  }
  int dtype_bytes(const YAML::Node& v, const std::string& field) const {
    const std::string t = text(v, field);
    if (const std::optional<DType> d = parse_dtype(t)) return meshsim::dtype_bytes(*d);
    fail(v, field, fmt::format("unknown dtype '{}'; use bf16, fp16 or fp32", t));
  }
};

GpuSpec read_gpu(const Reader& r, const YAML::Node& g) {
  r.only_keys(g, "gpu",
              {"preset", "name", "peak_flops_bf16", "peak_flops_fp16", "peak_flops_fp32", "memory_bandwidth", "memory",
               "launch_overhead", "gemm_efficiency", "attention_efficiency", "sm_count"},
              "{preset: h100} or {name: my-gpu, peak_flops_bf16: 989TFLOP/s, ...}");
  GpuSpec spec;
  const bool from_preset = static_cast<bool>(g["preset"]);
  if (from_preset) {
    const std::string preset = r.text(g["preset"], "gpu.preset");
    spec = r.located(g["preset"], [&] {
      try {
        return gpu_preset(preset);
      } catch (const Error& e) {
        throw Error(std::string("gpu.preset: ") + e.what());
      }
    });
  }
  // Without a preset every figure is required (except the efficiencies, which have defaults).
  auto field = [&](const char* key, const char* example) -> YAML::Node {
    if (from_preset) return g[key];
    return r.required(g, key, "gpu", example);
  };
  if (const YAML::Node v = field("name", "my-gpu")) spec.name = r.text(v, "gpu.name");
  const YAML::Node bf16 = g["peak_flops_bf16"], fp16 = g["peak_flops_fp16"];
  if (!from_preset && !bf16 && !fp16)
    r.fail(g, "gpu", "missing field 'peak_flops_bf16' (or 'peak_flops_fp16'); write e.g. peak_flops_bf16: 989TFLOP/s");
  if (bf16) spec.peak_flops_bf16 = r.flops(bf16, "gpu.peak_flops_bf16");
  if (fp16) spec.peak_flops_fp16 = r.flops(fp16, "gpu.peak_flops_fp16");
  if (const YAML::Node v = field("peak_flops_fp32", "67TFLOP/s"))
    spec.peak_flops_fp32 = r.flops(v, "gpu.peak_flops_fp32");
  if (const YAML::Node v = field("memory_bandwidth", "3.35TB/s"))
    spec.memory_bandwidth = r.bandwidth(v, "gpu.memory_bandwidth");
  if (const YAML::Node v = field("memory", "80GiB")) spec.memory = r.bytes(v, "gpu.memory");
  if (const YAML::Node v = field("launch_overhead", "4us")) spec.launch_overhead = r.time(v, "gpu.launch_overhead");
  if (const YAML::Node v = g["gemm_efficiency"]) spec.gemm_efficiency = r.fraction(v, "gpu.gemm_efficiency");
  if (const YAML::Node v = g["attention_efficiency"])
    spec.attention_efficiency = r.fraction(v, "gpu.attention_efficiency");
  if (const YAML::Node v = g["sm_count"]) {
    const std::int64_t sms = r.positive_int(v, "gpu.sm_count");
    if (sms > 100000) r.fail(v, "gpu.sm_count", fmt::format("{} SMs is not a GPU; write e.g. 132 (H100 SXM)", sms));
    spec.sm_count = static_cast<int>(sms);
  }
  return spec;
}

void read_memory_efficiency(const Reader& r, const YAML::Node& m, ComputeOverrides& out) {
  if (!m.IsMap()) r.fail(m, "memory_efficiency", "expected a mapping such as {norm: 0.85, elementwise: 0.9}");
  for (const auto& kv : m) {
    const std::string name = kv.first.as<std::string>();
    const auto kind = parse_kernel_kind(name);
    if (!kind) {
      std::string list;
      for (int i = 0; i < kKernelKinds; ++i)
        list += (i ? ", " : "") + std::string(to_string(static_cast<KernelKind>(i)));
      r.fail(kv.first, "memory_efficiency", fmt::format("unknown kernel kind '{}'; valid kinds: {}", name, list));
    }
    out.memory_efficiency[static_cast<int>(*kind)] = r.fraction(kv.second, "memory_efficiency." + name);
  }
}

void read_gemm_points(const Reader& r, const YAML::Node& list, ComputeOverrides& out) {
  if (!list.IsSequence())
    r.fail(list, "gemm", "expected a list such as - {m: 4096, n: 4096, k: 4096, dtype: bf16, achieved: 700TFLOP/s}");
  std::set<std::tuple<std::int64_t, std::int64_t, std::int64_t, int>> seen;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const YAML::Node p = list[i];
    const std::string field = fmt::format("gemm[{}]", i);
    r.only_keys(p, field, {"m", "n", "k", "dtype", "achieved"},
                "{m: 4096, n: 4096, k: 4096, dtype: bf16, achieved: 700TFLOP/s}");
    GemmPoint g;
    g.m = r.positive_int(r.required(p, "m", field, "4096"), field + ".m");
    g.n = r.positive_int(r.required(p, "n", field, "4096"), field + ".n");
    g.k = r.positive_int(r.required(p, "k", field, "4096"), field + ".k");
    g.dtype_bytes = r.dtype_bytes(r.required(p, "dtype", field, "bf16"), field + ".dtype");
    g.achieved_flops = r.flops(r.required(p, "achieved", field, "700TFLOP/s"), field + ".achieved");
    if (!seen.insert({g.m, g.n, g.k, g.dtype_bytes}).second)
      r.fail(p, field,
             fmt::format("shape {}x{}x{} is measured twice for {}-byte types (bf16 and fp16 share one "
                         "curve); keep one point",
                         g.m, g.n, g.k, g.dtype_bytes));
    out.gemm_points.push_back(g);
  }
}

void read_row_points(const Reader& r, const YAML::Node& list, ComputeOverrides& out) {
  const std::string example = "{fn: layernorm, pass: backward, cols: 12288, efficiency: 0.51}";
  if (!list.IsSequence()) r.fail(list, "row_kernels", "expected a list such as - " + example);
  for (std::size_t i = 0; i < list.size(); ++i) {
    const YAML::Node p = list[i];
    const std::string field = fmt::format("row_kernels[{}]", i);
    r.only_keys(p, field, {"fn", "pass", "cols", "efficiency"}, example.c_str());
    RowKernelPoint q;
    const YAML::Node fn = r.required(p, "fn", field, "layernorm");
    const std::string name = r.text(fn, field + ".fn");
    const auto f = parse_kernel_fn(name);
    if (!f || !is_row_fn(*f)) {
      std::string names;
      for (int k = 0; k < kKernelFns; ++k)
        if (const auto e = static_cast<KernelFn>(k); is_row_fn(e))
          names += (names.empty() ? "" : ", ") + std::string(to_string(e));
      r.fail(fn, field + ".fn", fmt::format("'{}' is not a row kernel; use one of {}", name, names));
    }
    q.fn = *f;
    const YAML::Node pass = r.required(p, "pass", field, "forward");
    const std::string ps = r.text(pass, field + ".pass");
    if (ps != "forward" && ps != "backward")
      r.fail(pass, field + ".pass", fmt::format("'{}' is neither forward nor backward", ps));
    q.backward = ps == "backward";
    q.cols = r.positive_int(r.required(p, "cols", field, "12288"), field + ".cols");
    q.efficiency = r.fraction(r.required(p, "efficiency", field, "0.51"), field + ".efficiency");
    for (const RowKernelPoint& o : out.row_points)
      if (o.fn == q.fn && o.backward == q.backward && o.cols == q.cols)
        r.fail(p, field, fmt::format("{} {} at {} columns is measured twice; keep one point", name, ps, q.cols));
    out.row_points.push_back(q);
  }
}

void read_attention_points(const Reader& r, const YAML::Node& list, ComputeOverrides& out) {
  const std::string example = "{seq: 4096, mask: causal, pass: forward, efficiency: 0.42}";
  if (!list.IsSequence()) r.fail(list, "attention", "expected a list such as - " + example);
  for (std::size_t i = 0; i < list.size(); ++i) {
    const YAML::Node p = list[i];
    const std::string field = fmt::format("attention[{}]", i);
    r.only_keys(p, field, {"seq", "mask", "pass", "efficiency"}, example.c_str());
    AttentionPoint q;
    q.seq = r.positive_int(r.required(p, "seq", field, "4096"), field + ".seq");
    const YAML::Node mask = r.required(p, "mask", field, "causal");
    const std::string ms = r.text(mask, field + ".mask");
    if (ms != "causal" && ms != "full")
      r.fail(mask, field + ".mask", fmt::format("'{}' is neither causal nor full", ms));
    q.causal = ms == "causal";
    const YAML::Node pass = r.required(p, "pass", field, "forward");
    const std::string ps = r.text(pass, field + ".pass");
    if (ps != "forward" && ps != "backward")
      r.fail(pass, field + ".pass", fmt::format("'{}' is neither forward nor backward", ps));
    q.backward = ps == "backward";
    q.efficiency = r.fraction(r.required(p, "efficiency", field, "0.42"), field + ".efficiency");
    for (const AttentionPoint& o : out.attention_points)
      if (o.seq == q.seq && o.causal == q.causal && o.backward == q.backward)
        r.fail(p, field, fmt::format("{} {} at sequence {} is measured twice; keep one point", ms, ps, q.seq));
    out.attention_points.push_back(q);
  }
}

void read_collectives(const Reader& r, const YAML::Node& list, std::vector<CollectiveProfile>& out) {
  if (!list.IsSequence())
    r.fail(list, "collectives",
           "expected a list such as - {kind: allreduce, ranks: 8, alpha: 12us, bandwidth: 180GB/s}");
  for (std::size_t i = 0; i < list.size(); ++i) {
    const YAML::Node c = list[i];
    const std::string field = fmt::format("collectives[{}]", i);
    r.only_keys(c, field, {"kind", "ranks", "alpha", "bandwidth", "algorithm"},
                "{kind: allreduce, ranks: 8, alpha: 12us, bandwidth: 180GB/s}");
    CollectiveProfile p;
    const YAML::Node kind = r.required(c, "kind", field, "allreduce");
    const std::string name = r.text(kind, field + ".kind");
    const auto k = parse_coll_kind(name);
    if (!k) {
      std::string names;
      for (CollKind ck : all_coll_kinds()) names += (names.empty() ? "" : ", ") + std::string(to_string(ck));
      r.fail(kind, field + ".kind", fmt::format("unknown collective '{}'; use one of {}", name, names));
    }
    p.kind = *k;
    const YAML::Node ranks = r.required(c, "ranks", field, "8");
    const std::int64_t n = r.positive_int(ranks, field + ".ranks");
    if (n < 2 || n > 1'000'000) r.fail(ranks, field + ".ranks", fmt::format("{} must be in [2, 1000000]", n));
    p.ranks = static_cast<int>(n);
    p.alpha = r.time(r.required(c, "alpha", field, "12us"), field + ".alpha");
    p.bandwidth = r.bandwidth(r.required(c, "bandwidth", field, "180GB/s"), field + ".bandwidth");
    if (const YAML::Node a = c["algorithm"]) p.algorithm = r.text(a, field + ".algorithm");
    for (const CollectiveProfile& q : out)
      if (q.kind == p.kind && q.ranks == p.ranks)
        r.fail(c, field,
               fmt::format("a second {} entry for {} ranks; keep one per kind and group size", to_string(p.kind),
                           p.ranks));
    out.push_back(p);
  }
}

MachineProfile build(const YAML::Node& root, const Reader& r, const std::string& source) {
  if (!root.IsMap()) r.fail(root, "profile", "expected a mapping with gpu: and optionally gemm:, collectives:");
  r.only_keys(root, "profile",
              {"version", "description", "gpu", "memory_efficiency", "row_kernels", "attention", "gemm", "collectives"},
              "{version: 1, gpu: {preset: h100}}");
  MachineProfile p;
  p.source = source;
  if (const YAML::Node v = root["version"]) {
    if (r.text(v, "version") != "1") r.fail(v, "version", "this meshsim reads profile version 1; write version: 1");
  }
  if (const YAML::Node v = root["description"]) p.description = r.text(v, "description");
  const YAML::Node gpu = root["gpu"];
  if (!gpu) r.fail(root, "profile", "missing field 'gpu'; write e.g. gpu: {preset: h100}");
  p.gpu = read_gpu(r, gpu);
  if (const YAML::Node v = root["memory_efficiency"]) read_memory_efficiency(r, v, p.compute);
  if (const YAML::Node v = root["row_kernels"]) read_row_points(r, v, p.compute);
  if (const YAML::Node v = root["attention"]) read_attention_points(r, v, p.compute);
  if (const YAML::Node v = root["gemm"]) read_gemm_points(r, v, p.compute);
  if (const YAML::Node v = root["collectives"]) read_collectives(r, v, p.collectives);
  // Whatever the fields above could not check alone (e.g. an fp32 point on a GPU without fp32).
  r.located(gpu, [&] { return ComputeModel(p.gpu, p.compute); });
  return p;
}

}  // namespace

MachineProfile parse_machine_profile(const std::string& text, const std::string& source_name) {
  const YAML::Node root = parse_yaml_text(text, source_name);
  const Reader r(source_name);
  return with_yaml_errors(source_name, [&] { return build(root, r, source_name); });
}

MachineProfile load_machine_profile(const std::string& path) {
  const auto text = read_text_file(path);
  if (!text) throw Error(fmt::format("profile file '{}' cannot be opened; check the path", path));
  return parse_machine_profile(*text, path);
}

std::string format_machine_profile(const MachineProfile& p) {
  auto dtype = [](int bytes) { return bytes == 4 ? "fp32" : "bf16"; };
  auto flops = [](double f) { return fmt::format("{:.6g}GFLOP/s", f * 1e-9); };
  auto yaml_text = [](const std::string& t) {  // a double-quoted YAML scalar
    std::string out = "\"";
    for (char c : t) out += c == '"' || c == '\\' ? std::string("\\") + c : std::string(1, c);
    return out + "\"";
  };
  std::string o = "version: 1\n";
  if (!p.description.empty()) o += "description: " + yaml_text(p.description) + "\n";
  const GpuSpec& g = p.gpu;
  o += "gpu:\n";
  o += "  name: " + yaml_text(g.name) + "\n";
  if (g.peak_flops_bf16 > 0) o += "  peak_flops_bf16: " + flops(g.peak_flops_bf16) + "\n";
  if (g.peak_flops_fp16 > 0) o += "  peak_flops_fp16: " + flops(g.peak_flops_fp16) + "\n";
  o += "  peak_flops_fp32: " + flops(g.peak_flops_fp32) + "\n";
  o += fmt::format("  memory_bandwidth: {:.6g}GB/s\n", g.memory_bandwidth.bytes_per_s() * 1e-9);
  o += fmt::format("  memory: {}\n", g.memory);
  o += fmt::format("  launch_overhead: {}ps\n", g.launch_overhead.ps());
  o += fmt::format("  gemm_efficiency: {:.6g}\n", g.gemm_efficiency);
  o += fmt::format("  attention_efficiency: {:.6g}\n", g.attention_efficiency);
  if (g.sm_count > 0) o += fmt::format("  sm_count: {}\n", g.sm_count);
  bool any = false;
  for (int i = 0; i < kKernelKinds; ++i)
    if (const auto& e = p.compute.memory_efficiency[static_cast<std::size_t>(i)]) {
      if (!any) o += "memory_efficiency:\n";
      any = true;
      o += fmt::format("  {}: {:.6g}\n", to_string(static_cast<KernelKind>(i)), *e);
    }
  if (!p.compute.row_points.empty()) o += "row_kernels:\n";
  for (const RowKernelPoint& q : p.compute.row_points)
    o += fmt::format("  - {{fn: {}, pass: {}, cols: {}, efficiency: {:.6g}}}\n", to_string(q.fn),
                     q.backward ? "backward" : "forward", q.cols, q.efficiency);
  if (!p.compute.attention_points.empty()) o += "attention:\n";
  for (const AttentionPoint& q : p.compute.attention_points)
    o += fmt::format("  - {{seq: {}, mask: {}, pass: {}, efficiency: {:.6g}}}\n", q.seq, q.causal ? "causal" : "full",
                     q.backward ? "backward" : "forward", q.efficiency);
  if (!p.compute.gemm_points.empty()) o += "gemm:\n";
  for (const GemmPoint& q : p.compute.gemm_points)
    o += fmt::format("  - {{m: {}, n: {}, k: {}, dtype: {}, achieved: {}}}\n", q.m, q.n, q.k, dtype(q.dtype_bytes),
                     flops(q.achieved_flops));
  if (!p.collectives.empty()) o += "collectives:\n";
  for (const CollectiveProfile& c : p.collectives)
    o += fmt::format("  - {{kind: {}, ranks: {}, alpha: {}ps, bandwidth: {:.6g}GB/s{}}}\n", to_string(c.kind), c.ranks,
                     c.alpha.ps(), c.bandwidth.bytes_per_s() * 1e-9,
                     c.algorithm.empty() ? "" : ", algorithm: " + c.algorithm);
  return o;
}

AlphaBandwidth fit_alpha_bandwidth(const std::vector<std::pair<double, double>>& points, const std::string& what) {
  const double n = static_cast<double>(points.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& [x, y] : points) sx += x, sy += y, sxx += x * x, sxy += x * y;
  const double den = n * sxx - sx * sx;
  if (points.size() < 2 || !(den > 1e-12 * n * sxx))
    throw Error(what + ": fitting time = alpha + bytes / bandwidth needs two or more distinct sizes; give a wider " +
                flag("sizes") + " sweep, e.g. 64KiB:16MiB");
  double slope = (n * sxy - sx * sy) / den;
  double alpha = (sy - slope * sx) / n;
  if (alpha < 0) alpha = 0, slope = sxy / sxx;  // through the origin
  if (!(slope > 0))
    throw Error(what + ": the measured time does not grow with the size (slope " + std::to_string(slope) +
                " s/B); the sizes are too small to see the bandwidth; give larger " + flag("sizes"));
  return {alpha, 1.0 / slope};
}

}  // namespace meshsim
