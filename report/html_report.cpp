// The HTML report page: shared helpers (html_internal.h), the summary, breakdown,
// memory, scaling-plot and table sections, and the page around them. The timeline
// is in html_timeline.cpp.
#include "report/html_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>

#include "core/error.h"
#include "report/html_internal.h"

namespace meshsim {

std::string html_escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

namespace html {

const std::vector<std::string>& known_categories() {
  static const std::vector<std::string> k = {"forward", "backward", "compute", "recompute", "tp",     "sp",   "cp",
                                             "ep",      "pp",       "dp",      "optimizer", "bubble", "idle", "other"};
  return k;
}

std::string category_color(std::string_view category, int fallback_index) {
  static const std::vector<std::pair<std::string_view, std::string_view>> colors = {
      {"forward", "#4e79a7"}, {"backward", "#1b3a5c"}, {"compute", "#4e79a7"},   {"recompute", "#a0cbe8"},
      {"tp", "#f28e2b"},      {"sp", "#ffbe7d"},       {"cp", "#b07aa1"},        {"ep", "#d4a6c8"},
      {"pp", "#59a14f"},      {"dp", "#76b7b2"},       {"optimizer", "#edc948"}, {"bubble", "#d3d3d3"},
      {"idle", "#e5e7eb"},    {"other", "#9c755f"}};
  for (const auto& [name, color] : colors) {
    if (name == category) return std::string(color);
  }
  static const std::vector<std::string_view> fallback = {"#ff9da7", "#8cd17d", "#86bcb6", "#e15759",
                                                         "#bab0ac", "#499894", "#fabfd2", "#b6992d"};
  return std::string(fallback[static_cast<std::size_t>(fallback_index) % fallback.size()]);
}

std::string category_in(std::string_view key) {
  std::size_t i = 0;
  while (i < key.size()) {
    while (i < key.size() && !std::isalnum(static_cast<unsigned char>(key[i]))) ++i;
    std::size_t j = i;
    while (j < key.size() && std::isalnum(static_cast<unsigned char>(key[j]))) ++j;
    std::string word(key.substr(i, j - i));
    std::transform(word.begin(), word.end(), word.begin(), [](unsigned char c) { return std::tolower(c); });
    for (const std::string& k : known_categories()) {
      if (word == k) return k;
    }
    i = j;
  }
  return "";
}

std::string palette_color(int i) {
  static const std::vector<std::string_view> p = {"#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2",
                                                  "#edc948", "#ff9da7", "#9c755f", "#bab0ac", "#e15759"};
  return std::string(p[static_cast<std::size_t>(i) % p.size()]);
}

std::string num(double v, int decimals) {
  std::string s = fmt::format("{:.{}f}", v, decimals);
  if (!s.empty() && s[0] == '-' && s.find_first_not_of("-0.") == std::string::npos) s.erase(0, 1);
  return s;
}

std::string format_seconds(double s) {
  const double a = std::abs(s);
  if (a == 0) return "0 s";
  if (a < 1e-3) return num(s * 1e6, 1) + " µs";
  if (a < 1) return num(s * 1e3, 2) + " ms";
  return num(s, 3) + " s";
}

std::string format_gib(double bytes) { return num(bytes / (1024.0 * 1024.0 * 1024.0), 2) + " GiB"; }

namespace {

double nice_step(double range, int target) {
  const double raw = range / std::max(target, 1);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / mag;
  return (norm < 1.5 ? 1 : norm < 3.5 ? 2 : norm < 7.5 ? 5 : 10) * mag;
}

int decimals_for(double step) { return std::max(0, static_cast<int>(-std::floor(std::log10(step) + 1e-9))); }

}  // namespace

std::vector<AxisTick> linear_ticks(double lo, double hi, int target) {
  if (!(hi > lo)) hi = lo + 1;
  const double step = nice_step(hi - lo, target);
  const int dec = decimals_for(step);
  std::vector<AxisTick> out;
  const double first = std::ceil(lo / step - 1e-9) * step;
  for (int i = 0;; ++i) {
    const double v = first + i * step;
    if (v > hi + step * 1e-9) break;
    out.push_back({v, num(v, dec)});
  }
  return out;
}

std::vector<AxisTick> time_ticks(double lo_s, double hi_s, int target) {
  const double m = std::max(std::abs(lo_s), std::abs(hi_s));
  const double f = m < 1e-3 ? 1e6 : m < 1 ? 1e3 : 1;
  const char* unit = m < 1e-3 ? "µs" : m < 1 ? "ms" : "s";
  std::vector<AxisTick> out = linear_ticks(lo_s * f, hi_s * f, target);
  for (AxisTick& t : out) {
    t.value /= f;
    t.label += std::string(" ") + unit;
  }
  return out;
}

namespace {

std::string svg_open(double w, double h) {
  return fmt::format(
      "<svg class=\"chart\" viewBox=\"0 0 {0} {1}\" width=\"{0}\" height=\"{1}\" "
      "xmlns=\"http://www.w3.org/2000/svg\">\n",
      num(w, 0), num(h, 0));
}

std::string legend_item(double x, double y, const std::string& fill, const std::string& text) {
  return fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{}\"/>"
      "<text x=\"{}\" y=\"{}\" class=\"legend\">{}</text>\n",
      num(x, 0), num(y, 0), fill, num(x + 16, 0), num(y + 10, 0), html_escape(text));
}

double legend_width(const std::string& text) { return 16 + text.size() * 7.0 + 18; }

// A round time for a log axis tick: "200 ms", "1 s", "50 µs".
std::string short_seconds(double s) {
  const double f = s < 1e-3 ? 1e6 : s < 1 ? 1e3 : 1;
  const char* unit = s < 1e-3 ? "µs" : s < 1 ? "ms" : "s";
  return fmt::format("{:.3g} {}", s * f, unit);
}

bool looks_numeric(const std::string& s) {
  return !s.empty() && (std::isdigit(static_cast<unsigned char>(s[0])) ||
                        ((s[0] == '-' || s[0] == '.' || s[0] == '+') && s.size() > 1 &&
                         std::isdigit(static_cast<unsigned char>(s[1]))));
}

std::string summary_section(const HtmlReport& r) {
  std::string s = "<section id=\"summary\">\n";
  s += fmt::format("<h1>{}</h1>\n", html_escape(r.title.empty() ? std::string("meshsim report") : r.title));
  if (!r.summary.empty()) {
    s += "<table class=\"summary\">\n";
    for (const auto& [k, v] : r.summary) {
      s += fmt::format("<tr><th>{}</th><td>{}</td></tr>\n", html_escape(k), html_escape(v));
    }
    s += "</table>\n";
  }
  s += "</section>\n";
  return s;
}

std::string breakdown_section(const HtmlReport& r) {
  if (r.breakdown.empty()) return "";
  double total = 0, biggest = 0;
  for (const auto& [k, v] : r.breakdown) {
    total += std::max(v, 0.0);
    biggest = std::max(biggest, v);
  }
  std::vector<std::string> fills;
  int fallback = 0;
  for (const auto& [k, v] : r.breakdown) {
    const std::string cat = category_in(k);
    fills.push_back(cat.empty() ? category_color("", fallback++) : category_color(cat, 0));
  }
  const double label_w = 220, plot_w = 760, row_h = 24, top = 62;
  const double height = top + r.breakdown.size() * row_h + 10;
  std::string s = "<section id=\"breakdown\">\n<h2>Time breakdown</h2>\n";
  s += fmt::format("<p class=\"note\">Total {} over {} categories; percentages of the total.</p>\n",
                   format_seconds(total), r.breakdown.size());
  s += svg_open(label_w + plot_w + 220, height);
  // The stacked bar: the whole step at a glance.
  double x = label_w;
  for (std::size_t i = 0; i < r.breakdown.size(); ++i) {
    const auto& [k, v] = r.breakdown[i];
    const double w = total > 0 ? std::max(v, 0.0) / total * plot_w : 0;
    const double pct = total > 0 ? 100 * std::max(v, 0.0) / total : 0;
    s += fmt::format(
        "<rect x=\"{}\" y=\"8\" width=\"{}\" height=\"30\" fill=\"{}\" stroke=\"#fff\" "
        "stroke-width=\"0.5\"><title>{}: {} ({} %)</title></rect>\n",
        num(x, 2), num(w, 2), fills[i], html_escape(k), format_seconds(v), num(pct, 1));
    if (w >= 44) {
      s += fmt::format("<text x=\"{}\" y=\"27\" text-anchor=\"middle\" class=\"sl\">{} %</text>\n", num(x + w / 2, 2),
                       num(pct, 1));
    }
    x += w;
  }
  s += fmt::format("<text x=\"{}\" y=\"27\" text-anchor=\"end\" class=\"lane\">whole step</text>\n",
                   num(label_w - 8, 0));
  // One bar per category, scaled to the largest.
  for (std::size_t i = 0; i < r.breakdown.size(); ++i) {
    const auto& [k, v] = r.breakdown[i];
    const double y = top + i * row_h;
    const double w = biggest > 0 ? std::max(v, 0.0) / biggest * plot_w : 0;
    const double pct = total > 0 ? 100 * std::max(v, 0.0) / total : 0;
    s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\" class=\"lane\">{}</text>\n", num(label_w - 8, 0),
                     num(y + 15, 0), html_escape(k));
    s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"18\" fill=\"{}\"><title>{}: {}</title></rect>\n",
                     num(label_w, 0), num(y + 2, 0), num(w, 2), fills[i], html_escape(k), format_seconds(v));
    s += fmt::format("<text x=\"{}\" y=\"{}\" class=\"value\">{}  ({} %)</text>\n", num(label_w + w + 6, 2),
                     num(y + 15, 0), format_seconds(v), num(pct, 1));
  }
  s += "</svg>\n</section>\n";
  return s;
}

