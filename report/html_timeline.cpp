// The timeline of the HTML report: the per-pixel-column downsampling (layout_timeline,
// described in html_report.h) and its SVG.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "report/html_internal.h"
#include "report/html_report.h"

namespace meshsim {

namespace {

std::vector<std::string> timeline_categories(const std::vector<HtmlSpan>& spans) {
  std::vector<std::string> present;
  for (const HtmlSpan& s : spans) {
    if (std::find(present.begin(), present.end(), s.category) == present.end()) present.push_back(s.category);
  }
  std::vector<std::string> out;
  for (const std::string& k : html::known_categories()) {
    if (std::find(present.begin(), present.end(), k) != present.end()) out.push_back(k);
  }
  for (const std::string& p : present) {
    if (std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
  }
  return out;
}

// What one lane's spans of one category cover inside one column.
struct Cell {
  double cover = 0;                                        // columns (pixels)
  double first = std::numeric_limits<double>::infinity();  // first start, offset in the column
  int first_id = -1;                                       // first and last span (lane order)
  int last_id = -1;
  int count = 0;
};

// The part of a span at least a column wide that lies in one column.
struct WidePiece {
  int column;
  int span;      // lane order
  double first;  // offset in the column
  double cover;
};

// The report's spans by lane (report order), after checking each span's lane and times;
// [lo, hi] becomes their extent (including 0).
std::vector<std::vector<int>> spans_by_lane(const HtmlReport& report, double& lo, double& hi) {
  const int nlanes = static_cast<int>(report.lanes.size());
  std::vector<std::vector<int>> by_lane(nlanes);
  for (std::size_t i = 0; i < report.spans.size(); ++i) {
    const HtmlSpan& s = report.spans[i];
    if (s.lane < 0 || s.lane >= nlanes) {
      throw Error(
          fmt::format("html report: span {} ('{}') has lane {}, but there are {} lanes; add the lane name to "
                      "HtmlReport::lanes",
                      i, s.label, s.lane, nlanes));
    }
    if (!(s.end_s >= s.start_s) || !std::isfinite(s.start_s) || !std::isfinite(s.end_s)) {
      throw Error(fmt::format("html report: span {} ('{}') runs from {} s to {} s; end must be finite and >= start", i,
                              s.label, s.start_s, s.end_s));
    }
    lo = std::min(lo, s.start_s);
    hi = std::max(hi, s.end_s);
    by_lane[s.lane].push_back(static_cast<int>(i));
  }
  return by_lane;
}

// Each span's index in `categories`.
std::vector<int> category_of_spans(const HtmlReport& report, const std::vector<std::string>& categories) {
  std::vector<int> cat_of(report.spans.size());
  for (std::size_t i = 0; i < report.spans.size(); ++i) {
    cat_of[i] = static_cast<int>(std::find(categories.begin(), categories.end(), report.spans[i].category) -
                                 categories.begin());
  }
  return cat_of;
}

// One lane's rectangles: its spans binned into columns (narrow spans summed per category
// and column, wide spans cut into per-column pieces), then each column laid out.
class LaneLayout {
 public:
  LaneLayout(const HtmlReport& report, const std::vector<int>& ids, const std::vector<int>& cat_of, int lane,
             int columns, int ncat)
      : report_(report),
        ids_(ids),
        cat_of_(cat_of),
        lane_(lane),
        columns_(columns),
        ncat_(ncat),
        cells_(static_cast<std::size_t>(columns) * ncat, Cell{}),
        open_(ncat),
        open_last_(ncat, -1) {}

  // Spans at time t lie at column (t - lo) * scale.
  void bin(double lo, double scale) {
    for (int k = 0; k < static_cast<int>(ids_.size()); ++k) {
      const HtmlSpan& s = report_.spans[ids_[k]];
      const double a = std::clamp((s.start_s - lo) * scale, 0.0, static_cast<double>(columns_));
      const double b = std::clamp((s.end_s - lo) * scale, 0.0, static_cast<double>(columns_));
      if (b <= a) continue;  // zero-length spans cover nothing
      const bool is_wide = b - a >= 1;
      const int c0 = std::clamp(static_cast<int>(std::floor(a)), 0, columns_ - 1);
      const int c1 = std::clamp(static_cast<int>(std::ceil(b)) - 1, c0, columns_ - 1);
      for (int c = c0; c <= c1; ++c) {
        const double from = std::max(a, static_cast<double>(c));
        const double to = std::min(b, static_cast<double>(c + 1));
        if (to <= from) continue;
        if (is_wide) {
          wide_.push_back({c, k, from - c, to - from});
          continue;
        }
        Cell& cell = cells_[static_cast<std::size_t>(c) * ncat_ + cat_of_[ids_[k]]];
        cell.cover += to - from;
        cell.first = std::min(cell.first, from - c);
        if (cell.count == 0) cell.first_id = k;
        cell.last_id = k;
        ++cell.count;
      }
    }
    std::stable_sort(wide_.begin(), wide_.end(),
                     [](const WidePiece& x, const WidePiece& y) { return x.column < y.column; });
  }

  // Lay each column out: wide-span pieces and one piece per category of narrow spans,
  // side by side in order of first start. A wide span's pieces join into one exact
  // rectangle; touching narrow pieces of a category join too (run-length).
  std::vector<TimelineRect> rects() {
    std::vector<Part> parts;
    std::size_t w = 0;
    for (int c = 0; c < columns_; ++c) {
      parts.clear();
      const double total = column_parts(c, w, parts);
      if (parts.empty()) continue;
      std::stable_sort(parts.begin(), parts.end(), [](const Part& x, const Part& y) { return x.first < y.first; });
      const double shrink = total > 1 ? 1 / total : 1;
      double remaining = std::min(total, 1.0);
      double cursor = c;
      for (const Part& p : parts) {
        const double pw = p.cover * shrink;
        const double x = std::min(std::max(cursor, c + p.first), c + 1 - remaining);
        cursor = x + pw;
        remaining -= pw;
        if (p.span >= 0)
          place_wide(p, x, pw);
        else
          place_narrow(p, c, x, pw);
      }
      close_wide(c);
    }
    lane_rects_.insert(lane_rects_.end(), open_wide_.begin(), open_wide_.end());
    open_wide_.clear();
    for (int cat = 0; cat < ncat_; ++cat) flush(cat);
    std::stable_sort(lane_rects_.begin(), lane_rects_.end(), [](const TimelineRect& x, const TimelineRect& y) {
      return x.x0 < y.x0 || (x.x0 == y.x0 && x.category < y.category);
    });
    return std::move(lane_rects_);
  }

 private:
  struct Part {
    double first;
    double cover;
    int cat;   // narrow: category
    int span;  // wide: span (lane order); narrow: -1
  };

  // Column c's wide pieces (from wide_[w] on; w moves past them), then its narrow pieces by
  // category; returns their total cover.
  double column_parts(int c, std::size_t& w, std::vector<Part>& parts) const {
    double total = 0;
    for (; w < wide_.size() && wide_[w].column == c; ++w) {
      parts.push_back({wide_[w].first, wide_[w].cover, cat_of_[ids_[wide_[w].span]], wide_[w].span});
      total += wide_[w].cover;
    }
    for (int cat = 0; cat < ncat_; ++cat) {
      const Cell& cell = cells_[static_cast<std::size_t>(c) * ncat_ + cat];
      if (cell.count > 0 && cell.cover > 0) {
        parts.push_back({cell.first, cell.cover, cat, -1});
        total += cell.cover;
      }
    }
    return total;
  }

  void place_wide(const Part& p, double x, double pw) {
    auto it = std::find_if(open_wide_.begin(), open_wide_.end(),
                           [&](const TimelineRect& r) { return r.span == ids_[p.span] && std::abs(r.x1 - x) < 1e-9; });
    if (it != open_wide_.end()) {
      it->x1 = x + pw;
    } else {
      open_wide_.push_back(TimelineRect{lane_, p.cat, x, x + pw, 1, ids_[p.span]});
    }
  }

  void place_narrow(const Part& p, int c, double x, double pw) {
    const Cell& cell = cells_[static_cast<std::size_t>(c) * ncat_ + p.cat];
    TimelineRect& r = open_[p.cat];
    if (r.spans > 0 && std::abs(r.x1 - x) < 1e-9) {
      r.x1 = x + pw;
      r.spans += cell.count - (open_last_[p.cat] == cell.first_id ? 1 : 0);
    } else {
      flush(p.cat);
      r = TimelineRect{lane_, p.cat, x, x + pw, cell.count, -1};
    }
    r.span = r.spans == 1 ? ids_[cell.first_id] : -1;
    open_last_[p.cat] = cell.last_id;
  }

  // A wide rectangle that stops short of the column's right edge cannot continue.
  void close_wide(int c) {
    auto stop = std::stable_partition(open_wide_.begin(), open_wide_.end(),
                                      [&](const TimelineRect& r) { return r.x1 >= c + 1 - 1e-9; });
    lane_rects_.insert(lane_rects_.end(), stop, open_wide_.end());
    open_wide_.erase(stop, open_wide_.end());
  }

  void flush(int cat) {
    if (open_[cat].spans > 0) lane_rects_.push_back(open_[cat]);
    open_[cat].spans = 0;
  }

  const HtmlReport& report_;
  const std::vector<int>& ids_;     // the lane's spans by start
  const std::vector<int>& cat_of_;  // per span
  const int lane_, columns_, ncat_;
  std::vector<Cell> cells_;  // per column and category
  std::vector<WidePiece> wide_;
  std::vector<TimelineRect> lane_rects_;
  std::vector<TimelineRect> open_;       // narrow, per category; spans == 0: none
  std::vector<int> open_last_;           // last span (lane order) of the open rect
  std::vector<TimelineRect> open_wide_;  // wide, a few at a time
};

}  // namespace

TimelineLayout layout_timeline(const HtmlReport& report, int columns) {
  if (columns <= 0) throw Error(fmt::format("html report: timeline columns must be positive, got {}", columns));
  TimelineLayout layout;
  layout.columns = columns;
  layout.categories = timeline_categories(report.spans);
  const int ncat = static_cast<int>(layout.categories.size());
  const int nlanes = static_cast<int>(report.lanes.size());

  double lo = 0, hi = 0;
  std::vector<std::vector<int>> by_lane = spans_by_lane(report, lo, hi);
  if (hi <= lo) hi = lo + 1e-3;
  layout.t0_s = lo;
  layout.t1_s = hi;
  const double scale = columns / (hi - lo);
  const std::vector<int> cat_of = category_of_spans(report, layout.categories);

  for (int lane = 0; lane < nlanes; ++lane) {
    std::vector<int>& ids = by_lane[lane];
    if (ids.empty()) continue;
    std::stable_sort(ids.begin(), ids.end(),
                     [&](int a, int b) { return report.spans[a].start_s < report.spans[b].start_s; });
    LaneLayout lane_layout(report, ids, cat_of, lane, columns, ncat);
    lane_layout.bin(lo, scale);
    const std::vector<TimelineRect> lane_rects = lane_layout.rects();
    layout.rects.insert(layout.rects.end(), lane_rects.begin(), lane_rects.end());
  }
  return layout;
}

namespace html {

namespace {

// Dark text on light fills, white text on dark ones.
std::string text_color_for(const std::string& fill) {
  const auto hex = [&](int i) { return std::stoi(fill.substr(i, 2), nullptr, 16); };
  const double lum = 0.299 * hex(1) + 0.587 * hex(3) + 0.114 * hex(5);
  return lum > 150 ? "#1a1a1a" : "#ffffff";
}

constexpr double kLabelW = 170;  // lane names
constexpr double kPlotW = 1000;  // time axis
constexpr double kRightW = 40;
constexpr double kTopH = 8;
constexpr double kRowH = 18;
constexpr double kBarH = 14;
constexpr double kCharW = 6.2;  // of the 10px span labels, for deciding what fits

// Zoom and pan of every timeline on the page, the one script of the report (the page reads
// the same without it). Over the bars: the wheel zooms about the pointer (up to 1000x), a
// drag pans, a double-click shows the whole. The bars stretch by a transform of their
// group, the labels move to their bars' new centres without stretching (and show once their
// bar is wide enough for them), and the window's own time ticks replace the whole's. A link may open a window:
// report.html#zoom=0.25,0.5 shows the second quarter of the axis (fractions), as html_report_test drives it.
constexpr const char* kZoomScript = R"(<script>
(() => {
  const ns = 'http://www.w3.org/2000/svg';
  const fmt = (v) => v >= 1 ? +v.toPrecision(4) + ' s' : v >= 1e-3 ? +(v * 1e3).toPrecision(4) + ' ms'
                                                            : +(v * 1e6).toPrecision(4) + ' µs';
  const hash = /zoom=([0-9.]+),([0-9.]+)/.exec(location.hash);
  for (const svg of document.querySelectorAll('svg.timeline')) {
    const L = +svg.dataset.l, W = +svg.dataset.w, top = +svg.dataset.top, Y = +svg.dataset.axis;
    const t0 = +svg.dataset.t0, t1 = +svg.dataset.t1;
    const zoom = svg.querySelector('.zoom'), whole = svg.querySelector('.ticks'), own = svg.querySelector('.zticks');
    const labels = [...svg.querySelectorAll('.labels text')];
    let a = 0, b = W;  // the window, in unzoomed plot pixels
    const show = (na, nb) => {
      const w = Math.min(W, Math.max(W / 1000, nb - na));
      a = Math.min(Math.max(0, na), W - w);
      b = a + w;
      const k = W / w;
      zoom.setAttribute('transform', `translate(${L - (L + a) * k} 0) scale(${k} 1)`);
      for (const t of labels) {
        const c = +t.dataset.c;
        t.setAttribute('x', L + (c - a) * k);
        t.style.display = c < a || c > b || t.dataset.bw * k < +t.dataset.lw ? 'none' : '';
      }
      whole.style.display = k === 1 ? '' : 'none';
      own.textContent = '';
      if (k === 1) return;
      const s0 = t0 + (t1 - t0) * a / W, s1 = t0 + (t1 - t0) * b / W, raw = (s1 - s0) / 8;
      const p = 10 ** Math.floor(Math.log10(raw)), step = [1, 2, 5, 10].map((m) => m * p).find((v) => v >= raw);
      for (let i = Math.ceil(s0 / step); i * step <= s1; ++i) {
        const v = i * step, x = L + (v - s0) / (s1 - s0) * W;
        const line = document.createElementNS(ns, 'line');
        for (const [n, val] of [['x1', x], ['x2', x], ['y1', top], ['y2', Y + 4], ['class', 'grid']]) line.setAttribute(n, val);
        const text = document.createElementNS(ns, 'text');
        for (const [n, val] of [['x', x], ['y', Y + 16], ['text-anchor', 'middle'], ['class', 'tick']]) text.setAttribute(n, val);
        text.textContent = fmt(v);
        own.append(line, text);
      }
    };
    const plotX = (e) => {
      const r = svg.getBoundingClientRect();
      return (e.clientX - r.left) * (+svg.getAttribute('width') / r.width) - L;
    };
    svg.addEventListener('wheel', (e) => {
      const p = plotX(e);
      if (p < 0 || p > W) return;
      e.preventDefault();
      const f = e.deltaY < 0 ? 0.8 : 1.25, m = a + (b - a) * p / W;
      show(m - (m - a) * f, m + (b - m) * f);
    }, {passive: false});
    let drag = null;
    svg.addEventListener('mousedown', (e) => { drag = {x: plotX(e), a, b}; });
    window.addEventListener('mouseup', () => { drag = null; });
    svg.addEventListener('mousemove', (e) => {
      if (!drag) return;
      const shift = (plotX(e) - drag.x) * (drag.b - drag.a) / W;
      show(drag.a - shift, drag.b - shift);
    });
    svg.addEventListener('dblclick', () => show(0, W));
    if (hash) show(+hash[1] * W, +hash[2] * W);
  }
})();
</script>
)";

// Each category's fill: its own colour if known, else the next fallback colour.
std::vector<std::string> category_fills(const TimelineLayout& layout) {
  const int ncat = static_cast<int>(layout.categories.size());
  std::vector<std::string> fills(ncat);
  int fallback = 0;
  for (int i = 0; i < ncat; ++i) {
    const bool known = std::find(known_categories().begin(), known_categories().end(), layout.categories[i]) !=
                       known_categories().end();
    fills[i] = category_color(layout.categories[i], known ? 0 : fallback++);
  }
  return fills;
}

// Lane stripes and names.
std::string lane_rows(const HtmlReport& report) {
  std::string s;
  const int nlanes = static_cast<int>(report.lanes.size());
  for (int l = 0; l < nlanes; ++l) {
    const double y = kTopH + l * kRowH;
    if (l % 2 == 0) {
      s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"#f3f4f6\"/>\n", num(kLabelW, 0),
                       num(y, 0), num(kPlotW, 0), num(kRowH, 0));
    }
    s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\" class=\"lane\">{}</text>\n", num(kLabelW - 8, 0),
                     num(y + kRowH / 2 + 4, 0), html_escape(report.lanes[l]));
  }
  return s;
}

// Grid lines and tick labels.
std::string time_axis(const TimelineLayout& layout, double axis_y) {
  std::string s = "<g class=\"ticks\">\n";
  const std::vector<AxisTick> ticks = time_ticks(layout.t0_s, layout.t1_s, 10);
  for (const AxisTick& t : ticks) {
    const double x = kLabelW + (t.value - layout.t0_s) / (layout.t1_s - layout.t0_s) * kPlotW;
    if (x < kLabelW - 0.01 || x > kLabelW + kPlotW + 0.01) continue;
    s += fmt::format(
        "<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" class=\"grid\"/>"
        "<text x=\"{0}\" y=\"{3}\" text-anchor=\"middle\" class=\"tick\">{4}</text>\n",
        num(x, 1), num(kTopH, 0), num(axis_y + 4, 0), num(axis_y + 16, 0), html_escape(t.label));
  }
  s += "</g>\n<g class=\"zticks\"></g>\n";  // the zoomed window's ticks (kZoomScript)
  s += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" class=\"axis\"/>\n", num(kLabelW, 0),
                   num(axis_y, 0), num(kLabelW + kPlotW, 0));
  s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" class=\"axis-title\">time</text>\n",
                   num(kLabelW + kPlotW / 2, 0), num(axis_y + 32, 0));
  return s;
}

