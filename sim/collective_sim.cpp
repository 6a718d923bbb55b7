#include "sim/collective_sim.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "core/enum_names.h"
#include "core/error.h"
#include "core/flag.h"
#include "core/suggest.h"

namespace meshsim {

constexpr EnumName<Fidelity> kFidelityNames[] = {
    {Fidelity::Formula, "formula"}, {Fidelity::Flow, "flow"}, {Fidelity::Nccl, "nccl"}};
const char* to_string(Fidelity f) { return enum_name(kFidelityNames, f); }

Fidelity parse_fidelity(const std::string& s, const std::string& field) {
  if (const auto f = enum_parse(kFidelityNames, s)) return *f;
  throw Error(fmt::format("{}: unknown fidelity '{}'; use one of {}", field, s, enum_list(kFidelityNames)));
}

namespace {

// `used` (links that carried bytes, ascending) ranked by utilization over `over`, the first n.
std::vector<BusiestLink> rank_by_utilization(const Topology& topo, std::vector<BusiestLink> used, Time over,
                                             std::size_t n) {
  const double t = std::max<double>(1.0, static_cast<double>(over.ps()));
  for (BusiestLink& u : used) u.utilization = u.bytes / (topo.link(u.link).spec.effective().bytes_per_ps() * t);
  std::stable_sort(used.begin(), used.end(),
                   [](const BusiestLink& a, const BusiestLink& b) { return a.utilization > b.utilization; });
  if (used.size() > n) used.resize(n);
  return used;
}

}  // namespace

std::vector<BusiestLink> busiest_links(const Topology& topo, const std::vector<double>& bytes, Time over,
                                       std::size_t n) {
  std::vector<BusiestLink> used;
  for (std::size_t l = 0; l < bytes.size(); ++l)
    if (bytes[l] > 0) used.push_back({static_cast<int>(l), bytes[l], 0.0});
  return rank_by_utilization(topo, std::move(used), over, n);
}

std::vector<BusiestLink> busiest_links(const Topology& topo, const std::vector<LinkUse>& used_links, Time over,
                                       std::size_t n) {
  std::vector<BusiestLink> used;
  for (const LinkUse& u : used_links)
    if (u.stats.bytes > 0) used.push_back({u.link, u.stats.bytes, 0.0});
  return rank_by_utilization(topo, std::move(used), over, n);
}

namespace {

// A program's steps over all its ranks: a flow run's work, known before any of it is done.
double rank_steps(const StepProgram& p) {
  double steps = 0;
  for (int r = 0; r < p.ranks(); ++r) steps += p.num_steps(r);
  return steps;
}

// Messages a program has in flight at once when every rank runs a step like rank 0's first.
double concurrent_messages(const StepProgram& p) {
  if (p.ranks() < 1 || p.num_steps(0) < 1) return 0;
  Step s;
  p.step(0, 0, s);
  return static_cast<double>(p.ranks()) * static_cast<double>(s.sends.size());
}

// The flow run of `a` over every group at once (programs as the links see them).
FlowSimResult flow_of(const Topology& topo, Router& router, const Algorithm& a,
                      const std::vector<CollectiveSpec>& specs, const std::vector<CostParams>& params,
                      const std::vector<std::vector<int>>& gpus, const FlowSimOptions& opt) {
  std::vector<std::unique_ptr<StepProgram>> programs;
  std::vector<GroupProgram> groups;
  double steps = 0, concurrent = 0;  // the flow run's work and the messages it solves together
  for (std::size_t i = 0; i < specs.size(); ++i) {
    programs.push_back(a.make_timing ? a.make_timing(specs[i], params[i]) : a.build(specs[i]));
    groups.push_back({gpus[i], programs.back().get(), best_protocol(a, specs[i], params[i]).protocol, a.hop_rows,
                      protocol_scope(params[i], specs[i])});
    steps += rank_steps(*programs.back());
    concurrent += concurrent_messages(*programs.back());
  }
  if (concurrent > kMaxFlowConcurrent)
    throw Error(
        fmt::format("{}: {} on {} ranks keeps {:.3g} messages in flight at once, beyond "
                    "meshsim's limit of {:.3g} (about 600 bytes of memory each); use {} "
                    "or nccl, or fewer ranks",
                    flag("fidelity", "flow"), a.name, specs.front().ranks * static_cast<double>(specs.size()),
                    concurrent, kMaxFlowConcurrent, flag("fidelity", "formula")));
  if (steps > kMaxFlowRankSteps)
    throw Error(
        fmt::format("{}: {} on {} ranks is {:.3g} rank-steps of routed flows, beyond meshsim's "
                    "limit of {:.3g} (minutes of work); use {} or nccl, or fewer ranks",
                    flag("fidelity", "flow"), a.name, specs.front().ranks * static_cast<double>(specs.size()), steps,
                    kMaxFlowRankSteps, flag("fidelity", "formula")));
  return simulate_flow(topo, router, groups, opt);
}

// `auto` at flow fidelity times, under contention, the closed forms' three favourites and
// ring (the contention-robust reference) when each is cheap to simulate (at most
// kAutoFlowCheckRankSteps rank-steps per group): a closed form cannot see two of an
// algorithm's own pairs sharing a link (recursive halving on a PCIe tree or a GPU ring).
template <class Refusal, class Cheap>
std::vector<const Algorithm*> auto_flow_candidates(const std::vector<RankedAlgorithm>& ranked, Refusal&& refusal,
                                                   Cheap&& cheap) {
  std::vector<const Algorithm*> out;
  if (!cheap(*ranked.front().algorithm)) return out;
  auto add = [&](const Algorithm* a) {
    if (std::find(out.begin(), out.end(), a) != out.end() || refusal(*a) || !cheap(*a)) return;
    out.push_back(a);
  };
  for (std::size_t i = 0; i < ranked.size() && i < 3; ++i) add(ranked[i].algorithm);
  for (const RankedAlgorithm& r : ranked)
    if (r.algorithm->name == "ring") add(r.algorithm);
  return out;
}

// The requests no collective run can take, first failing check reported.
void check_collective_request(const CollectiveRequest& req) {
  if (req.groups.empty() || req.groups.front().empty())
    throw Error(fmt::format("{}: a collective needs at least one group with ranks; use {} with N >= 1", flag("ranks"),
                            flag("ranks", "N")));
  if (req.bytes < 0) throw Error(flag("bytes") + ": size must be >= 0");
}

// One collective spec per group of the request.
std::vector<CollectiveSpec> group_specs(const Topology& topo, const CollectiveRequest& req) {
  std::vector<CollectiveSpec> specs;
  for (const auto& gpus : req.groups) {
    CollectiveSpec spec;
    spec.kind = req.kind;
    spec.ranks = static_cast<int>(gpus.size());
    spec.bytes = req.bytes;
    spec.root = req.root;
    spec.chunks = req.chunks;
    spec.ranks_per_node = detect_ranks_per_node(topo, gpus);
    spec.alltoall_bytes = req.alltoall_bytes;
    if (spec.root < 0 || spec.root >= spec.ranks)
      throw Error(fmt::format("{}: {} is not a rank of a {}-rank group; use 0..{}", flag("root"), spec.root, spec.ranks,
                              spec.ranks - 1));
    specs.push_back(std::move(spec));
  }
  return specs;
}

// NCCL's tuning model for every group; the slowest group's time.
void nccl_outcome(const Topology& topo, Router& router, const CollectiveRequest& req, CollectiveOutcome& out) {
  if (req.fidelity != Fidelity::Nccl)
    throw Error(
        fmt::format("{}: NCCL's tuning model is its own cost mode with no step program to run at "
                    "fidelity {}; use {} (or leave {} out)",
                    flag("algo", "nccl"), to_string(req.fidelity), flag("fidelity", "nccl"), flag("fidelity")));
  if (req.algorithm.kind == AlgorithmChoice::Kind::Named)
    throw Error(fmt::format("{}: at fidelity nccl NCCL chooses the algorithm itself; use {} or auto",
                            flag("algo", req.algorithm.name), flag("algo", "nccl")));
  for (std::size_t i = 0; i < req.groups.size(); ++i) {
    for (int l : topo.out_links(topo.gpu_device(req.groups[i].front())))
      if (topo.link(l).spec.kind == LinkKind::Xgmi)
        throw Error(fmt::format(
            "{}: NCCL's tuning model is NVIDIA's, and GPUs joined by xGMI ({}) run RCCL, whose "
            "tables differ; use {} or {}",
            flag("fidelity", "nccl"), link_name(topo, l), flag("fidelity", "formula"), flag("fidelity", "flow")));
    const NcclShape shape = nccl_shape(topo, router, req.groups[i], req.nccl.sm);
    NcclPrediction pred = nccl_predict(req.kind, req.bytes, shape, req.nccl);
    if (i == 0) {
      out.time = pred.time;
      out.nccl = std::move(pred);
    } else {
      out.time = std::max(out.time, pred.time);
    }
  }
  out.formula_time = out.nccl->time;
}

// A step-program collective (fidelity formula or flow) over every group of the request.
class StepCollective {
 public:
  StepCollective(const Topology& topo, Router& router, const AlgorithmRegistry& registry, const CollectiveRequest& req,
                 std::vector<CollectiveSpec> specs, CollectiveOutcome& out)
      : topo_(topo), router_(router), registry_(registry), req_(req), specs_(std::move(specs)), out_(out) {
    params_.push_back(out.params);
    for (std::size_t i = 1; i < specs_.size(); ++i)
      params_.push_back(derive_cost_params(router, req.groups[i], req.gamma_ps));
  }