std::string memory_section(const HtmlReport& r) {
  if (r.memory.empty()) return "";
  const double gib = 1024.0 * 1024.0 * 1024.0;
  double max_bytes = 0;
  std::vector<std::string> items;  // in order of first appearance, one color each
  for (const HtmlMemoryBar& b : r.memory) {
    double sum = 0;
    for (const auto& [name, bytes] : b.items_bytes) {
      sum += std::max(bytes, 0.0);
      if (std::find(items.begin(), items.end(), name) == items.end()) items.push_back(name);
    }
    max_bytes = std::max({max_bytes, sum, b.capacity_bytes, b.peak_bytes});
  }
  if (max_bytes <= 0) max_bytes = gib;
  const std::vector<AxisTick> ticks = linear_ticks(0, max_bytes * 1.05 / gib, 8);
  const double axis_max = std::max(ticks.back().value * gib, max_bytes * 1.05);
  const double label_w = 170, plot_w = 760, row_h = 34, top = 14;
  const double axis_y = top + r.memory.size() * row_h;
  const double height = axis_y + 66;
  auto X = [&](double bytes) { return label_w + bytes / axis_max * plot_w; };

  std::string s = "<section id=\"memory\">\n<h2>Memory per role</h2>\n";
  s += "<p class=\"note\">Stacked items; dashed line: device capacity; triangle: peak. Red: the peak exceeds "
       "the capacity.</p>\n";
  s += svg_open(label_w + plot_w + 300, height);
  for (const AxisTick& t : ticks) {
    const double x = X(t.value * gib);
    s += fmt::format(
        "<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" class=\"grid\"/>"
        "<text x=\"{0}\" y=\"{3}\" text-anchor=\"middle\" class=\"tick\">{4}</text>\n",
        num(x, 1), num(top - 4, 0), num(axis_y + 4, 0), num(axis_y + 16, 0), t.label);
  }
  s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" class=\"axis-title\">GiB</text>\n",
                   num(label_w + plot_w / 2, 0), num(axis_y + 32, 0));
  for (std::size_t i = 0; i < r.memory.size(); ++i) {
    const HtmlMemoryBar& b = r.memory[i];
    const double y = top + i * row_h + 8;
    const bool over = b.capacity_bytes > 0 && b.peak_bytes > b.capacity_bytes;
    s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\" class=\"lane{}\">{}</text>\n", num(label_w - 8, 0),
                     num(y + 13, 0), over ? " over" : "", html_escape(b.role));
    double at = 0;
    for (const auto& [name, bytes] : b.items_bytes) {
      const double v = std::max(bytes, 0.0);
      const int idx = static_cast<int>(std::find(items.begin(), items.end(), name) - items.begin());
      s += fmt::format(
          "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"18\" fill=\"{}\" stroke=\"#fff\" "
          "stroke-width=\"0.5\"><title>{} · {}: {}</title></rect>\n",
          num(X(at), 2), num(y, 0), num(X(at + v) - X(at), 2), palette_color(idx), html_escape(b.role),
          html_escape(name), format_gib(v));
      at += v;
    }
    if (b.capacity_bytes > 0) {
      s += fmt::format(
          "<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" class=\"capacity\">"
          "<title>capacity {3}</title></line>\n",
          num(X(b.capacity_bytes), 2), num(y - 5, 0), num(y + 23, 0), format_gib(b.capacity_bytes));
    }
    std::string note;
    if (b.peak_bytes > 0) {
      const double px = X(b.peak_bytes);
      s += fmt::format("<path d=\"M{0} {1}l-5 -7h10z\" class=\"peak{2}\"><title>peak {3}</title></path>\n", num(px, 2),
                       num(y, 0), over ? " over" : "", format_gib(b.peak_bytes));
      note = "peak " + format_gib(b.peak_bytes);
    } else {
      note = format_gib(at);
    }
    if (b.capacity_bytes > 0) note += " / " + format_gib(b.capacity_bytes);
    if (over) note += fmt::format(" (over by {})", format_gib(b.peak_bytes - b.capacity_bytes));
    s += fmt::format("<text x=\"{}\" y=\"{}\" class=\"value{}\">{}</text>\n", num(label_w + plot_w + 10, 0),
                     num(y + 13, 0), over ? " over" : "", note);
  }
  double lx = label_w;
  for (std::size_t i = 0; i < items.size(); ++i) {
    s += legend_item(lx, axis_y + 42, palette_color(static_cast<int>(i)), items[i]);
    lx += legend_width(items[i]);
  }
  s += "</svg>\n</section>\n";
  return s;
}

