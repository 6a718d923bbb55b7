// Strong unit types for simulated time, data sizes and bandwidth.
//
// Simulated time is an integer count of picoseconds (int64: +-106 days of range),
// so event ordering is exact and runs are reproducible. Bytes are int64 counts.
// Bandwidth is bytes per second, stored as a double; the flow model divides by it.
//
//   Time t = us(1.5) + ns(200);          // 1'700'000 ps
//   Bytes n = GiB(1);                      // 1'073'741'824
//   Bandwidth b = GBps(25);                // 25e9 bytes/s
//   Time x = transfer_time(n, b);          // ceil(n / b) in ps
//   parse_bytes("64MiB"), parse_bandwidth("200Gb/s"), parse_time("1.5us"), parse_flops("989TFLOP/s")
#pragma once

#include <compare>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace meshsim {

// Thrown (as meshsim::Error) when simulated-time arithmetic would leave int64.
[[noreturn]] void time_overflow();

class Time {
 public:
  constexpr Time() = default;
  static constexpr Time from_ps(std::int64_t ps) { return Time(ps); }
  constexpr std::int64_t ps() const { return ps_; }
  constexpr double seconds() const { return static_cast<double>(ps_) * 1e-12; }
  constexpr double us() const { return static_cast<double>(ps_) * 1e-6; }
  constexpr auto operator<=>(const Time&) const = default;
  // Checked: a result outside int64 throws (time_overflow) instead of wrapping.
  constexpr Time operator+(Time o) const {
    std::int64_t r = 0;
    if (__builtin_add_overflow(ps_, o.ps_, &r)) time_overflow();
    return Time(r);
  }
  constexpr Time operator-(Time o) const {
    std::int64_t r = 0;
    if (__builtin_sub_overflow(ps_, o.ps_, &r)) time_overflow();
    return Time(r);
  }
  constexpr Time& operator+=(Time o) { return *this = *this + o; }
  constexpr Time& operator-=(Time o) { return *this = *this - o; }
  constexpr Time operator*(std::int64_t k) const {
    std::int64_t r = 0;
    if (__builtin_mul_overflow(ps_, k, &r)) time_overflow();
    return Time(r);
  }
  static constexpr Time max() { return Time(INT64_MAX); }

 private:
  constexpr explicit Time(std::int64_t ps) : ps_(ps) {}
  std::int64_t ps_ = 0;
};

// The longest simulated duration or instant meshsim represents: 2^62 ps, about 53 days (half
// of Time's range, so that a sum of two never wraps).
inline constexpr std::int64_t kMaxTimePs = std::int64_t{1} << 62;

// A computed duration of `ps` picoseconds, rounded; Error naming `what` when it is not a
// finite number in [0, kMaxTimePs] (an absurd size, or a bandwidth near zero).
Time duration_ps(double ps, const std::string& what);

// Rounds to the nearest picosecond.
constexpr Time ps(std::int64_t v) { return Time::from_ps(v); }
constexpr Time ns(double v) { return Time::from_ps(static_cast<std::int64_t>(v * 1e3 + (v >= 0 ? 0.5 : -0.5))); }
constexpr Time us(double v) { return Time::from_ps(static_cast<std::int64_t>(v * 1e6 + (v >= 0 ? 0.5 : -0.5))); }
constexpr Time ms(double v) { return Time::from_ps(static_cast<std::int64_t>(v * 1e9 + (v >= 0 ? 0.5 : -0.5))); }
constexpr Time sec(double v) { return Time::from_ps(static_cast<std::int64_t>(v * 1e12 + (v >= 0 ? 0.5 : -0.5))); }

using Bytes = std::int64_t;
constexpr Bytes KiB(double v) { return static_cast<Bytes>(v * 1024.0); }
constexpr Bytes MiB(double v) { return static_cast<Bytes>(v * 1024.0 * 1024.0); }
constexpr Bytes GiB(double v) { return static_cast<Bytes>(v * 1024.0 * 1024.0 * 1024.0); }

class Bandwidth {
 public:
  constexpr Bandwidth() = default;
  static constexpr Bandwidth from_bytes_per_s(double v) { return Bandwidth(v); }
  constexpr double bytes_per_s() const { return bps_; }
  constexpr double bytes_per_ps() const { return bps_ * 1e-12; }
  constexpr double gbytes_per_s() const { return bps_ * 1e-9; }
  constexpr auto operator<=>(const Bandwidth&) const = default;
  constexpr Bandwidth operator*(double k) const { return Bandwidth(bps_ * k); }

 private:
  constexpr explicit Bandwidth(double v) : bps_(v) {}
  double bps_ = 0;
};

constexpr Bandwidth Bps(double v) { return Bandwidth::from_bytes_per_s(v); }
constexpr Bandwidth GBps(double v) { return Bandwidth::from_bytes_per_s(v * 1e9); }
constexpr Bandwidth Gbps(double v) { return Bandwidth::from_bytes_per_s(v * 1e9 / 8.0); }

// ceil(bytes / bandwidth) in picoseconds; bandwidth must be positive.
Time transfer_time(Bytes bytes, Bandwidth bw);

// Parsers for user-written quantities. `field` names the YAML key or CLI flag
// for the error message. All throw meshsim::Error on bad input.
//   bytes:     "4096", "1KiB", "64MiB", "1.5GB", "4GiB"  (KB/MB/GB decimal, KiB/MiB/GiB binary)
//   bandwidth: "25GB/s", "200Gb/s", "1.5TB/s", "100MB/s", "800Mb/s"  (B = bytes, b = bits)
//   time:      "1.5us", "200ns", "3ms", "2s", "500ps"
Bytes parse_bytes(std::string_view text, std::string_view field);
// One size, or a sweep MIN:MAX doubling ("1KiB:4GiB" = 1KiB, 2KiB, ..., 4GiB), or
// MIN:MAX:F multiplying by the integer F (nccl-tests' -b MIN -e MAX -f F: "8:8GiB:4").
std::vector<Bytes> parse_bytes_sweep(std::string_view text, std::string_view field);
Bandwidth parse_bandwidth(std::string_view text, std::string_view field);
Time parse_time(std::string_view text, std::string_view field);
//   flops:     "989TFLOP/s", "67TFLOPS", "1.2PFLOP/s", "500GFLOP/s"  (returns FLOP/s; must be positive)
double parse_flops(std::string_view text, std::string_view field);

// A whole number in [-1e9, 1e9] written alone ("16", "-3"), or nullopt ("16x", "", "1e99").
std::optional<int> parse_int(std::string_view text);

// Human-readable forms used by reports: "64MiB", "1.50us", "25.0GB/s". A size reads as a whole
// number of TiB, GiB, MiB, TB, GB or MB when it is one (so 64MB reads 64MB, not 62500KiB), of
// KiB below a MiB, else with two decimals of the largest binary unit it reaches ("976.57KiB").
std::string format_bytes(Bytes b);
std::string format_time(Time t);
std::string format_bandwidth(Bandwidth bw);
std::string format_flops(double flops_per_s);  // "989.0TFLOP/s"

}  // namespace meshsim
