// Parallel layouts: recomputation modes and the checks a layout must pass.
//
//   Recompute r = Recompute::parse("every:4", "parallel.recompute");   // EveryK, K = 4
//   validate_parallel(p, model, 1024);   // throws "parallel.pp: ..." on the first misfit
//
// Each check throws one Error whose message starts with the field, gives the values
// involved and says how to fix it. The order of the checks is listed in parallel.h.
#include "schedule/parallel.h"

#include <atomic>

#include <fmt/format.h>

#include "core/enum_names.h"
#include "core/error.h"
#include "core/units.h"

namespace meshsim {

constexpr EnumName<RecomputeMode> kRecomputeModeNames[] = {
    {RecomputeMode::None, "none"},    {RecomputeMode::Full, "full"}, {RecomputeMode::Selective, "selective"},
    {RecomputeMode::EveryK, "every"}, {RecomputeMode::Sqrt, "sqrt"}, {RecomputeMode::Ops, "ops"}};
const char* to_string(RecomputeMode m) { return enum_name(kRecomputeModeNames, m); }

Recompute Recompute::parse(const std::string& text, const std::string& field) {
  Recompute r;
  // Every mode but every:K is its name alone ("every" needs its K).
  if (const std::optional<RecomputeMode> m = enum_parse(kRecomputeModeNames, text); m && *m != RecomputeMode::EveryK) {
    r.mode = *m;
    return r;
  }
  if (text.rfind("every:", 0) == 0) {
    const std::optional<int> k = parse_int(std::string_view(text).substr(6));
    if (!k || *k < 1)
      throw Error(
          fmt::format("{}: '{}' needs a whole number of layers K >= 1 after 'every:', e.g. every:4", field, text));
    r.mode = RecomputeMode::EveryK;
    r.every_k = *k;
    return r;
  }
  throw Error(
      fmt::format("{}: '{}' is not a recompute mode; write none, full, selective, every:K, sqrt or ops", field, text));
}

std::string Recompute::to_string() const {
  if (mode == RecomputeMode::EveryK) return fmt::format("every:{}", every_k);
  return meshsim::to_string(mode);
}

namespace {

[[noreturn]] void fail(const std::string& field, const std::string& what) {
  throw Error(fmt::format("parallel.{}: {}", field, what));
}

void at_least(int v, int lo, const char* field) {
  if (v < lo) fail(field, fmt::format("{} must be at least {}", v, lo));
}

void in_range(int v, int lo, int most, const char* field) {
  at_least(v, lo, field);
  if (v > most) fail(field, fmt::format("{} exceeds meshsim's limit of {}", v, most));
}

// Every size within meshsim's range, and at least one GPU.
void check_ranges(const ParallelSpec& p, int gpus) {
  in_range(p.dp, 1, kMaxGpus, "dp");
  in_range(p.tp, 1, kMaxGpus, "tp");
  in_range(p.cp, 1, kMaxGpus, "cp");
  in_range(p.pp, 1, kMaxGpus, "pp");
  in_range(p.vchunks, 1, kMaxGpus, "vchunks");
  in_range(p.microbatches, 1, kMaxMicrobatches, "microbatches");
  in_range(p.micro_batch_size, 1, kMaxMicrobatches, "micro_batch_size");
  in_range(p.ep, 1, kMaxGpus, "ep");
  in_range(p.etp, 0, kMaxGpus, "etp");
  in_range(p.mesh2d, 0, kMaxGpus, "mesh2d");
  if (gpus < 1) throw Error(fmt::format("gpus: {} must be at least 1", gpus));
}

// The layout's GPUs, tokens per micro-batch and layer passes per stage within meshsim's limits.
void check_products(const ParallelSpec& p, const ModelSpec& m) {
  // Products in 64 bits: each factor fits, their product may not fit an int.
  const std::int64_t q = p.mesh2d;
  const std::int64_t world = std::int64_t{p.dp} * p.pp * p.cp * (q > 0 ? q * q : std::int64_t{p.tp});
  if (world > kMaxGpus)
    fail("dp",
         fmt::format("layout dp = {} x pp = {} x cp = {} x {} = {} GPUs exceeds meshsim's limit of {}", p.dp, p.pp,
                     p.cp, q > 0 ? fmt::format("q^2 = {}", q * q) : fmt::format("tp = {}", p.tp), world, kMaxGpus));
  const std::int64_t tokens = std::int64_t{p.micro_batch_size} * m.seq;
  if (tokens > kMaxTokensPerMicrobatch)
    fail("micro_batch_size", fmt::format("{} sequences of {} tokens = {} tokens per micro-batch exceeds meshsim's "
                                         "limit of {}",
                                         p.micro_batch_size, m.seq, tokens, kMaxTokensPerMicrobatch));
  const std::int64_t per_stage = p.stage_layers.empty() ? m.layers / p.pp : m.layers;  // an upper bound when uneven
  const std::int64_t passes = per_stage * p.microbatches;
  if (passes > kMaxLayerPasses)
    fail("microbatches", fmt::format("{} micro-batches x {} layers per stage = {} layer passes per stage exceed "
                                     "meshsim's limit of {} (the schedule holds every op); use fewer micro-batches",
                                     p.microbatches, per_stage, passes, kMaxLayerPasses));
}

// ZeRO stage, expert imbalance, gradient bucket size and recomputation.
void check_options(const ParallelSpec& p) {
  if (p.zero < 0 || p.zero > 3) fail("zero", fmt::format("stage {} does not exist; use 0, 1, 2 or 3", p.zero));
  if (!(p.ep_imbalance >= 1.0))
    fail("ep_imbalance", fmt::format("{} must be >= 1 (busiest expert rank / mean; 1 = balanced)", p.ep_imbalance));
  // The busiest of ep ranks receives at most every token: ep x the mean (unused with ep 1).
  if (p.ep > 1 && !(p.ep_imbalance <= p.ep))
    fail("ep_imbalance",
         fmt::format("{} exceeds ep = {}: the busiest of {} expert ranks receives at most all the tokens ({} x the "
                     "mean); use 1..{}",
                     p.ep_imbalance, p.ep, p.ep, p.ep, p.ep));
  if (!(p.dp_bucket_mib > 0)) fail("dp_bucket_mib", fmt::format("{} must be positive, e.g. 25", p.dp_bucket_mib));
  if (p.recompute.mode == RecomputeMode::EveryK && p.recompute.every_k < 1)
    fail("recompute", fmt::format("every:{} needs K >= 1 layers, e.g. every:4", p.recompute.every_k));
}

// torchtitan's per-op policy is modelled for the blocks it was written for: dense MLPs,
// standard attention through the fused kernel whose output it saves, 1D tensor parallelism.
void check_recompute_ops(const ParallelSpec& p, const ModelSpec& m) {
  if (p.recompute.mode != RecomputeMode::Ops) return;
  if (m.attention != AttentionKind::Flash)
    fail("recompute",
         "ops saves the fused attention kernel's output (torchtitan's save list); it needs "
         "model.attention: flash (or use recompute: selective for Megatron's core-attention "
         "recomputation)");
  if (m.moe() || m.mla())
    fail("recompute", fmt::format("ops is modelled for dense blocks with standard attention; this model has {}; use "
                                  "full, selective, every:K or sqrt",
                                  m.moe() ? "experts (grouped GEMMs, not on torchtitan's save list)"
                                          : "multi-head latent attention"));
  if (p.mesh2d > 0) fail("recompute", "ops is not modelled with mesh2d (2D SUMMA); use full or selective");
}

// Sequence parallelism and distributed checkpoints need 1D tensor parallelism.
void check_sequence_parallel(const ParallelSpec& p) {
  if (p.sp && p.tp < 2 && p.mesh2d == 0)
    fail("sp", fmt::format("sequence parallelism needs tp > 1 (tp = {}); set tp or drop sp", p.tp));
  if (p.distribute_checkpoints) {
    if (p.sp)
      fail("distribute_checkpoints",
           "sequence parallelism already shards the checkpoints over tp; set distribute_checkpoints false");
    if (p.tp < 2)
      fail("distribute_checkpoints",
           fmt::format("shards checkpoints over 1D tensor parallelism, which needs tp > 1 (tp = {}); set tp or "
                       "set distribute_checkpoints false",
                       p.tp));
    if (!p.checkpoints_distributed())
      fail("distribute_checkpoints",
           fmt::format("applies to whole-layer recomputation (recompute = {} keeps no checkpoints); set recompute to "
                       "full, every:K or sqrt, or set distribute_checkpoints false",
                       p.recompute.to_string()));
  }
}

// 2D tensor parallelism (mesh2d = q) replaces tp, sp and cp, and q divides the split widths.
void check_mesh2d(const ParallelSpec& p, const ModelSpec& m) {
  if (p.mesh2d <= 0) return;
  const int q = p.mesh2d;
  if (p.tp > 1) fail("mesh2d", fmt::format("q = {} replaces 1D tensor parallelism; set tp = 1 (tp = {})", q, p.tp));
  if (p.sp) fail("sp", fmt::format("mesh2d = {} already splits the sequence dimension; drop sp", q));
  if (p.cp > 1) fail("cp", fmt::format("context parallelism is not modelled with mesh2d = {}; set cp = 1", q));
  auto divides = [&](int v, const char* what) {
    if (v % q != 0) fail("mesh2d", fmt::format("q = {} does not divide {} = {}; choose q dividing it", q, what, v));
  };
  divides(m.heads, "heads");
  divides(m.hidden, "hidden");
  divides(m.ffn_hidden, "ffn_hidden");
  divides(m.vocab, "vocab");
  divides(p.micro_batch_size, "micro_batch_size (each mesh row holds b/q sequences)");
}

// tp splits the attention heads and the K/V heads (or replicates the K/V heads evenly).
void check_heads(const ParallelSpec& p, const ModelSpec& m) {
  if (m.heads % p.tp != 0)
    fail("tp", fmt::format("{} does not divide heads = {}; use a divisor of the head count", p.tp, m.heads));
  if (p.tp > m.kv_heads) {
    if (!p.kv_replicate)
      fail("tp", fmt::format("{} exceeds kv_heads = {} (GQA); lower tp to at most {} or set kv_replicate = true", p.tp,
                             m.kv_heads, m.kv_heads));
    if (p.tp % m.kv_heads != 0)
      fail("tp", fmt::format("{} is not a multiple of kv_heads = {}, so K/V heads cannot be replicated evenly", p.tp,
                             m.kv_heads));
  } else if (m.kv_heads % p.tp != 0) {
    fail("tp", fmt::format("{} does not divide kv_heads = {}; use a divisor of the K/V head count", p.tp, m.kv_heads));
  }
}

// The layout uses exactly the GPUs there are.
void check_world(const ParallelSpec& p, int gpus, const std::string& gpus_from) {
  if (p.world_size() != gpus) {
    const std::string tensor = p.mesh2d > 0 ? fmt::format("q^2 = {}", p.tensor_size()) : fmt::format("tp = {}", p.tp);
    const std::string have =
        gpus_from.empty() ? fmt::format("there are {}", gpus) : fmt::format("{} has {}", gpus_from, gpus);
    fail("dp", fmt::format("layout dp = {} x pp = {} x cp = {} x {} uses {} GPUs but {}; "
                           "change the sizes so that their product is {}",
                           p.dp, p.pp, p.cp, tensor, p.world_size(), have, gpus));
  }
}

// cp (twice over with cp_balance) and sp split the sequence evenly.
void check_sequence_split(const ParallelSpec& p, const ModelSpec& m) {
  const int seq_div = p.cp * (p.sp ? p.tp : 1) * (p.cp > 1 && p.cp_balance ? 2 : 1);
  if (m.seq % seq_div != 0)
    fail(p.cp > 1 ? "cp" : "sp",
         fmt::format("seq = {} is not divisible by {} (cp = {}{}{}); choose a sequence length that is", m.seq, seq_div,
                     p.cp, p.sp ? fmt::format(" x tp = {}", p.tp) : "",
                     p.cp > 1 && p.cp_balance ? " x 2 for cp_balance" : ""));
}

// Stages (and model chunks) split the layers evenly and get enough micro-batches.
void check_pipeline(const ParallelSpec& p, const ModelSpec& m) {
  const std::int64_t slots = std::int64_t{p.pp} * p.vchunks;
  if (!p.stage_layers.empty()) {
    if (static_cast<std::int64_t>(p.stage_layers.size()) != slots)
      fail("stage_layers",
           fmt::format("{} entries for pp = {} x vchunks = {} = {} virtual stages; give one layer count "
                       "per virtual stage (chunk c of stage s is entry c x pp + s)",
                       p.stage_layers.size(), p.pp, p.vchunks, slots));
    std::int64_t sum = 0;
    for (std::size_t i = 0; i < p.stage_layers.size(); ++i) {
      if (p.stage_layers[i] < 0)
        fail("stage_layers", fmt::format("entry {} is {}; layer counts are 0 or more", i, p.stage_layers[i]));
      sum += p.stage_layers[i];
    }
    if (sum != m.layers)
      fail("stage_layers",
           fmt::format("the entries add up to {} layers, the model has {}; make them add up", sum, m.layers));
  } else if (m.layers % slots != 0) {
    fail("pp", fmt::format("layers = {} is not divisible by pp = {} x vchunks = {}; choose stages that divide the "
                           "layers, or give parallel.stage_layers",
                           m.layers, p.pp, p.vchunks));
  }
  if (p.microbatches < p.pp)
    fail("microbatches",
         fmt::format("{} is fewer than pp = {} stages; use at least {} micro-batches", p.microbatches, p.pp, p.pp));
  if (p.vchunks > 1) {
    if (p.pp < 2)
      fail("vchunks", fmt::format("{} model chunks need pp > 1 (pp = {}); set vchunks = 1", p.vchunks, p.pp));
    if (p.microbatches % p.pp != 0)
      fail("microbatches", fmt::format("{} is not a multiple of pp = {}, which interleaving (vchunks = {}) needs",
                                       p.microbatches, p.pp, p.vchunks));
  }
}

// Expert parallelism: a MoE model whose experts ep divides, and ep ranks the stage's ranks can
// be carved into: out of dp (etp = tp), or over tp, then cp, then dp (etp = 1).
void check_experts(const ParallelSpec& p, const ModelSpec& m) {
  if (p.etp > 0 && p.etp != p.tp && p.etp != 1)
    fail("etp", fmt::format("{} is neither tp = {} nor 1; experts are split over the tp ranks like a dense MLP "
                            "(etp = tp, the default) or whole on each rank (etp = 1)",
                            p.etp, p.tp));
  if (p.ep == 1) {
    if (p.etp > 0 && p.etp != p.tp)
      fail("etp", fmt::format("{} needs expert parallelism (ep = 1); set ep > 1 or drop etp", p.etp));
    return;
  }
  if (!m.moe()) fail("ep", fmt::format("{} needs a mixture-of-experts model (model.experts = 0); set ep = 1", p.ep));
  if (m.experts % p.ep != 0)
    fail("ep", fmt::format("{} does not divide experts = {}; use a divisor of the expert count", p.ep, m.experts));
  if (p.etp == 1 && p.mesh2d > 0) fail("etp", "1 needs 1D tensor parallelism (mesh2d = 0); drop etp or mesh2d");
  if (p.ep_spans_tp()) {
    const std::int64_t inner = std::int64_t{p.tp} * p.cp, stage = inner * p.dp;
    if (p.ep % inner != 0 || stage % p.ep != 0)
      fail("ep", fmt::format("{} cannot be carved out of tp x cp x dp = {} x {} x {} with etp = 1: the expert-parallel "
                             "ranks span tp, then cp, then dp (Megatron-core's expert layout), so ep must be a "
                             "multiple of tp x cp = {} dividing {}",
                             p.ep, p.tp, p.cp, p.dp, inner, stage));
  } else if (p.dp % p.ep != 0) {
    fail("ep", fmt::format("{} does not divide dp = {}; expert-parallel ranks are carved out of the data-parallel "
                           "ranks, so make dp a multiple of ep (or set etp = 1 to carve them out of tp x cp x dp)",
                           p.ep, p.dp));
  }
}

}  // namespace

namespace {
std::atomic<std::int64_t> g_layout_checks{0};
}  // namespace

std::int64_t layout_checks() { return g_layout_checks.load(); }

CheckedLayout check_layout(const ModelSpec& m, const ParallelSpec& p, int gpus, const std::string& gpus_from) {
  validate_parallel(p, m, gpus, gpus_from);
  return CheckedLayout(m, p);
}

void validate_parallel(const ParallelSpec& p, const ModelSpec& m, int gpus, const std::string& gpus_from) {
  ++g_layout_checks;
  check_ranges(p, gpus);
  check_products(p, m);
  check_options(p);
  check_sequence_parallel(p);
  check_mesh2d(p, m);
  check_heads(p, m);
  check_recompute_ops(p, m);
  check_world(p, gpus, gpus_from);
  check_sequence_split(p, m);
  check_pipeline(p, m);
  check_experts(p, m);
}

}  // namespace meshsim