// The scaling chart's frame: plot area, axis ranges and ticks, and the value-to-pixel maps.
struct ScalingAxes {
  static constexpr double left = 90, plot_w = 780, top = 16, plot_h = 340, right = 250;
  static constexpr double bottom = top + plot_h;
  bool logx = false, logy = false;
  double x_lo = 0, x_hi = 0, y_lo = 0, y_hi = 0;
  std::vector<AxisTick> xticks, yticks;

  double X(double v) const {
    const double f =
        logx ? (std::log(v) - std::log(x_lo)) / (std::log(x_hi) - std::log(x_lo)) : (v - x_lo) / (x_hi - x_lo);
    return left + f * plot_w;
  }
  double Y(double t) const {
    const double f = logy ? (std::log(std::max(t, y_lo)) - std::log(y_lo)) / (std::log(y_hi) - std::log(y_lo))
                          : (t - y_lo) / (y_hi - y_lo);
    return bottom - f * plot_h;
  }
};

// The x axis over the distinct sorted xs in [xmin, xmax]: log scale past a ratio of 8.
void scaling_x_axis(const std::vector<double>& xs, double xmin, double xmax, ScalingAxes& a) {
  a.logx = xmin > 0 && xmax / xmin > 8;
  a.x_lo = xmin;
  a.x_hi = xmax;
  if (a.logx) {
    a.x_lo = xmin / 1.25;
    a.x_hi = xmax * 1.25;
    if (xs.size() <= 12) {
      for (double v : xs) a.xticks.push_back({v, fmt::format("{}", v)});
    } else {
      for (double d = std::pow(10.0, std::floor(std::log10(a.x_lo))); d <= a.x_hi; d *= 10) {
        for (double m : {1.0, 2.0, 5.0}) {
          if (d * m >= a.x_lo && d * m <= a.x_hi) a.xticks.push_back({d * m, fmt::format("{}", d * m)});
        }
      }
    }
  } else {
    const double pad = xmax > xmin ? (xmax - xmin) * 0.05 : std::max(std::abs(xmin) * 0.1, 1.0);
    a.x_lo = xmin - pad;
    a.x_hi = xmax + pad;
    // A few whole values (tp = 2, 4, 8) get a tick each and no other: a tick at tp = 3 would
    // name a layout the sweep did not run.
    const bool whole = std::all_of(xs.begin(), xs.end(), [](double v) { return v == std::round(v); });
    if (whole && xs.size() <= 12) {
      for (double v : xs) a.xticks.push_back({v, fmt::format("{}", v)});
    } else {
      a.xticks = linear_ticks(a.x_lo, a.x_hi, 8);
    }
  }
}