// Spans: single-span rectangles at least a pixel wide get their own element, tooltip
// and label; everything else goes into one path per lane and category.
// The labels go to `labels`, apart from the shapes, so that a zoom can stretch the shapes
// and move the labels without stretching their text (each label keeps its centre in
// unzoomed plot pixels, data-c).
std::string span_shapes(const HtmlReport& report, const TimelineLayout& layout, const std::vector<std::string>& fills,
                        std::string& labels) {
  std::string s;
  const int ncat = static_cast<int>(layout.categories.size());
  const int nlanes = static_cast<int>(report.lanes.size());
  const double px = kPlotW / layout.columns;
  std::vector<std::string> paths(static_cast<std::size_t>(nlanes) * ncat);
  std::vector<int> path_spans(paths.size(), 0);
  std::vector<double> path_time(paths.size(), 0);
  const double spc = layout.seconds_per_column();
  for (const TimelineRect& r : layout.rects) {
    const double x = kLabelW + r.x0 * px;
    const double w = (r.x1 - r.x0) * px;
    const double y = kTopH + r.lane * kRowH + (kRowH - kBarH) / 2;
    if (r.spans == 1 && w >= 1) {
      const HtmlSpan& sp = report.spans[r.span];
      s += fmt::format(
          "<rect class=\"k{}{}\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"><title>{} · {} · {} to {} "
          "({})</title></rect>\n",
          r.category, w >= 4 ? " s" : "", num(x, 2), num(y, 0), num(w, 2), num(kBarH, 0), html_escape(sp.label),
          html_escape(sp.category), format_seconds(sp.start_s), format_seconds(sp.end_s),
          format_seconds(sp.end_s - sp.start_s));
      if (!sp.label.empty()) {  // hidden until a zoom makes its bar wide enough (data-bw x zoom >= data-lw)
        const double need = sp.label.size() * kCharW + 4;
        labels += fmt::format(
            "<text x=\"{}\" y=\"{}\" data-c=\"{}\" data-bw=\"{}\" data-lw=\"{}\" text-anchor=\"middle\" "
            "class=\"sl\" style=\"fill:{}{}\">{}</text>\n",
            num(x + w / 2, 2), num(y + kBarH - 3.5, 1), num(x + w / 2 - kLabelW, 2), num(w, 2), num(need, 1),
            text_color_for(fills[r.category]), w >= need ? "" : ";display:none", html_escape(sp.label));
      }
    } else {
      const std::size_t k = static_cast<std::size_t>(r.lane) * ncat + r.category;
      paths[k] += fmt::format("M{} {}h{}v{}h-{}z", num(x, 2), num(y, 0), num(w, 3), num(kBarH, 0), num(w, 3));
      path_spans[k] += r.spans;
      path_time[k] += (r.x1 - r.x0) * spc;
    }
  }
  for (int l = 0; l < nlanes; ++l) {
    for (int c = 0; c < ncat; ++c) {
      const std::size_t k = static_cast<std::size_t>(l) * ncat + c;
      if (paths[k].empty()) continue;
      s += fmt::format("<path class=\"k{}\" d=\"{}\"><title>{} · {}: {} spans merged, {} covered</title></path>\n", c,
                       paths[k], html_escape(report.lanes[l]), html_escape(layout.categories[c]), path_spans[k],
                       format_seconds(path_time[k]));
    }
  }
  return s;
}