  void run() {
    choose_algorithm();
    if (auto why = refusal(*out_.algorithm)) throw Error(*why);
    set_formula();
    if (req_.fidelity == Fidelity::Formula) {
      formula_time();
      return;
    }
    flow_time();
  }

 private:
  // Why `a` cannot time every group, or nullopt.
  std::optional<std::string> refusal(const Algorithm& a) const {
    for (std::size_t i = 0; i < specs_.size(); ++i) {
      if (auto why = a.unsupported(specs_[i]))
        return fmt::format("{}: cannot run {} on {} ranks: {}", flag("algo", a.name), to_string(specs_[i].kind),
                           specs_[i].ranks, *why);
      if (auto why = a.unavailable ? a.unavailable(specs_[i], params_[i]) : std::nullopt)
        return fmt::format("{}: cannot run {} on this group of {}: {}; use another algorithm or auto",
                           flag("algo", a.name), to_string(specs_[i].kind), topo_.name(), *why);
    }
    return std::nullopt;
  }

  // The requested algorithm, or `auto`'s favourite and, at flow fidelity, the candidates
  // worth a flow run.
  void choose_algorithm() {
    if (req_.algorithm.kind == AlgorithmChoice::Kind::Auto) {
      const std::vector<RankedAlgorithm> ranked = rank_algorithms(registry_, out_.spec, out_.params);
      out_.algorithm = ranked.front().algorithm;
      // Worth a flow run: cheap to simulate, and a closed form within 10x the favourite's
      // (a flow run rarely comes out below its own closed form) and well inside meshsim's range.
      const double best_ps = ranked.front().cost_ps;
      auto cheap = [&](const Algorithm& a) {
        const double c = best_protocol(a, out_.spec, out_.params).ps;
        if (&a != ranked.front().algorithm && !(c <= 10 * best_ps && c <= 0.25 * static_cast<double>(kMaxTimePs)))
          return false;
        const auto prog = a.make_timing ? a.make_timing(out_.spec, out_.params) : a.build(out_.spec);
        return rank_steps(*prog) <= kAutoFlowCheckRankSteps &&
               concurrent_messages(*prog) * specs_.size() <= kMaxFlowConcurrent;
      };
      auto refused = [&](const Algorithm& a) { return refusal(a); };
      if (req_.fidelity == Fidelity::Flow) flow_candidates_ = auto_flow_candidates(ranked, refused, cheap);
    } else {
      out_.algorithm = registry_.find(req_.algorithm.name, req_.kind);
      if (out_.algorithm == nullptr) {
        std::vector<std::string> names;
        for (const Algorithm* a : registry_.for_kind(req_.kind)) names.push_back(a->name);
        const std::string hint = did_you_mean(req_.algorithm.name, names);
        throw Error(fmt::format("{}: '{}' is not an algorithm for {}{}; choose one of: auto, {}", flag("algo"),
                                req_.algorithm.name, to_string(req_.kind), hint.empty() ? "" : " (" + hint + ")",
                                fmt::join(names, ", ")));
      }
    }
  }