// A count as people read it: 378k, 1.25M (`digits` significant digits).
std::string short_count(double v, int digits) {
  const double a = std::abs(v);
  const auto [scale, suffix] = a >= 1e9   ? std::pair{1e9, "G"}
                               : a >= 1e6 ? std::pair{1e6, "M"}
                               : a >= 1e3 ? std::pair{1e3, "k"}
                                          : std::pair{1.0, ""};
  return fmt::format("{:.{}g}{}", v / scale, digits, suffix);
}

// A value of the sweep's y axis in a tooltip (`tick` false) or as a tick label: times as times,
// others as counts with their unit; a tick leaves the unit to the axis title, but for %.
std::string y_text(const HtmlReport& r, double v, bool tick = false) {
  if (r.sweep_y_unit == "s") return short_seconds(v);
  if (r.sweep_y_unit == "%") return fmt::format("{:.{}g}%", v, tick ? 3 : 4);
  return short_count(v, tick ? 3 : 4) + (tick ? "" : " " + r.sweep_y_unit);
}

// The y axis up to tmax.
void scaling_y_axis(const HtmlReport& r, double tmax, ScalingAxes& a) {
  if (tmax <= 0) tmax = 1e-3;
  double tmin = tmax;
  for (const HtmlSweepPoint& p : r.sweep) {
    if (p.y > 0) tmin = std::min(tmin, p.y);
  }
  // Times spanning more than 8x get a log axis too, so strong scaling stays readable.
  a.logy = tmax / tmin > 8;
  if (a.logy) {
    a.y_lo = tmin / 1.25;
    a.y_hi = tmax * 1.25;
    for (double d = std::pow(10.0, std::floor(std::log10(a.y_lo))); d <= a.y_hi; d *= 10) {
      for (double m : {1.0, 2.0, 5.0}) {
        if (d * m >= a.y_lo && d * m <= a.y_hi) a.yticks.push_back({d * m, y_text(r, d * m, true)});
      }
    }
  } else {
    if (r.sweep_y_unit == "s") {
      a.yticks = time_ticks(0, tmax * 1.08, 6);
    } else {
      a.yticks = linear_ticks(0, tmax * 1.08, 6);
      for (AxisTick& t : a.yticks) t.label = y_text(r, t.value, true);
    }
    a.y_hi = std::max(a.yticks.back().value, tmax * 1.08);
  }
}

