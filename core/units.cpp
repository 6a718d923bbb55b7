#include "core/units.h"

#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.h"

namespace meshsim {

void time_overflow() {
  throw TimeRangeError(
      "simulated time left meshsim's range (about 106 days); the sizes of the input are out of proportion");
}

Time duration_ps(double ps, const std::string& what) {
  if (!(ps >= 0) || ps >= static_cast<double>(kMaxTimePs))
    throw TimeRangeError(
        fmt::format("{} takes {} s of simulated time, beyond meshsim's range (0 to 53 days); the sizes "
                    "or bandwidths of the input are out of proportion",
                    what, ps * 1e-12));
  return Time::from_ps(std::llround(ps));
}

void assertion_failed(const char* expr, const char* file, int line) {
  // An internal bug, not a user error: report it loudly and stop this operation.
  throw std::logic_error(fmt::format("internal invariant violated: {} ({}:{})", expr, file, line));
}

Time transfer_time(Bytes bytes, Bandwidth bw) {
  MESHSIM_ASSERT(bw.bytes_per_s() > 0);
  const double ps = std::ceil(static_cast<double>(bytes) / bw.bytes_per_ps() - 1e-9);
  return duration_ps(ps < 0 ? 0 : ps, fmt::format("a transfer of {} bytes", bytes));
}

namespace {

struct NumberAndUnit {
  double value = 0;
  std::string unit;
};

NumberAndUnit split(std::string_view text, std::string_view field, std::string_view example) {
  std::string s(text);
  // trim
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  std::size_t b = 0;
  while (b < s.size() && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  s = s.substr(b);
  if (s.empty()) throw Error(fmt::format("{}: empty value; write e.g. {}", field, example));
  const char* begin = s.c_str();
  char* end = nullptr;
  const double v = std::strtod(begin, &end);
  if (end == begin || !std::isfinite(v))
    throw Error(fmt::format("{}: '{}' does not start with a number; write e.g. {}", field, text, example));
  std::string unit(end);
  while (!unit.empty() && std::isspace(static_cast<unsigned char>(unit.front()))) unit.erase(0, 1);
  return {v, unit};
}

// A unit's name and what one of it is worth in the parser's base unit.
struct UnitScale {
  const char* name;
  double scale;
};

// What one `unit` is worth in `units`; an Error naming the field, the kind of unit and the
// ones to use when it is none of them.
template <std::size_t N>
double scale_of(const UnitScale (&units)[N], const std::string& unit, std::string_view field, std::string_view text,
                const char* kind, const char* use) {
  for (const UnitScale& u : units)
    if (unit == u.name) return u.scale;
  throw Error(fmt::format("{}: unknown {} unit '{}' in '{}'; {}", field, kind, unit, text, use));
}

constexpr UnitScale kByteUnits[] = {
    {"", 1},       {"B", 1},         {"KB", 1e3},        {"MB", 1e6},           {"GB", 1e9},
    {"TB", 1e12},  {"KiB", 1024.0},  {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0},
    {"K", 1024.0}, {"M", 1048576.0}, {"G", 1073741824.0}};
constexpr UnitScale kBandwidthUnits[] = {
    {"B/s", 1},         {"KB/s", 1e3},     {"MB/s", 1e6},        {"GB/s", 1e9},
    {"TB/s", 1e12},     {"KiB/s", 1024.0}, {"MiB/s", 1048576.0}, {"GiB/s", 1073741824.0},
    {"b/s", 1.0 / 8},   {"Kb/s", 1e3 / 8}, {"Mb/s", 1e6 / 8},    {"Gb/s", 1e9 / 8},
    {"Tb/s", 1e12 / 8}, {"Gbps", 1e9 / 8}, {"Mbps", 1e6 / 8},    {"GBps", 1e9}};
constexpr UnitScale kTimeUnits[] = {{"ps", 1}, {"ns", 1e3}, {"us", 1e6}, {"ms", 1e9}, {"s", 1e12}};
constexpr UnitScale kFlopsUnits[] = {{"FLOP/s", 1}, {"GFLOP/s", 1e9}, {"TFLOP/s", 1e12}, {"PFLOP/s", 1e15},
                                     {"FLOPS", 1},  {"GFLOPS", 1e9},  {"TFLOPS", 1e12},  {"PFLOPS", 1e15}};

}  // namespace

Bytes parse_bytes(std::string_view text, std::string_view field) {
  const auto [v, unit] = split(text, field, "64MiB");
  const double mult =
      scale_of(kByteUnits, unit, field, text, "size", "use B, KB, MB, GB, KiB, MiB or GiB (e.g. 64MiB)");
  const double bytes = v * mult;
  if (bytes < 0) throw Error(fmt::format("{}: '{}' is negative; sizes must be >= 0", field, text));
  // No message, buffer or memory meshsim models comes near a pebibyte; past it times overflow.
  if (bytes > 1125899906842624.0)
    throw Error(fmt::format("{}: '{}' is over 1PiB; write a message or memory size, e.g. 64MiB", field, text));
  if (std::fabs(bytes - std::round(bytes)) > 1e-6)
    throw Error(fmt::format("{}: '{}' is not a whole number of bytes", field, text));
  return static_cast<Bytes>(std::llround(bytes));
}

std::vector<Bytes> parse_bytes_sweep(std::string_view text, std::string_view field) {
  const auto colon = text.find(':');
  if (colon == std::string_view::npos) return {parse_bytes(text, field)};
  std::string_view rest = text.substr(colon + 1);
  int factor = 2;
  if (const auto second = rest.find(':'); second != std::string_view::npos) {
    const std::optional<int> f = parse_int(rest.substr(second + 1));
    if (!f || *f < 2 || *f > 1024)
      throw Error(fmt::format("{}: step factor '{}' in '{}' is not an integer in 2..1024; write e.g. 8:8GiB:2", field,
                              rest.substr(second + 1), text));
    factor = *f;
    rest = rest.substr(0, second);
  }
  const Bytes lo = parse_bytes(text.substr(0, colon), field);
  const Bytes hi = parse_bytes(rest, field);
  if (lo <= 0 || hi < lo)
    throw Error(std::string(field) + ": sweep '" + std::string(text) + "' needs 0 < MIN <= MAX, e.g. 1KiB:4GiB");
  std::vector<Bytes> sizes;
  for (Bytes b = lo;; b *= factor) {  // multiplying stops before it could wrap
    sizes.push_back(b);
    if (b > hi / factor) break;
  }
  return sizes;
}

Bandwidth parse_bandwidth(std::string_view text, std::string_view field) {
  const auto [v, unit] = split(text, field, "25GB/s or 200Gb/s");
  const double bytes_per_s = scale_of(kBandwidthUnits, unit, field, text, "bandwidth",
                                      "use GB/s (bytes) or Gb/s (bits), e.g. 25GB/s or 200Gb/s");
  if (v <= 0) throw Error(fmt::format("{}: '{}' must be positive; write e.g. 25GB/s or 200Gb/s", field, text));
  const double bps = v * bytes_per_s;
  // Outside 1 KB/s .. 1 PB/s no link exists, and transfer times leave meshsim's range.
  if (!(bps >= 1e3 && bps <= 1e15))
    throw Error(
        fmt::format("{}: '{}' is outside 1KB/s .. 1PB/s; write a link's rate, e.g. 25GB/s or 200Gb/s", field, text));
  return Bandwidth::from_bytes_per_s(bps);
}

Time parse_time(std::string_view text, std::string_view field) {
  const auto [v, unit] = split(text, field, "1.5us");
  if (unit.empty() && v == 0) return Time{};  // a bare 0 needs no unit
  const double ps = scale_of(kTimeUnits, unit, field, text, "time", "use ps, ns, us, ms or s (e.g. 1.5us)");
  if (v < 0) throw Error(fmt::format("{}: '{}' is negative; times must be >= 0", field, text));
  // Latencies and overheads: an hour is already absurd, and 1e300 s overflowed the sums.
  if (!(v * ps <= 3600e12))
    throw Error(
        fmt::format("{}: '{}' is over an hour; a latency or overhead is a few microseconds (e.g. 1.5us)", field, text));
  return Time::from_ps(static_cast<std::int64_t>(std::llround(v * ps)));
}

double parse_flops(std::string_view text, std::string_view field) {
  const auto [v, unit] = split(text, field, "989TFLOP/s");
  const double flops =
      scale_of(kFlopsUnits, unit, field, text, "compute-rate", "use GFLOP/s, TFLOP/s or PFLOP/s (e.g. 989TFLOP/s)");
  if (v <= 0) throw Error(fmt::format("{}: '{}' must be positive; write e.g. 989TFLOP/s", field, text));
  return v * flops;
}

std::optional<int> parse_int(std::string_view text) {
  const std::string s(text);
  std::size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(s, &used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (used == 0 || used != s.size() || v > 1'000'000'000 || v < -1'000'000'000) return std::nullopt;
  return static_cast<int>(v);
}

std::string format_bytes(Bytes b) {
  struct Unit {
    Bytes size;
    const char* name;
  };
  // A size that is a whole number of one of these reads as typed: 64MiB, and 64MB (which is
  // 62500KiB); whole KiB only below a MiB (1536KiB reads 1.50MiB).
  constexpr Unit kWhole[] = {{Bytes{1} << 40, "TiB"},   {Bytes{1} << 30, "GiB"}, {Bytes{1} << 20, "MiB"},
                             {1'000'000'000'000, "TB"}, {1'000'000'000, "GB"},   {1'000'000, "MB"}};
  for (const Unit& u : kWhole)
    if (b >= u.size && b % u.size == 0) return fmt::format("{}{}", b / u.size, u.name);
  if (b >= 1024 && b < (Bytes{1} << 20) && b % 1024 == 0) return fmt::format("{}KiB", b >> 10);
  if (b >= (Bytes{1} << 30)) return fmt::format("{:.2f}GiB", static_cast<double>(b) / (1 << 30));
  if (b >= (Bytes{1} << 20)) return fmt::format("{:.2f}MiB", static_cast<double>(b) / (1 << 20));
  if (b >= 1024) return fmt::format("{:.2f}KiB", static_cast<double>(b) / 1024);
  return fmt::format("{}B", b);
}

std::string format_time(Time t) {
  const double p = static_cast<double>(t.ps());
  if (p >= 1e12) return fmt::format("{:.3f}s", p * 1e-12);
  if (p >= 1e9) return fmt::format("{:.3f}ms", p * 1e-9);
  if (p >= 1e6) return fmt::format("{:.2f}us", p * 1e-6);
  if (p >= 1e3) return fmt::format("{:.2f}ns", p * 1e-3);
  return fmt::format("{}ps", t.ps());
}

std::string format_bandwidth(Bandwidth bw) {
  const double g = bw.gbytes_per_s();
  if (g >= 1.0) return fmt::format("{:.2f}GB/s", g);
  return fmt::format("{:.2f}MB/s", bw.bytes_per_s() * 1e-6);
}

std::string format_flops(double flops_per_s) {
  if (flops_per_s >= 1e15) return fmt::format("{:.2f}PFLOP/s", flops_per_s * 1e-15);
  if (flops_per_s >= 1e12) return fmt::format("{:.1f}TFLOP/s", flops_per_s * 1e-12);
  return fmt::format("{:.1f}GFLOP/s", flops_per_s * 1e-9);
}

}  // namespace meshsim
