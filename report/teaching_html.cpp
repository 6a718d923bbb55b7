#include "report/teaching_html.h"

#include <fmt/format.h>

#include <bit>
#include <cmath>

#include "report/html_internal.h"
#include "report/html_report.h"

namespace meshsim {

namespace {

using html::num;

constexpr double kCell = 34, kRowLabel = 64, kTop = 26;

// A cell's fill: white for nothing, a light blue for one rank's data, darker with every rank a
// partial sum holds, green for a finished sum (or, in a gather, the slice in its place).
std::string fill_of(const SliceState& c, const CollectiveSpec& spec, bool sums, int slice) {
  const int p = spec.ranks;
  if (c.ranks == 0) return "#ffffff";
  const int n = std::popcount(c.ranks);
  const int home = spec.kind == CollKind::Broadcast ? spec.root : spec.kind == CollKind::SendRecv ? 0 : slice;
  if (!c.mixed && (sums ? n == p : c.ranks == (1u << home))) return "#59a14f";
  const double t = p > 1 ? static_cast<double>(n - 1) / (p - 1) : 1;
  const int r = static_cast<int>(std::lround(198 - 120 * t)), g = static_cast<int>(std::lround(219 - 100 * t));
  return fmt::format("#{:02x}{:02x}ff", r, g);
}

// The text view's cell text (an empty cell left blank), too long for a cell: the rank count.
std::string cell_text(const SliceState& c, int p, bool sums) {
  if (c.ranks == 0) return "";
  const std::string text = ranks_text(c.ranks, p, sums);
  return text.size() > 5 ? fmt::format("{}r", std::popcount(c.ranks)) : text;
}

// One round: a row per rank, a cell per slice.
std::string round_svg(const BufferRound& round, const CollectiveSpec& spec, bool sums) {
  const int p = spec.ranks;
  const double w = kRowLabel + p * kCell + 10, h = kTop + p * kCell + 10;
  std::string s = fmt::format(
      "<svg viewBox=\"0 0 {0} {1}\" width=\"{0}\" height=\"{1}\" "
      "xmlns=\"http://www.w3.org/2000/svg\">\n",
      num(w, 0), num(h, 0));
  for (int i = 0; i < p; ++i)
    s += fmt::format("<text x=\"{}\" y=\"18\" text-anchor=\"middle\" class=\"h\">{}</text>\n",
                     num(kRowLabel + (i + 0.5) * kCell, 1), i);
  for (int r = 0; r < p; ++r) {
    const double y = kTop + r * kCell;
    s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\" class=\"h\">rank {}</text>\n", num(kRowLabel - 6, 0),
                     num(y + kCell / 2 + 4, 1), r);
    for (int i = 0; i < p; ++i) {
      const SliceState& c = round.ranks[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)];
      const double x = kRowLabel + i * kCell;
      s += fmt::format(
          "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\" stroke=\"#8c959f\"{}/>"
          "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" class=\"c\">{}</text>\n",
          num(x, 0), num(y, 0), num(kCell, 0), num(kCell, 0), fill_of(c, spec, sums, i),
          c.mixed ? " stroke-dasharray=\"3 2\"" : "", num(x + kCell / 2, 1), num(y + kCell / 2 + 4, 1),
          html_escape(cell_text(c, p, sums)));
    }
  }
  return s + "</svg>\n";
}

// Who sends to whom: the ranks on a circle, an arrow per pair that exchanged a message.
std::string talks_svg(const std::vector<std::vector<int>>& to) {
  const int p = static_cast<int>(to.size());
  const double size = 260, c = size / 2, radius = size / 2 - 24;
  auto at = [&](int r) {
    const double a = 2 * M_PI * r / p - M_PI / 2;
    return std::make_pair(c + radius * std::cos(a), c + radius * std::sin(a));
  };
  std::string s = fmt::format(
      "<svg viewBox=\"0 0 {0} {0}\" width=\"{0}\" height=\"{0}\" xmlns=\"http://www.w3.org/2000/svg\">\n"
      "<defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"9\" refY=\"5\" markerWidth=\"6\" markerHeight=\"6\" "
      "orient=\"auto-start-reverse\"><path d=\"M 0 0 L 10 5 L 0 10 z\" fill=\"#57606a\"/></marker></defs>\n",
      num(size, 0));
  for (int r = 0; r < p; ++r)
    for (int q : to[static_cast<std::size_t>(r)]) {
      auto [x0, y0] = at(r);
      auto [x1, y1] = at(q);
      const double dx = x1 - x0, dy = y1 - y0, len = std::max(1e-9, std::hypot(dx, dy));
      s += fmt::format(
          "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#57606a\" stroke-width=\"1.2\" "
          "marker-end=\"url(#arrow)\"/>\n",
          num(x0 + dx / len * 13, 1), num(y0 + dy / len * 13, 1), num(x1 - dx / len * 13, 1),
          num(y1 - dy / len * 13, 1));
    }
  for (int r = 0; r < p; ++r) {
    auto [x, y] = at(r);
    s += fmt::format(
        "<circle cx=\"{}\" cy=\"{}\" r=\"12\" fill=\"#4e79a7\"/><text x=\"{}\" y=\"{}\" text-anchor=\"middle\" "
        "class=\"n\">{}</text>\n",
        num(x, 1), num(y, 1), num(x, 1), num(y + 4, 1), r);
  }
  return s + "</svg>\n";
}

}  // namespace