// The sweep's series in order of appearance, and the axes its points need.
ScalingAxes scaling_axes(const HtmlReport& r, std::vector<std::string>& series) {
  double xmin = r.sweep[0].x, xmax = r.sweep[0].x, tmax = 0;
  std::vector<double> xs;
  for (const HtmlSweepPoint& p : r.sweep) {
    if (std::find(series.begin(), series.end(), p.series) == series.end()) series.push_back(p.series);
    xmin = std::min(xmin, p.x);
    xmax = std::max(xmax, p.x);
    tmax = std::max(tmax, p.y);
    if (std::find(xs.begin(), xs.end(), p.x) == xs.end()) xs.push_back(p.x);
  }
  std::sort(xs.begin(), xs.end());
  ScalingAxes a;
  scaling_x_axis(xs, xmin, xmax, a);
  scaling_y_axis(r, tmax, a);
  return a;
}

// Grid lines, tick labels, axes and their titles.
std::string scaling_grid(const HtmlReport& r, const ScalingAxes& a) {
  const double left = a.left, plot_w = a.plot_w, top = a.top, plot_h = a.plot_h, bottom = a.bottom;
  std::string s;
  for (const AxisTick& t : a.yticks) {
    s += fmt::format(
        "<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" class=\"grid\"/>"
        "<text x=\"{3}\" y=\"{4}\" text-anchor=\"end\" class=\"tick\">{5}</text>\n",
        num(left, 0), num(a.Y(t.value), 1), num(left + plot_w, 0), num(left - 6, 0), num(a.Y(t.value) + 4, 1), t.label);
  }
  for (const AxisTick& t : a.xticks) {
    if (t.value < a.x_lo || t.value > a.x_hi) continue;
    s += fmt::format(
        "<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" class=\"grid\"/>"
        "<text x=\"{0}\" y=\"{3}\" text-anchor=\"middle\" class=\"tick\">{4}</text>\n",
        num(a.X(t.value), 1), num(top, 0), num(bottom + 4, 0), num(bottom + 17, 0), html_escape(t.label));
  }
  s += fmt::format("<path d=\"M{0} {1}V{2}H{3}\" class=\"axis\" fill=\"none\"/>\n", num(left, 0), num(top, 0),
                   num(bottom, 0), num(left + plot_w, 0));
  s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" class=\"axis-title\">{}{}</text>\n",
                   num(left + plot_w / 2, 0), num(bottom + 38, 0),
                   html_escape(r.sweep_x_label.empty() ? std::string("x") : r.sweep_x_label),
                   a.logx ? " (log scale)" : "");
  s += fmt::format(
      "<text transform=\"translate({} {}) rotate(-90)\" text-anchor=\"middle\" class=\"axis-title\">"
      "{}{}</text>\n",
      num(left - 66, 0), num(top + plot_h / 2, 0), html_escape(r.sweep_y_label), a.logy ? " (log scale)" : "");
  return s;
}

