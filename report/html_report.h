// One self-contained HTML page for a simulated training step or a sweep:
// `meshsim simulate --report out.html` and `meshsim sweep --report out.html`.
//
// The renderer takes only plain data (below), never a Schedule or a Trace, so it can
// be fed by the simulator, a real backend or a test. The page has inline CSS, inline SVG
// and one inline script, the timeline's zoom (no font or network access; hover tooltips
// are SVG <title> elements; without the script the page reads the same, unzoomed) and
// these sections, each omitted when its data is empty:
//
//   header    title + summary table (iteration time, MFU, ...)     <section id="summary">
//   timeline  one row per lane, colored spans, time axis, legend   <section id="timeline">
//   breakdown stacked bar + one bar per category, seconds and %    <section id="breakdown">
//   memory    one stacked bar per role, capacity line, peak mark   <section id="memory">
//   links     link load by tier: utilization bar, peak, load line  <section id="links">
//   scaling   time vs x, one line per series (log x past 8x)       <section id="scaling">
//   table     the optional ranked table                            <section id="table">
//
// Scale: a schedule can have hundreds of thousands of spans, more than there are pixels.
// The timeline divides the time axis into kTimelineColumns pixel columns. A span at
// least one column wide is drawn exactly, as its own rectangle with tooltip and label.
// Narrower spans are aggregated: per lane, every column accumulates the time each
// category's narrow spans cover there; the column's pieces (wide-span parts and one
// piece per category) are laid side by side in order of their first start, each as
// wide as the time it covers, and touching narrow pieces of a category in neighbouring
// columns merge (run-length). So the drawn width of every category still adds up to its
// covered time (within rounding, far less than a pixel) instead of the majority color
// taking the column. Spans that overlap inside one lane are squeezed to fit their
// column. Aggregated pieces are written as one SVG path per lane and category, so the
// page size is bounded by lanes x columns x categories, not by the span count (300k
// spans on 16 lanes, 6 categories: about 2.5 MB; the test holds it under 5 MB).
//
// Output is deterministic: same input, same bytes (fixed number formatting, no clock).
//
//   HtmlReport r;
//   r.title = "gpt-7b on 64 x H100: tp8 pp4 dp2";
//   r.summary = {{"iteration time", "1.234 s"}, {"MFU", "41.2 %"}};
//   r.lanes = {"stage 0 · compute", "stage 0 · comm"};
//   r.spans.push_back({0, 0.000, 0.002, "F0", "compute"});
//   write_html_report(r, "out.html");     // throws meshsim::Error naming the path
#pragma once

#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/units.h"

namespace meshsim {

// A busy interval on one timeline row. category picks the color; known ones:
// compute, recompute, tp, sp, cp, ep, pp, dp, optimizer, bubble, other (others get a
// color from a fallback palette, in order of first appearance).
struct HtmlSpan {
  int lane = 0;  // index into HtmlReport::lanes
  double start_s = 0;
  double end_s = 0;
  std::string label;  // shown inside the bar when it fits, and as its tooltip
  std::string category;
};

// Memory of one role (e.g. "stage 0", "dp rank"): items stacked left to right.
struct HtmlMemoryBar {
  std::string role;
  std::vector<std::pair<std::string, double>> items_bytes;  // "parameters" -> bytes, ...
  double capacity_bytes = 0;                                // device memory; drawn as a dashed line (0 = none)
  double peak_bytes = 0;                                    // drawn as a marker; red when above capacity
};

// One point of a scaling plot. Points that do not fit in memory are drawn as crosses
// and are not joined by the series line.
struct HtmlSweepPoint {
  std::string series;  // one line per series, in order of first appearance
  double x = 0;        // e.g. GPU count
  double y = 0;        // the plotted value, in HtmlReport::sweep_y_unit (time per iteration: s)
  std::string label;   // tooltip, e.g. "tp8 pp4 dp2"
  bool fits = true;
};

// One link in the link-load section: its tier, carried bytes, utilization over the run,
// peak load (< 0: not known) and, optionally, its load over time as (fraction of the run,
// fraction of its rate) at every change, drawn as a step line.
struct HtmlLinkLoad {
  std::string tier;
  std::string name;
  double bytes = 0;
  double utilization = 0;
  double peak = -1;
  std::vector<std::pair<double, double>> load;
};

struct HtmlReport {
  std::string title;
  std::vector<std::pair<std::string, std::string>> summary;  // key/value rows
  std::vector<std::string> lanes;                            // timeline rows
  // A window [from, to) (seconds) drawn again below the timeline at full width: one period of
  // a pipeline's steady state, where the whole iteration squeezes it into a few columns.
  std::optional<std::pair<double, double>> detail_window;
  std::vector<HtmlSpan> spans;
  std::vector<std::pair<std::string, double>> breakdown;  // category -> seconds
  std::vector<HtmlMemoryBar> memory;
  std::vector<HtmlLinkLoad> links;  // empty = no link-load section
  std::string cluster_svg;  // the cluster coloured by link load (topology_svg.h), drawn in the link-load section
  // Time lost to link sharing per collective category: (category, ops slowed, time lost).
  std::vector<std::tuple<std::string, int, Time>> sharing_delay;
  std::string sweep_x_label;  // e.g. "GPUs"
  std::string sweep_y_label = "time per iteration";
  std::string sweep_y_unit = "s";               // "s": time ticks (µs, ms, s); else appended to plain numbers
  std::vector<HtmlSweepPoint> sweep;            // empty = no plot
  std::vector<std::vector<std::string>> table;  // first row = header
};

std::string render_html_report(const HtmlReport& report);

// Writes render_html_report(report) to path; throws meshsim::Error naming the path.
void write_html_report(const HtmlReport& report, const std::string& path);

// Text made safe for HTML content and attribute values (& < > " ').
std::string html_escape(const std::string& text);

// --- The timeline layout, exposed for tests and for other renderers ---------------

inline constexpr int kTimelineColumns = 1000;  // pixel columns of the time axis

// One drawn rectangle of a lane, in pixel columns [x0, x1) of the time axis.
struct TimelineRect {
  int lane = 0;
  int category = 0;  // index into TimelineLayout::categories
  double x0 = 0;
  double x1 = 0;
  int spans = 0;  // how many spans it stands for (1: drawn with that span's label)
  int span = -1;  // index into HtmlReport::spans when spans == 1
};

struct TimelineLayout {
  double t0_s = 0;  // time at column 0
  double t1_s = 0;  // time at column `columns`
  int columns = kTimelineColumns;
  std::vector<std::string> categories;  // known ones first in canonical order, then others
  std::vector<TimelineRect> rects;      // by lane, then left to right
  double seconds_per_column() const { return (t1_s - t0_s) / columns; }
};

// The downsampled timeline described above. Spans with an out-of-range lane or
// end < start throw meshsim::Error naming the span.
TimelineLayout layout_timeline(const HtmlReport& report, int columns = kTimelineColumns);

}  // namespace meshsim
