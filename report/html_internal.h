// Internals shared by the HTML report's section renderers (not a public header):
// category colors, fixed-format numbers, axis ticks with readable time labels.
//
//   std::string fill = category_color("tp", 0);              // "#f28e2b"
//   AxisTicks t = time_ticks(0.0, 0.0834);                   // 0, 10 ms, 20 ms, ...
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "report/html_report.h"

namespace meshsim::html {

// The known span categories in canonical (legend) order.
const std::vector<std::string>& known_categories();

// Color of a known category, or of the fallback palette entry `fallback_index`.
std::string category_color(std::string_view category, int fallback_index);

// A known category named as a word inside a breakdown key ("exposed tp comm" -> "tp"),
// else "".
std::string category_in(std::string_view key);

// Color of item i of a palette meant for things that are not span categories.
std::string palette_color(int i);

// Fixed-point number with `decimals` digits; "-0.00" is written "0.00".
std::string num(double v, int decimals = 2);

// Seconds as text with a unit chosen for the value ("850 us", "12.3 ms", "1.25 s").
std::string format_seconds(double s);

// Bytes in GiB with two decimals ("71.53 GiB").
std::string format_gib(double bytes);

struct AxisTick {
  double value;
  std::string label;
};

// 4 to 10 round ticks covering [lo, hi] (steps of 1, 2 or 5 x 10^k).
std::vector<AxisTick> linear_ticks(double lo, double hi, int target = 8);

// Ticks of a time axis in seconds, labelled in one unit (us, ms or s) for the whole axis.
std::vector<AxisTick> time_ticks(double lo_s, double hi_s, int target = 8);

// The timeline section (html_timeline.cpp).
std::string timeline_section(const HtmlReport& report);

}  // namespace meshsim::html