// Series si: the line through its points that fit, every point (a cross where it does not
// fit) and its legend entry.
std::string scaling_series(const HtmlReport& r, const ScalingAxes& a, const std::string& name, std::size_t si) {
  const double left = a.left, plot_w = a.plot_w, top = a.top;
  std::string s;
  const std::string color = palette_color(static_cast<int>(si));
  std::vector<const HtmlSweepPoint*> pts;
  for (const HtmlSweepPoint& p : r.sweep) {
    if (p.series == name) pts.push_back(&p);
  }
  std::stable_sort(pts.begin(), pts.end(),
                   [](const HtmlSweepPoint* x, const HtmlSweepPoint* y) { return x->x < y->x; });
  std::string line;
  for (const HtmlSweepPoint* p : pts) {
    if (p->fits) line += fmt::format("{}{} {}", line.empty() ? "M" : "L", num(a.X(p->x), 2), num(a.Y(p->y), 2));
  }
  if (!line.empty()) {
    s += fmt::format("<path d=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>\n", line, color);
  }
  for (const HtmlSweepPoint* p : pts) {
    const std::string tip = fmt::format("{} · {}: {} = {}, {}{}", html_escape(p->series), html_escape(p->label),
                                        html_escape(r.sweep_x_label), fmt::format("{}", p->x),
                                        r.sweep_y_unit == "s" ? format_seconds(p->y) : y_text(r, p->y),
                                        p->fits ? "" : ", does not fit in memory");
    const std::string px = num(a.X(p->x), 2), py = num(a.Y(p->y), 2);
    if (p->fits) {
      s += fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"4\" fill=\"{}\"><title>{}</title></circle>\n", px, py, color,
                       tip);
    } else {
      s += fmt::format(
          "<path d=\"M{0} {1}m-5 -5l10 10m0 -10l-10 10\" stroke=\"{2}\" stroke-width=\"2.5\" "
          "class=\"nofit\"><title>{3}</title></path>\n",
          px, py, color, tip);
    }
  }
  const double ly = top + 6 + si * 20;
  s += fmt::format(
      "<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"{3}\" stroke-width=\"2\"/>"
      "<circle cx=\"{4}\" cy=\"{1}\" r=\"4\" fill=\"{3}\"/>"
      "<text x=\"{5}\" y=\"{6}\" class=\"legend\">{7}</text>\n",
      num(left + plot_w + 20, 0), num(ly, 0), num(left + plot_w + 44, 0), color, num(left + plot_w + 32, 0),
      num(left + plot_w + 52, 0), num(ly + 4, 0), html_escape(name));
  return s;
}

