#include "schedule/buffer_view.h"

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <iterator>
#include <map>
#include <set>

namespace meshsim {

namespace {

// One rank's buffer as runs of bytes with the same content: start -> ranks, each run ending
// where the next begins; the last key is the buffer's end (its value unused).
class Contents {
 public:
  explicit Contents(Bytes size, std::uint32_t all = 0) { runs_ = {{0, all}, {size, 0}}; }
  Bytes size() const { return runs_.rbegin()->first; }
  // The runs of [begin, end), as (length, ranks).
  std::vector<std::pair<Bytes, std::uint32_t>> read(Bytes begin, Bytes end) const {
    std::vector<std::pair<Bytes, std::uint32_t>> out;
    for (auto it = std::prev(runs_.upper_bound(begin)); it->first < end; ++it) {
      const Bytes to = std::min(end, std::next(it)->first);
      out.emplace_back(to - std::max(begin, it->first), it->second);
    }
    return out;
  }
  // Writes `pieces` from `at` on: replacing (copy) or adding to (reduce) what is there.
  void write(Bytes at, const std::vector<std::pair<Bytes, std::uint32_t>>& pieces, bool reduce) {
    for (const auto& [length, ranks] : pieces) {
      split(at);
      split(at + length);
      for (auto it = runs_.find(at); it->first < at + length; ++it) it->second = reduce ? it->second | ranks : ranks;
      at += length;
    }
    merge();
  }
  SliceState state(Bytes begin, Bytes end) const {
    SliceState s;
    bool first = true;
    for (const auto& [length, ranks] : read(begin, end)) {
      if (length == 0) continue;
      if (!first && ranks != s.ranks) s.mixed = true;
      s.ranks = first ? ranks : s.ranks | ranks;
      first = false;
    }
    return s;
  }
  void set(Bytes begin, Bytes end, std::uint32_t ranks) { write(begin, {{end - begin, ranks}}, false); }

 private:
  void split(Bytes at) {
    if (at >= size() || runs_.count(at)) return;
    runs_[at] = std::prev(runs_.upper_bound(at))->second;
  }
  void merge() {
    for (auto it = runs_.begin(); std::next(it) != runs_.end();) {
      auto next = std::next(it);
      if (std::next(next) != runs_.end() && next->second == it->second)
        runs_.erase(next);
      else
        ++it;
    }
  }
  std::map<Bytes, std::uint32_t> runs_;
};

struct Message {
  Bytes bytes = 0;
  std::vector<std::pair<Bytes, std::uint32_t>> pieces;
  int sent = 0;  // round
};

bool all_to_all_like(CollKind k) { return k == CollKind::AllToAll || k == CollKind::SendRecv; }

// Each rank's buffer before the first step (see buffer_view.h).
std::vector<Contents> initial(const CollectiveSpec& spec) {
  const int p = spec.ranks;
  std::vector<Contents> buf;
  for (int r = 0; r < p; ++r) {
    const std::uint32_t self = 1u << r;
    switch (spec.kind) {
      case CollKind::AllReduce:
      case CollKind::Reduce:
      case CollKind::ReduceScatter:
        buf.emplace_back(spec.bytes, self);
        break;
      case CollKind::Broadcast:
        buf.emplace_back(spec.bytes, r == spec.root ? self : 0);
        break;
      case CollKind::AllGather: {
        buf.emplace_back(spec.bytes, 0);
        const Range s = slice(spec.bytes, p, r, spec.element_bytes);
        buf.back().set(s.begin, s.end, self);
        break;
      }
      case CollKind::AllToAll:
      case CollKind::SendRecv: {  // the receive buffer; the block a rank keeps is there at once
        Bytes total = 0, own = 0;
        for (int q = 0; q < p; ++q) {
          const Bytes b = spec.kind == CollKind::SendRecv ? (q == 0 ? spec.bytes : 0) : alltoall_block(spec, q, r);
          if (q < r) own += b;
          total += b;
        }
        if (spec.kind == CollKind::SendRecv) total = spec.bytes;
        buf.emplace_back(total, 0);
        if (spec.kind == CollKind::AllToAll) buf.back().set(own, own + alltoall_block(spec, r, r), self);
        break;
      }
    }
  }
  return buf;
}

class Runner {
 public:
  Runner(const StepProgram& prog, const CollectiveSpec& spec)
      : prog_(prog),
        spec_(spec),
        p_(spec.ranks),
        buf_(initial(spec)),
        next_(static_cast<std::size_t>(p_), 0),
        step_(static_cast<std::size_t>(p_)),
        queue_(static_cast<std::size_t>(p_ * p_)) {
    view_.talks_to.resize(static_cast<std::size_t>(p_));
  }