// Legend.
std::string legend(const TimelineLayout& layout, double legend_y) {
  std::string s;
  double lx = kLabelW;
  for (std::size_t i = 0; i < layout.categories.size(); ++i) {
    s += fmt::format(
        "<rect class=\"k{}\" x=\"{}\" y=\"{}\" width=\"12\" height=\"12\"/>"
        "<text x=\"{}\" y=\"{}\" class=\"legend\">{}</text>\n",
        i, num(lx, 0), num(legend_y, 0), num(lx + 16, 0), num(legend_y + 10, 0), html_escape(layout.categories[i]));
    lx += 16 + layout.categories[i].size() * 7.0 + 18;
  }
  return s;
}

// The timeline's SVG: lanes, spans, the time axis and the legend.
// `index`: the page's n-th timeline (its clip path's id).
std::string timeline_svg(const HtmlReport& report, int index) {
  const TimelineLayout layout = layout_timeline(report);
  const int nlanes = static_cast<int>(report.lanes.size());
  const double rows_h = nlanes * kRowH;
  const double axis_y = kTopH + rows_h;
  const double legend_y = axis_y + 40;
  const double height = legend_y + 24;
  const double width = kLabelW + kPlotW + kRightW;
  const std::vector<std::string> fills = category_fills(layout);

  // data-*: the plot's geometry and time range, for kZoomScript.
  std::string s = fmt::format(
      "<svg class=\"chart timeline\" viewBox=\"0 0 {0} {1}\" width=\"{0}\" height=\"{1}\" "
      "data-l=\"{2}\" data-w=\"{3}\" data-top=\"{8}\" data-axis=\"{4}\" data-t0=\"{5}\" data-t1=\"{6}\" "
      "xmlns=\"http://www.w3.org/2000/svg\">\n"
      "<clipPath id=\"tl{7}\"><rect x=\"{2}\" y=\"0\" width=\"{3}\" height=\"{4}\"/></clipPath>\n",
      num(width, 0), num(height, 0), num(kLabelW, 0), num(kPlotW, 0), num(axis_y, 0), layout.t0_s, layout.t1_s, index,
      num(kTopH, 0));
  s += "<style>";
  for (std::size_t i = 0; i < fills.size(); ++i) s += fmt::format(".k{}{{fill:{}}}", i, fills[i]);
  // non-scaling-stroke: a zoom stretches the bars, not their 0.6 px outline.
  s += "rect.s{stroke:#fff;stroke-width:0.6;vector-effect:non-scaling-stroke}</style>\n";
  s += lane_rows(report);
  s += time_axis(layout, axis_y);
  std::string labels;
  s += fmt::format("<g clip-path=\"url(#tl{})\"><g class=\"zoom\">\n", index);
  s += span_shapes(report, layout, fills, labels);
  s += "</g>\n<g class=\"labels\">\n" + labels + "</g></g>\n";
  s += legend(layout, legend_y);
  s += "</svg>\n";
  return s;
}