  // Group 0's closed form under its runtime protocol, and that protocol.
  void set_formula() {
    const ProtocolCost pc = best_protocol(*out_.algorithm, out_.spec, out_.params);
    out_.formula_time = duration_ps(pc.ps, "the collective");
    out_.protocol = pc.protocol;
  }

  // Fidelity formula: the slowest group's closed form.
  void formula_time() {
    out_.time = out_.formula_time;
    for (std::size_t i = 1; i < specs_.size(); ++i)
      out_.time =
          std::max(out_.time, duration_ps(best_protocol(*out_.algorithm, specs_[i], params_[i]).ps, "the collective"));
  }

  // Fidelity flow: every group's routed flows at once; the busiest links.
  void flow_time() {
    FlowSimOptions opt;
    opt.gamma_ps = req_.gamma_ps;
    opt.record = req_.record;
    opt.fast_forward = req_.fast_forward;
    opt.scratch = req_.flow_scratch;
    const Algorithm* formula_for = out_.algorithm;
    if (flow_candidates_.size() > 1) {
      // `auto` at flow fidelity: the closed forms' favourites timed under contention; the
      // fastest wins (ties: the closed form's order).
      for (const Algorithm* a : flow_candidates_) {
        FlowSimResult r = flow_of(topo_, router_, *a, specs_, params_, req_.groups, opt);
        if (!out_.flow || r.total < out_.flow->total) {
          out_.algorithm = a;
          out_.flow = std::move(r);
        }
      }
    } else {
      out_.flow = flow_of(topo_, router_, *out_.algorithm, specs_, params_, req_.groups, opt);
    }
    if (out_.algorithm != formula_for) set_formula();  // the flow check chose another algorithm
    out_.time = out_.flow->total;
    out_.top_links = busiest_links(topo_, out_.flow->used_links, out_.time);
    if (!out_.top_links.empty()) out_.busiest = out_.top_links.front();
  }