std::string scaling_section(const HtmlReport& r) {
  if (r.sweep.empty()) return "";
  std::vector<std::string> series;
  const ScalingAxes a = scaling_axes(r, series);
  const double left = a.left, plot_w = a.plot_w, top = a.top, right = a.right, bottom = a.bottom;

  std::string s = "<section id=\"scaling\">\n<h2>Scaling</h2>\n";
  std::string what = r.sweep_y_label;
  if (!what.empty()) what[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(what[0])));
  s += fmt::format("<p class=\"note\">{} vs {}{}{}; crosses do not fit in memory.</p>\n", html_escape(what),
                   html_escape(r.sweep_x_label.empty() ? std::string("x") : r.sweep_x_label),
                   a.logx ? " (log scale)" : "", a.logy ? ", on a log scale" : "");
  s += svg_open(left + plot_w + right, bottom + 56);
  s += scaling_grid(r, a);
  for (std::size_t si = 0; si < series.size(); ++si) s += scaling_series(r, a, series[si], si);
  const double ly = top + 6 + series.size() * 20 + 6;
  s += fmt::format(
      "<path d=\"M{0} {1}m-5 -5l10 10m0 -10l-10 10\" stroke=\"#555\" stroke-width=\"2.5\"/>"
      "<text x=\"{2}\" y=\"{3}\" class=\"legend\">does not fit in memory</text>\n",
      num(left + plot_w + 32, 0), num(ly, 0), num(left + plot_w + 52, 0), num(ly + 4, 0));
  s += "</svg>\n</section>\n";
  return s;
}

std::string table_section(const HtmlReport& r) {
  if (r.table.empty()) return "";
  std::string s = "<section id=\"table\">\n<h2>Ranking</h2>\n<table class=\"ranked\">\n<thead><tr>";
  for (const std::string& h : r.table[0]) s += fmt::format("<th>{}</th>", html_escape(h));
  s += "</tr></thead>\n<tbody>\n";
  for (std::size_t i = 1; i < r.table.size(); ++i) {
    s += "<tr>";
    for (const std::string& c : r.table[i]) {
      s += fmt::format("<td{}>{}</td>", looks_numeric(c) ? " class=\"num\"" : "", html_escape(c));
    }
    s += "</tr>\n";
  }
  s += "</tbody>\n</table>\n</section>\n";
  return s;
}

// A step line of a link's load over the run, 0..1 of its rate, `w` x `h` pixels.
std::string load_line(const std::vector<std::pair<double, double>>& load, double w, double h) {
  std::string pts;
  double last = 0;
  for (const auto& [x, y] : load) {
    const double px = std::clamp(x, 0.0, 1.0) * w;
    pts += fmt::format("{},{} {},{} ", num(px, 1), num(h - std::clamp(last, 0.0, 1.0) * h, 1), num(px, 1),
                       num(h - std::clamp(y, 0.0, 1.0) * h, 1));
    last = y;
  }
  pts += fmt::format("{},{}", num(w, 1), num(h - std::clamp(last, 0.0, 1.0) * h, 1));
  return fmt::format(
      "<svg class=\"spark\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\"><rect width=\"{0}\" "
      "height=\"{1}\" class=\"sparkbg\"/><polyline points=\"{2}\" class=\"sparkline\"/></svg>",
      num(w, 0), num(h, 0), pts);
}