  BufferView run() {
    for (int r = 0; r < p_; ++r) start(r, 0);
    record(0, 0, false, false);
    for (int t = 1; !done(); ++t) {
      if (t > kMaxViewRounds) {
        view_.truncated = true;
        break;
      }
      int messages = 0;
      bool reduced = false, copied = false;
      bool moved = false;
      for (int r = 0; r < p_; ++r) {
        const auto ur = static_cast<std::size_t>(r);
        if (next_[ur] >= prog_.num_steps(r) || !ready(r, t)) continue;
        const Step& s = step_[ur];
        for (const Transfer& rv : s.recvs) {
          Message m = pop(rv.peer, r);
          if (m.bytes != rv.bytes)
            return stalled(fmt::format("rank {} expected {} B from rank {}, got {} B", r, rv.bytes, rv.peer, m.bytes));
          buf_[ur].write(rv.offset, m.pieces, s.op == RecvOp::Reduce);
          ++messages;
          (s.op == RecvOp::Reduce ? reduced : copied) = true;
        }
        moved = true;
        ++next_[ur];
        start(r, t);
      }
      if (!moved) return stalled("no rank can finish its step");
      record(t, messages, reduced, copied);
    }
    return std::move(view_);
  }

 private:
  bool done() const {
    for (int r = 0; r < p_; ++r)
      if (next_[static_cast<std::size_t>(r)] < prog_.num_steps(r)) return false;
    return true;
  }
  // Begins rank r's step next_[r] (if any) in round t: its sends leave with the buffer as it is.
  void start(int r, int t) {
    const auto ur = static_cast<std::size_t>(r);
    if (next_[ur] >= prog_.num_steps(r)) return;
    Step& s = step_[ur];
    s.clear();
    prog_.step(r, next_[ur], s);
    for (const Transfer& tr : s.sends) {
      Message m{tr.bytes, {}, t};
      if (all_to_all_like(spec_.kind))
        m.pieces = {{tr.bytes, 1u << r}};  // sends read the send buffer: this rank's own data
      else
        m.pieces = buf_[ur].read(tr.offset, tr.offset + tr.bytes);
      queue_[static_cast<std::size_t>(r * p_ + tr.peer)].push_back(std::move(m));
      auto& to = view_.talks_to[ur];
      if (std::find(to.begin(), to.end(), tr.peer) == to.end())
        to.insert(std::upper_bound(to.begin(), to.end(), tr.peer), tr.peer);
    }
  }
  // Whether every message rank r's current step receives was sent before round t.
  bool ready(int r, int t) const {
    std::map<int, std::size_t> need;
    for (const Transfer& rv : step_[static_cast<std::size_t>(r)].recvs) ++need[rv.peer];
    for (const auto& [peer, n] : need) {
      const auto& q = queue_[static_cast<std::size_t>(peer * p_ + r)];
      std::size_t sent = 0;
      for (const Message& m : q) sent += m.sent < t ? 1 : 0;
      if (sent < n) return false;
    }
    return true;
  }
  Message pop(int from, int to) {
    auto& q = queue_[static_cast<std::size_t>(from * p_ + to)];
    Message m = std::move(q.front());
    q.pop_front();
    return m;
  }
  void record(int t, int messages, bool reduced, bool copied) {
    BufferRound round{t, messages, reduced, copied, {}};
    for (int r = 0; r < p_; ++r) {
      std::vector<SliceState> cells;
      for (int i = 0; i < p_; ++i) {
        const Range s = all_to_all_like(spec_.kind) ? block(r, i) : slice(spec_.bytes, p_, i, spec_.element_bytes);
        cells.push_back(buf_[static_cast<std::size_t>(r)].state(s.begin, s.end));
      }
      round.ranks.push_back(std::move(cells));
    }
    view_.rounds.push_back(std::move(round));
  }
  // The receive buffer's block from rank q at rank r.
  Range block(int r, int q) const {
    if (spec_.kind == CollKind::SendRecv) return q == 0 && r == 1 ? Range{0, spec_.bytes} : Range{0, 0};
    Bytes begin = 0;
    for (int s = 0; s < q; ++s) begin += alltoall_block(spec_, s, r);
    return {begin, begin + alltoall_block(spec_, q, r)};
  }
  BufferView stalled(const std::string& why) {
    BufferView v;
    v.not_shown = "the program stalls in this view (" + why + ")";
    return v;
  }