  const Topology& topo_;
  Router& router_;
  const AlgorithmRegistry& registry_;
  const CollectiveRequest& req_;
  const std::vector<CollectiveSpec> specs_;
  std::vector<CostParams> params_;
  std::vector<const Algorithm*> flow_candidates_;
  CollectiveOutcome& out_;
};

}  // namespace

Fidelity collective_fidelity(const std::string& text, const AlgorithmChoice& algorithm, const std::string& field) {
  return parse_fidelity(text.empty() ? (algorithm.kind == AlgorithmChoice::Kind::Nccl ? "nccl" : "flow") : text, field);
}

CollectiveOutcome run_collective(const Topology& topo, Router& router, const AlgorithmRegistry& registry,
                                 const CollectiveRequest& req) {
  check_collective_request(req);
  CollectiveOutcome out;
  std::vector<CollectiveSpec> specs = group_specs(topo, req);
  out.spec = specs.front();
  out.params = derive_cost_params(router, req.groups.front(), req.gamma_ps);
  if (req.fidelity == Fidelity::Nccl || req.algorithm.kind == AlgorithmChoice::Kind::Nccl) {
    nccl_outcome(topo, router, req, out);
    return out;
  }
  StepCollective(topo, router, registry, req, std::move(specs), out).run();
  return out;
}

}  // namespace meshsim