// The spans inside [from, to), cut to it and moved to start at 0.
HtmlReport window_of(const HtmlReport& report, double from, double to) {
  HtmlReport w;
  w.lanes = report.lanes;
  for (const HtmlSpan& s : report.spans) {
    if (s.end_s <= from || s.start_s >= to) continue;
    HtmlSpan cut = s;
    cut.start_s = std::max(s.start_s, from) - from;
    cut.end_s = std::min(s.end_s, to) - from;
    w.spans.push_back(std::move(cut));
  }
  return w;
}

}  // namespace

std::string timeline_section(const HtmlReport& report) {
  if (report.lanes.empty() || report.spans.empty()) return "";
  const TimelineLayout layout = layout_timeline(report);
  std::string s = "<section id=\"timeline\">\n<h2>Timeline</h2>\n";
  s += fmt::format(
      "<p class=\"note\">{} spans on {} lanes, {} to {}. Spans narrower than a pixel are merged per "
      "lane into rectangles whose widths keep each category's covered time; hover for details. Zoom with "
      "the mouse wheel over the bars, drag to pan, double-click to see it whole.</p>\n",
      report.spans.size(), report.lanes.size(), format_seconds(layout.t0_s), format_seconds(layout.t1_s));
  s += timeline_svg(report, 0);
  if (report.detail_window && report.detail_window->second > report.detail_window->first) {
    const auto [from, to] = *report.detail_window;
    const HtmlReport window = window_of(report, from, to);
    if (!window.spans.empty()) {
      s += fmt::format(
          "<h3>One period of the steady state</h3>\n<p class=\"note\">{} to {} of the timeline above (times "
          "below from its start), drawn at full width: from the first stage's middle micro-batch forward to "
          "the next.</p>\n",
          format_seconds(from), format_seconds(to));
      s += timeline_svg(window, 1);
    }
  }
  s += kZoomScript;
  s += "</section>\n";
  return s;
}

}  // namespace html
}  // namespace meshsim