  const StepProgram& prog_;
  const CollectiveSpec& spec_;
  int p_;
  std::vector<Contents> buf_;
  std::vector<int> next_;
  std::vector<Step> step_;
  std::vector<std::deque<Message>> queue_;  // [from * p + to]
  BufferView view_;
};

// "ring: 0 -> 1 -> ... -> 0" when every rank sends to one rank and receives from one, in one
// cycle through all; else each sender and its receivers.
std::string talks_text(const std::vector<std::vector<int>>& to) {
  const int p = static_cast<int>(to.size());
  std::vector<int> in(static_cast<std::size_t>(p), 0);
  bool one_each = true;
  for (const auto& t : to) {
    one_each = one_each && t.size() == 1;
    for (int q : t) ++in[static_cast<std::size_t>(q)];
  }
  one_each = one_each && std::all_of(in.begin(), in.end(), [](int n) { return n == 1; });
  if (one_each && p > 1) {
    std::string ring = "  ring: 0";
    int r = to[0][0], steps = 1;
    for (; r != 0 && steps < p; ++steps, r = to[static_cast<std::size_t>(r)][0]) ring += fmt::format(" -> {}", r);
    if (r == 0 && steps == p) return ring + " -> 0\n";
  }
  std::string out;
  for (int r = 0; r < p; ++r) {
    if (to[static_cast<std::size_t>(r)].empty()) continue;
    std::string peers;
    for (int q : to[static_cast<std::size_t>(r)]) peers += fmt::format("{}{}", peers.empty() ? "" : ", ", q);
    out += fmt::format("  {:>2} -> {}\n", r, peers);
  }
  return out;
}

}  // namespace

std::string ranks_text(std::uint32_t ranks, int p, bool sums) {
  if (ranks == 0) return ".";
  if (sums && ranks == (p >= 32 ? ~0u : (1u << p) - 1)) return "all";
  std::string out;
  for (int r = 0; r < p;) {
    if (!(ranks >> r & 1u)) {
      ++r;
      continue;
    }
    int e = r;
    while (e + 1 < p && (ranks >> (e + 1) & 1u)) ++e;
    out += fmt::format("{}{}", out.empty() ? "" : ",", e == r ? std::to_string(r) : fmt::format("{}-{}", r, e));
    r = e + 1;
  }
  return out;
}

BufferView buffer_view(const StepProgram& prog, const CollectiveSpec& spec) {
  BufferView v;
  if (spec.ranks > kMaxViewRanks || spec.ranks < 1) {
    v.not_shown =
        fmt::format("the view is drawn for groups of up to {} ranks (this one has {})", kMaxViewRanks, spec.ranks);
    return v;
  }
  return Runner(prog, spec).run();
}

std::string buffer_view_text(const BufferView& v, const CollectiveSpec& spec) {
  if (!v.not_shown.empty()) return "Buffers: not shown: " + v.not_shown + "\n";
  const int p = spec.ranks;
  const bool sums = reduces(spec.kind);
  std::size_t width = 3;
  for (const BufferRound& r : v.rounds)
    for (const auto& cells : r.ranks)
      for (const SliceState& c : cells)
        width = std::max(width, ranks_text(c.ranks, p, sums).size() + (c.mixed ? 1 : 0));
  std::string out = "Who sends to whom:\n" + talks_text(v.talks_to);
  out += fmt::format(
      "Buffers by round ({}; a column per slice of the buffer, p = {}; cells: '.' nothing yet, 'r' rank r's data{}, "
      "'~' a slice whose parts differ):\n",
      all_to_all_like(spec.kind) ? "the receive buffer, a block per source" : "the buffer", p,
      sums ? ", '0-2,5' the partial sum of those ranks' inputs, 'all' the finished sum" : "");
  for (const BufferRound& r : v.rounds) {
    const char* phase = r.reduced && r.copied ? "reduce + copy" : r.reduced ? "reduce" : r.copied ? "copy" : "";
    out += r.round == 0 ? "  round 0 (before the first step)\n"
                        : fmt::format("  round {} ({}, {} message{})\n", r.round, *phase ? phase : "no arrivals",
                                      r.messages, r.messages == 1 ? "" : "s");
    for (int k = 0; k < p; ++k) {
      std::string row = fmt::format("    rank {:>2} |", k);
      for (const SliceState& c : r.ranks[static_cast<std::size_t>(k)])
        row += fmt::format(" {:>{}}", (c.mixed ? "~" : "") + ranks_text(c.ranks, p, sums), width);
      out += row + "\n";
    }
  }
  if (v.truncated) out += fmt::format("  ... (the view stops after {} rounds)\n", kMaxViewRounds);
  return out;
}

}  // namespace meshsim