std::string teaching_html(const BufferView& v, const CollectiveSpec& spec, const std::string& title,
                          const std::string& explanation) {
  const bool sums = reduces(spec.kind);
  std::string s = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>" + html_escape(title) +
                  "</title>\n<style>body{font-family:system-ui,sans-serif;margin:24px;color:#1f2328}"
                  "h1{font-size:20px}.h{font-size:11px;fill:#57606a}.c{font-size:10px;fill:#1f2328}"
                  ".n{font-size:11px;fill:#fff}.round{display:block;margin:12px 0}.js .round{display:none}"
                  ".js .round.on{display:block}button{font-size:14px;margin-right:8px}"
                  "pre{background:#f6f8fa;padding:12px;overflow:auto;font-size:12px}"
                  ".legend span{display:inline-block;width:14px;height:14px;vertical-align:middle;margin:0 4px 0 "
                  "12px;border:1px solid #8c959f}</style></head>\n<body>\n";
  s += "<h1>" + html_escape(title) + "</h1>\n";
  if (!v.not_shown.empty()) return s + "<p>Not shown: " + html_escape(v.not_shown) + "</p>\n</body></html>\n";
  s += "<h2>Who sends to whom</h2>\n" + talks_svg(v.talks_to);
  s += "<h2>Buffers round by round</h2>\n<p class=\"legend\">A row per rank, a column per slice of the buffer "
       "(numbered above)"
       "<span style=\"background:#fff\"></span>nothing yet<span style=\"background:#c6dbff\"></span>one rank's data"
       "<span style=\"background:#4e77ff\"></span>a partial sum (darker: more ranks)"
       "<span style=\"background:#59a14f\"></span>finished; dashed: a slice whose parts differ.</p>\n";
  s += "<p><button id=\"prev\">&larr; previous</button><button id=\"next\">next &rarr;</button>"
       "<span id=\"where\"></span> (or the arrow keys)</p>\n";
  for (std::size_t i = 0; i < v.rounds.size(); ++i) {
    const BufferRound& r = v.rounds[i];
    const char* phase = r.reduced && r.copied ? "reduce + copy" : r.reduced ? "reduce" : r.copied ? "copy" : "";
    s += fmt::format("<div class=\"round{}\"><h3>{}</h3>\n", i == 0 ? " on" : "",
                     r.round == 0 ? std::string("Round 0: before the first step")
                                  : fmt::format("Round {}: {}, {} message{}", r.round, *phase ? phase : "no arrivals",
                                                r.messages, r.messages == 1 ? "" : "s"));
    s += round_svg(r, spec, sums) + "</div>\n";
  }
  if (v.truncated) s += fmt::format("<p>The view stops after {} rounds.</p>\n", kMaxViewRounds);
  s += "<h2>The formula and the timed steps</h2>\n<pre>" + html_escape(explanation) + "</pre>\n";
  s += "<script>\ndocument.body.classList.add('js');\nconst rounds = [...document.querySelectorAll('.round')];\n"
       "let at = 0;\nfunction show(i) { at = Math.max(0, Math.min(rounds.length - 1, i));\n"
       "  rounds.forEach((r, k) => r.classList.toggle('on', k === at));\n"
       "  document.getElementById('where').textContent = ' round ' + at + ' of ' + (rounds.length - 1); }\n"
       "document.getElementById('prev').onclick = () => show(at - 1);\n"
       "document.getElementById('next').onclick = () => show(at + 1);\n"
       "document.addEventListener('keydown', e => { if (e.key === 'ArrowLeft') show(at - 1);\n"
       "  if (e.key === 'ArrowRight') show(at + 1); });\nshow(parseInt(location.hash.slice(1)) || 0);  // page.html#3: "
       "round 3\n</script>\n</body></html>\n";
  return s;
}

}  // namespace meshsim