std::string links_section(const HtmlReport& r) {
  if (r.links.empty()) return "";
  std::string s = "<section id=\"links\">\n<h2>Link load</h2>\n";
  s += "<p class=\"note\">The busiest links of each tier over the iteration (flow fidelity): bytes carried, "
       "utilization (bytes / (rate x iteration time)), the peak load at any instant, and, for the busiest links "
       "overall and the busiest of each tier, the load over the iteration (0 to 100% of the link's achievable "
       "rate).</p>\n";
  s += "<table class=\"ranked\">\n<thead><tr><th>tier</th><th>link</th><th>carried</th><th>utilization</th>"
       "<th>peak</th><th>load over the iteration</th></tr></thead>\n<tbody>\n";
  for (const HtmlLinkLoad& l : r.links) {
    const double u = std::clamp(l.utilization, 0.0, 1.0);
    s += fmt::format(
        "<tr><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\"><svg width=\"80\" height=\"10\">"
        "<rect width=\"80\" height=\"10\" class=\"sparkbg\"/><rect width=\"{}\" height=\"10\" "
        "class=\"bar\"/></svg> {}%</td><td class=\"num\">{}</td><td>{}</td></tr>\n",
        html_escape(l.tier), html_escape(l.name), format_gib(l.bytes), num(80 * u, 1), num(100 * l.utilization, 1),
        l.peak < 0 ? std::string("-") : num(100 * l.peak, 1) + "%", l.load.empty() ? "" : load_line(l.load, 300, 22));
  }
  s += "</tbody>\n</table>\n";
  if (!r.cluster_svg.empty())
    s += "<p class=\"note\">The cluster, each link coloured by the utilization of its busier direction (hover a "
         "link or a device for its name).</p>\n" +
         r.cluster_svg;
  if (!r.sharing_delay.empty()) {
    s += "<p class=\"note\">Time the ops in flight lost to sharing links with each other, by collective "
         "category: what each op took beyond its time alone, summed over the iteration's ops.</p>\n"
         "<table class=\"ranked\">\n<thead><tr><th>category</th><th>ops slowed</th><th>time lost</th></tr></thead>\n"
         "<tbody>\n";
    for (const auto& [category, ops, lost] : r.sharing_delay)
      s += fmt::format("<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>\n",
                       html_escape(category), ops, html_escape(format_time(lost)));
    s += "</tbody>\n</table>\n";
  }
  s += "</section>\n";
  return s;
}

constexpr const char* kStyle = R"(body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;
color:#1f2328;background:#f6f7f9;margin:0;padding:24px}
main{max-width:1320px;margin:0 auto}
section{background:#fff;border:1px solid #e1e4e8;border-radius:8px;padding:16px 20px;margin-bottom:18px}
h1{font-size:22px;margin:0 0 12px}h2{font-size:17px;margin:0 0 6px}
.note{color:#57606a;font-size:13px;margin:0 0 10px}
table{border-collapse:collapse;font-size:13px}
th,td{padding:4px 12px;border-bottom:1px solid #eaecef;text-align:left}
table.summary th{color:#57606a;font-weight:600}
table.ranked thead th{background:#f3f4f6}td.num{text-align:right;font-variant-numeric:tabular-nums}
svg.chart{display:block;max-width:100%;height:auto}
svg text{font-family:inherit;font-size:11px;fill:#1f2328}
svg .tick{font-size:10px;fill:#57606a}svg .axis-title{font-size:12px;fill:#57606a}
svg .sl{font-size:10px}svg .value{font-size:11px;fill:#3b4046}
svg .grid{stroke:#e3e5e8;stroke-width:1}svg .axis{stroke:#8c959f;stroke-width:1}
svg .capacity{stroke:#1f2328;stroke-width:1.5;stroke-dasharray:4 3}
svg .peak{fill:#1f2328}svg .over{fill:#cf222e;font-weight:600}
svg .sparkbg{fill:#f3f4f6}svg .bar{fill:#4e79a7}svg .sparkline{fill:none;stroke:#4e79a7;stroke-width:1}
footer{color:#8c959f;font-size:12px;text-align:center}
)";

}  // namespace
}  // namespace html

std::string render_html_report(const HtmlReport& report) {
  std::string s;
  s += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  s += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  s += fmt::format("<title>{}</title>\n",
                   html_escape(report.title.empty() ? std::string("meshsim report") : report.title));
  s += "<style>\n";
  s += html::kStyle;
  s += "</style>\n</head>\n<body>\n<main>\n";
  s += html::summary_section(report);
  s += html::timeline_section(report);
  s += html::breakdown_section(report);
  s += html::memory_section(report);
  s += html::links_section(report);
  s += html::scaling_section(report);
  s += html::table_section(report);
  s += "<footer>generated by meshsim</footer>\n</main>\n</body>\n</html>\n";
  return s;
}

void write_html_report(const HtmlReport& report, const std::string& path) {
  const std::string text = render_html_report(report);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out)
    throw Error(
        fmt::format("--report {}: cannot open the file for writing; check the directory exists and is writable", path));
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  out.close();
  if (!out) throw Error(fmt::format("--report {}: writing the HTML report failed (disk full?)", path));
}

}  // namespace meshsim
