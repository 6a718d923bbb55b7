#include "report/html_report.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include "core/error.h"

namespace meshsim {
namespace {

// A realistic page: a 4-stage pipeline running 1F1B over 8 microbatches (a compute and
// a comm lane per stage), its breakdown, memory per stage (stage 0 over capacity) and a
// sweep with two series.
HtmlReport example_report() {
  constexpr int S = 4, M = 8;
  constexpr double f = 2.0e-3, b = 4.0e-3, p2p = 0.25e-3, tp = 0.3e-3;
  HtmlReport r;
  r.title = "llama-13b on 32 x H100 (dgx-h100 x4): tp8 pp4, 1F1B, 8 microbatches";
  for (int s = 0; s < S; ++s) {
    r.lanes.push_back(fmt::format("stage {} · compute", s));
    r.lanes.push_back(fmt::format("stage {} · comm", s));
  }
  // Per stage: warmup forwards, then one forward / one backward, then the backwards.
  std::vector<std::vector<std::pair<char, int>>> order(S);
  for (int s = 0; s < S; ++s) {
    const int warm = std::min(S - s - 1, M);
    int nf = 0, nb = 0;
    for (; nf < warm; ++nf) order[s].push_back({'F', nf});
    while (nf < M) {
      order[s].push_back({'F', nf++});
      order[s].push_back({'B', nb++});
    }
    while (nb < M) order[s].push_back({'B', nb++});
  }
  std::vector<std::vector<double>> fdone(S, std::vector<double>(M, -1)), bdone = fdone;
  std::vector<std::size_t> next(S, 0);
  std::vector<double> free_at(S, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < S; ++s) {
      while (next[s] < order[s].size()) {
        const auto [kind, m] = order[s][next[s]];
        double ready = 0;
        if (kind == 'F' && s > 0) ready = fdone[s - 1][m] < 0 ? -1 : fdone[s - 1][m] + p2p;
        if (kind == 'B' && s < S - 1) ready = bdone[s + 1][m] < 0 ? -1 : bdone[s + 1][m] + p2p;
        if (ready < 0) break;
        const double start = std::max(ready, free_at[s]);
        const double dur = kind == 'F' ? f : b;
        if (start > free_at[s] + 1e-12) {
          r.spans.push_back({2 * s, free_at[s], start, "bubble", "bubble"});
        }
        r.spans.push_back({2 * s, start, start + dur, fmt::format("{}{}", kind, m), "compute"});
        for (double at : {0.3, 0.75}) {
          r.spans.push_back({2 * s + 1, start + at * dur, start + at * dur + tp, "all-reduce", "tp"});
        }
        const bool sends = kind == 'F' ? s < S - 1 : s > 0;
        if (sends)
          r.spans.push_back({2 * s + 1, start + dur, start + dur + p2p, fmt::format("send {}{}", kind, m), "pp"});
        (kind == 'F' ? fdone : bdone)[s][m] = start + dur;
        free_at[s] = start + dur;
        ++next[s];
        progress = true;
      }
    }
  }
  double end = 0;
  for (int s = 0; s < S; ++s) end = std::max(end, free_at[s]);
  for (int s = 0; s < S; ++s) {
    r.spans.push_back({2 * s + 1, free_at[s], free_at[s] + 5e-3, "dp all-reduce grads", "dp"});
    r.spans.push_back({2 * s, free_at[s] + 5e-3, free_at[s] + 6.5e-3, "adam", "optimizer"});
  }
  const double iter = end + 6.5e-3;
  r.summary = {{"iteration time", fmt::format("{:.2f} ms", iter * 1e3)},
               {"MFU", "43.7 %"},
               {"model", "llama-13b, seq 4096, global batch 256"},
               {"parallelism", "tp8 pp4 dp1, 1F1B, 8 microbatches"},
               {"bubble fraction", fmt::format("{:.1f} %", 100.0 * (S - 1) / (M + S - 1))},
               {"peak memory", "84.20 GiB on stage 0 (capacity 80.00 GiB)"}};
  // Stage 0 (last to finish) seen from its compute stream; the parts add up to the step.
  double idle0 = end - free_at[0];
  for (const HtmlSpan& sp : r.spans) {
    if (sp.lane == 0 && sp.category == "bubble") idle0 += sp.end_s - sp.start_s;
  }
  const double tp_exposed = 4 * M * tp * 0.4, pp_exposed = 2 * (S - 1) * p2p;
  r.breakdown = {
      {"compute", M * (f + b) - tp_exposed},   {"exposed tp comm", tp_exposed}, {"exposed pp comm", pp_exposed},
      {"pipeline bubble", idle0 - pp_exposed}, {"exposed dp comm", 5e-3},       {"optimizer", 1.5e-3}};
  const double gib = 1024.0 * 1024.0 * 1024.0;
  for (int s = 0; s < S; ++s) {
    HtmlMemoryBar m;
    m.role = fmt::format("stage {}", s);
    m.items_bytes = {{"parameters", 3.2 * gib},
                     {"gradients", 3.2 * gib},
                     {"optimizer states", 12.8 * gib},
                     {"activations", (S - s) * 15.0 * gib},
                     {"workspace", 2.0 * gib}};
    m.capacity_bytes = 80 * gib;
    m.peak_bytes = (21.2 + (S - s) * 15.0 + 3.0) * gib;
    r.memory.push_back(m);
  }
  r.sweep_x_label = "GPUs";
  for (int x = 8; x <= 512; x *= 2) {
    const double l = std::log2(x / 8.0);
    r.sweep.push_back(
        {"tp8 + pp", static_cast<double>(x), 10.0 * 8 / x * (1 + 0.03 * l), fmt::format("tp8 pp{}", x / 8), true});
    r.sweep.push_back(
        {"tp4 + dp", static_cast<double>(x), 9.0 * 8 / x * (1 + 0.09 * l), fmt::format("tp4 dp{}", x / 4), x >= 32});
  }
  r.table = {{"rank", "layout", "GPUs", "iteration time", "MFU", "fits"},
             {"1", "tp8 pp4 dp1", "32", fmt::format("{:.2f} ms", iter * 1e3), "43.7 %", "no"},
             {"2", "tp8 pp2 dp2", "32", "81.40 ms", "41.0 %", "yes"},
             {"3", "tp4 pp4 dp2", "32", "88.02 ms", "37.9 %", "yes"}};
  return r;
}

std::size_t count(const std::string& hay, const std::string& needle) {
  std::size_t n = 0;
  for (std::size_t at = hay.find(needle); at != std::string::npos; at = hay.find(needle, at + 1)) ++n;
  return n;
}

std::filesystem::path temp_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / fmt::format("meshsim-{}-{}", name, ::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::string read_all(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(HtmlReport, EscapesAllText) {
  EXPECT_EQ(html_escape("<a href='x'>\"Q&A\"</a>"), "&lt;a href=&#39;x&#39;&gt;&quot;Q&amp;A&quot;&lt;/a&gt;");
  HtmlReport r = example_report();
  const std::string evil = "<script>alert('x')</script>&";
  r.title = evil;
  r.summary.push_back({evil, evil});
  r.lanes[0] = evil;
  r.spans[0].label = evil;
  r.spans[0].category = evil;
  r.breakdown.push_back({evil, 1e-3});
  r.memory[0].role = evil;
  r.memory[0].items_bytes.push_back({evil, 1e9});
  r.sweep_x_label = evil;
  r.sweep[0].series = evil;
  r.sweep[0].label = evil;
  r.table.push_back({evil, evil});
  const std::string html = render_html_report(r);
  EXPECT_EQ(count(html, "<script"), 1u);  // the timeline's zoom, and nothing a label brought in
  EXPECT_EQ(html.find("alert('x')"), std::string::npos);
  EXPECT_GT(count(html, "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;"), 10u);
}

TEST(HtmlReport, EverySectionPresent) {
  const std::string html = render_html_report(example_report());
  for (const char* id : {"summary", "timeline", "breakdown", "memory", "scaling", "table"}) {
    EXPECT_EQ(count(html, fmt::format("<section id=\"{}\">", id)), 1u) << id;
  }
  EXPECT_NE(html.find("<h1>llama-13b on 32 x H100"), std::string::npos);
  EXPECT_NE(html.find("ms</text>"), std::string::npos);   // time ticks in ms
  EXPECT_NE(html.find(">F0</text>"), std::string::npos);  // span labels drawn inside bars
  EXPECT_NE(html.find("over by"), std::string::npos);     // stage 0 exceeds its capacity
  EXPECT_NE(html.find("class=\"capacity\""), std::string::npos);
  EXPECT_NE(html.find("GPUs (log scale)"), std::string::npos);  // 8..512 spans more than 8x
  EXPECT_NE(html.find("does not fit in memory"), std::string::npos);
  EXPECT_EQ(count(html, "<script"), 1u);                                     // the timeline's zoom only
  EXPECT_EQ(html.find("http://"), html.find("http://www.w3.org/2000/svg"));  // no external resources
  EXPECT_EQ(html.find("https://"), std::string::npos);

  // Without data, only the header.
  HtmlReport bare;
  bare.title = "empty";
  const std::string b = render_html_report(bare);
  EXPECT_NE(b.find("<section id=\"summary\">"), std::string::npos);
  for (const char* id : {"timeline", "breakdown", "memory", "scaling", "table"}) {
    EXPECT_EQ(b.find(fmt::format("<section id=\"{}\">", id)), std::string::npos) << id;
  }
}

TEST(HtmlReport, SweepWithinEightTimesIsLinear) {
  HtmlReport r;
  r.sweep_x_label = "microbatches";
  for (int x = 1; x <= 8; ++x) r.sweep.push_back({"a", static_cast<double>(x), 1.0 / x, "", true});
  const std::string html = render_html_report(r);
  EXPECT_NE(html.find("<section id=\"scaling\">"), std::string::npos);
  EXPECT_EQ(html.find("log scale"), std::string::npos);
}

// A sweep plotted by another metric than time (sweep --rank-by): its axis title, and ticks and
// tooltips as plain numbers with its unit, not as times.
TEST(HtmlReport, SweepOfAnotherMetricLabelsItsAxisWithItsUnit) {
  HtmlReport r;
  r.sweep_x_label = "parallel.tp";
  r.sweep_y_label = "MFU";
  r.sweep_y_unit = "%";
  for (int x = 1; x <= 4; ++x)
    r.sweep.push_back({"a", static_cast<double>(x), 10.0 * x, "tp" + std::to_string(x), true});
  const std::string html = render_html_report(r);
  EXPECT_NE(html.find(">MFU</text>"), std::string::npos);
  EXPECT_NE(html.find(">40%</text>"), std::string::npos) << "a tick at 40%";
  EXPECT_NE(html.find("parallel.tp = 4, 40%"), std::string::npos) << "the tooltip in %";
  EXPECT_EQ(html.find("time per iteration"), std::string::npos);
  EXPECT_EQ(html.find(" ms<"), std::string::npos);
}

TEST(HtmlReport, WideSpanIsOneExactRectangle) {
  HtmlReport r;
  r.lanes = {"only"};
  r.spans = {{0, 0.0, 0.25, "a", "compute"}, {0, 0.25, 1.0, "b", "tp"}};
  const TimelineLayout l = layout_timeline(r, 1000);
  ASSERT_EQ(l.rects.size(), 2u);
  EXPECT_EQ(l.categories, (std::vector<std::string>{"compute", "tp"}));
  EXPECT_NEAR(l.rects[0].x0, 0, 1e-9);
  EXPECT_NEAR(l.rects[0].x1, 250, 1e-9);
  EXPECT_EQ(l.rects[0].span, 0);
  EXPECT_NEAR(l.rects[1].x0, 250, 1e-9);
  EXPECT_NEAR(l.rects[1].x1, 1000, 1e-9);
  EXPECT_EQ(l.rects[1].span, 1);
  EXPECT_EQ(l.rects[1].spans, 1);
}

TEST(HtmlReport, BadSpansAreUserErrors) {
  HtmlReport r;
  r.lanes = {"only"};
  r.spans = {{1, 0.0, 1.0, "x", "compute"}};
  EXPECT_THROW(layout_timeline(r), Error);
  r.spans = {{0, 1.0, 0.5, "x", "compute"}};
  EXPECT_THROW(layout_timeline(r), Error);
}

// 300k spans on 16 lanes, widths from sub-pixel to a few pixels, categories mixed.
HtmlReport many_spans() {
  HtmlReport r;
  constexpr int lanes = 16, per_lane = 300000 / lanes;
  const char* cats[] = {"compute", "tp", "compute", "pp", "compute", "bubble", "recompute", "dp"};
  std::uint64_t seed = 42;
  auto rnd = [&] {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<double>(seed >> 11) / 9007199254740992.0;
  };
  for (int l = 0; l < lanes; ++l) {
    r.lanes.push_back(fmt::format("rank {}", l));
    double t = 0;
    for (int i = 0; i < per_lane; ++i) {
      t += rnd() < 0.3 ? rnd() * 2e-6 : 0;  // some gaps
      const double d = rnd() < 0.02 ? 2e-4 * rnd() : 1e-5 * rnd();
      r.spans.push_back({l, t, t + d, fmt::format("op{}", i), cats[static_cast<int>(rnd() * 8)]});
      t += d;
    }
  }
  return r;
}

TEST(HtmlReport, DownsamplingBoundsSizeAndKeepsTimePerCategory) {
  const HtmlReport r = many_spans();
  const std::string html = render_html_report(r);
  EXPECT_LT(html.size(), 5u * 1000 * 1000) << "300k spans must not make a multi-megabyte page";
  std::cout << "300k spans: " << html.size() << " bytes\n";

  const TimelineLayout l = layout_timeline(r);
  const double spc = l.seconds_per_column();
  std::map<std::pair<int, std::string>, double> truth, drawn;
  for (const HtmlSpan& s : r.spans) truth[{s.lane, s.category}] += s.end_s - s.start_s;
  for (const TimelineRect& x : l.rects) {
    EXPECT_LE(x.x0, x.x1);
    drawn[{x.lane, l.categories[x.category]}] += (x.x1 - x.x0) * spc;
  }
  ASSERT_EQ(truth.size(), drawn.size());
  for (const auto& [key, t] : truth) {
    EXPECT_NEAR(drawn[key], t, spc) << "lane " << key.first << " category " << key.second;
  }
  // Pieces of one lane never overlap: within a column they sit side by side.
  for (std::size_t i = 1; i < l.rects.size(); ++i) {
    if (l.rects[i].lane == l.rects[i - 1].lane) {
      EXPECT_GE(l.rects[i].x0, l.rects[i - 1].x1 - 1e-6);
    }
  }
}

TEST(HtmlReport, Deterministic) {
  const HtmlReport r = example_report();
  const std::string a = render_html_report(r);
  const HtmlReport copy = r;
  EXPECT_EQ(a, render_html_report(copy));
  const auto dir = temp_dir("det");
  write_html_report(r, (dir / "a.html").string());
  write_html_report(r, (dir / "b.html").string());
  EXPECT_EQ(read_all(dir / "a.html"), a);
  EXPECT_EQ(read_all(dir / "b.html"), a);
  std::filesystem::remove_all(dir);
}

TEST(HtmlReport, WriteFailureNamesThePath) {
  const std::string path = "/nonexistent-meshsim-dir/report.html";
  try {
    write_html_report(example_report(), path);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

// The page as a real browser renders it. Set MESHSIM_REPORT_DIR to keep the files
// (docs/img/report-example.png is such a screenshot).
TEST(HtmlReport, HeadlessChromiumRendersIt) {
  if (!std::filesystem::exists("/usr/bin/chromium")) {
    GTEST_SKIP() << "chromium not found at /usr/bin/chromium; install the 'chromium' Debian package "
                    "(tools/install-deps.sh does) to check the report in a real browser";
  }
  const char* keep = std::getenv("MESHSIM_REPORT_DIR");
  const std::filesystem::path dir = keep ? std::filesystem::path(keep) : temp_dir("chromium");
  std::filesystem::create_directories(dir);
  const auto page = std::filesystem::absolute(dir / "report.html");
  const auto png = std::filesystem::absolute(dir / "report.png");
  const auto dom = dir / "dom.html";
  std::filesystem::remove(png);
  write_html_report(example_report(), page.string());

  const std::string flags = fmt::format("--headless --no-sandbox --disable-gpu --user-data-dir={} --no-first-run",
                                        (dir / "profile").string());
  const std::string dump = fmt::format("timeout 60 /usr/bin/chromium {} --dump-dom file://{} > {} 2> {}", flags,
                                       page.string(), dom.string(), (dir / "dump.log").string());
  ASSERT_EQ(std::system(dump.c_str()), 0) << dump << "\n" << read_all(dir / "dump.log");
  const std::string d = read_all(dom);
  for (const char* id : {"summary", "timeline", "breakdown", "memory", "scaling", "table"}) {
    EXPECT_NE(d.find(fmt::format("<section id=\"{}\">", id)), std::string::npos) << id;
  }
  EXPECT_GE(count(d, "<svg"), 4u);
  EXPECT_NE(d.find("stage 3 · comm"), std::string::npos);

  const std::string shot = fmt::format(
      "timeout 60 /usr/bin/chromium {} --hide-scrollbars --screenshot={} "
      "--window-size=1400,2000 file://{} > {} 2>&1",
      flags, png.string(), page.string(), (dir / "shot.log").string());
  ASSERT_EQ(std::system(shot.c_str()), 0) << shot << "\n" << read_all(dir / "shot.log");
  const std::string p = read_all(png);
  ASSERT_GT(p.size(), 30u * 1024) << "screenshot suspiciously small";
  ASSERT_EQ(p.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  auto be32 = [&](std::size_t at) {
    return (static_cast<std::uint32_t>(static_cast<unsigned char>(p[at])) << 24) |
           (static_cast<std::uint32_t>(static_cast<unsigned char>(p[at + 1])) << 16) |
           (static_cast<std::uint32_t>(static_cast<unsigned char>(p[at + 2])) << 8) |
           static_cast<std::uint32_t>(static_cast<unsigned char>(p[at + 3]));
  };
  ASSERT_EQ(p.substr(12, 4), "IHDR");
  EXPECT_EQ(be32(16), 1400u);  // width
  EXPECT_EQ(be32(20), 2000u);  // height
  if (!keep) std::filesystem::remove_all(dir);
}

// The timeline's zoom, run by a real browser: #zoom=0.25,0.5 opens the second quarter of the
// axis, so the bars' group is stretched 4x about it, translate(L - (L + W/4) x 4) with
// L = 170 and W = 1000 plot pixels, each label moves to L + (c - 250) x 4 (c: its centre in
// plot pixels) or hides outside the window, and the window's own ticks replace the whole's.
TEST(HtmlReport, HeadlessChromiumZoomsTheTimeline) {
  if (!std::filesystem::exists("/usr/bin/chromium")) {
    GTEST_SKIP() << "chromium not found at /usr/bin/chromium; install the 'chromium' Debian package "
                    "(tools/install-deps.sh does) to check the report in a real browser";
  }
  const std::filesystem::path dir = temp_dir("zoom");
  std::filesystem::create_directories(dir);
  const auto page = std::filesystem::absolute(dir / "report.html");
  const HtmlReport r = example_report();
  write_html_report(r, page.string());
  const std::string html = read_all(page);
  const std::string dump = fmt::format(
      "timeout 60 /usr/bin/chromium --headless --no-sandbox --disable-gpu --user-data-dir={} --no-first-run "
      "--dump-dom 'file://{}#zoom=0.25,0.5' > {} 2> {}",
      (dir / "profile").string(), page.string(), (dir / "dom.html").string(), (dir / "dump.log").string());
  ASSERT_EQ(std::system(dump.c_str()), 0) << dump << "\n" << read_all(dir / "dump.log");
  const std::string d = read_all(dir / "dom.html");
  EXPECT_NE(html.find("<g class=\"zoom\">"), std::string::npos);  // unzoomed as written
  EXPECT_NE(d.find("class=\"zoom\" transform=\"translate(-1510 0) scale(4 1)\""), std::string::npos);
  // A label: its centre c as written, and where the browser put it.
  const std::size_t at = d.find("data-c=\"");
  ASSERT_NE(at, std::string::npos);
  const double c = std::stod(d.substr(at + 8));
  const std::size_t tag = d.rfind("<text", at);
  const std::string label = d.substr(tag, d.find('>', at) - tag);
  if (c >= 250 && c <= 500) {
    const std::size_t x = label.find(" x=\"");
    EXPECT_NEAR(std::stod(label.substr(x + 4)), 170 + (c - 250) * 4, 1e-6) << label;
  } else {
    EXPECT_NE(label.find("display: none"), std::string::npos) << label;
  }
  EXPECT_NE(d.find("class=\"ticks\" style=\"display: none;\""), std::string::npos);
  EXPECT_GE(count(d, "class=\"tick\">"), count(html, "class=\"tick\">") + 4);  // the window's ticks added
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace meshsim
