#include "backend/cuda/sdpa_graph.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "core/error.h"
#include "kernels/bf16.h"

namespace meshsim::cuda::sdpa {

double Shape::attn_scale() const {
  return scale != 0 ? scale : 1.0 / std::sqrt(static_cast<double>(head_dim > 0 ? head_dim : 1));
}

std::string unsupported(const Shape& s) {
  auto msg = [](const std::string& field, const std::string& why) { return "sdpa: " + field + " " + why; };
  if (s.batch <= 0) return msg("batch", "must be positive");
  if (s.heads_q <= 0) return msg("heads_q", "must be positive");
  if (s.heads_kv <= 0) return msg("heads_kv", "must be positive");
  if (s.seq_q <= 0) return msg("seq_q", "must be positive");
  if (s.seq_kv <= 0) return msg("seq_kv", "must be positive");
  if (s.heads_q % s.heads_kv != 0)
    return msg("heads_q", std::to_string(s.heads_q) + " is not a multiple of heads_kv " + std::to_string(s.heads_kv) +
                              " (each key/value head serves a whole group of query heads)");
  if (s.head_dim <= 0 || s.head_dim % 8 != 0 || s.head_dim > 256)
    return msg("head_dim", std::to_string(s.head_dim) +
                               " is outside cuDNN's fused attention (a multiple of 8, at most 256); meshsim's own "
                               "attention kernel runs it");
  return "";
}

const char* to_string(DataType t) {
  switch (t) {
    case DataType::Float:
      return "float";
    case DataType::Bf16:
      return "bf16";
    case DataType::Int32:
      return "int32";
    case DataType::Bool:
      return "bool";
  }
  return "?";
}

std::int64_t Tensor::elements() const {
  std::int64_t span = 1;
  for (std::size_t k = 0; k < dims.size(); ++k) span += (dims[k] - 1) * strides[k];
  return span;
}

const Tensor& Graph::tensor(std::int64_t uid) const {
  for (const Tensor& t : tensors)
    if (t.uid == uid) return t;
  throw Error("sdpa: graph has no tensor with uid " + std::to_string(uid));
}

std::vector<std::int64_t> Graph::bound_uids() const {
  std::vector<std::int64_t> out;
  for (const Tensor& t : tensors)
    if (!t.is_virtual && !t.by_value) out.push_back(t.uid);
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

using Dims = std::vector<std::int64_t>;

Dims contiguous(const Dims& d) { return {d[1] * d[2] * d[3], d[2] * d[3], d[3], 1}; }
// The same memory as `d` contiguous, seen with the last two axes swapped.
Dims transposed_strides(const Dims& d) { return {d[1] * d[2] * d[3], d[2] * d[3], 1, d[3]}; }

class Builder {
 public:
  explicit Builder(const Shape& s, bool backward) {
    g_.shape = s;
    g_.backward = backward;
  }
  std::int64_t bound(std::int64_t uid, const std::string& name, DataType t, Dims dims, Dims strides) {
    g_.tensors.push_back({uid, name, t, std::move(dims), std::move(strides), false, false, 0});
    return uid;
  }
  std::int64_t virt(const std::string& name, DataType t, const Dims& dims) {
    return virt(name, t, dims, contiguous(dims));
  }
  std::int64_t virt(const std::string& name, DataType t, const Dims& dims, const Dims& strides) {
    g_.tensors.push_back({next_, name, t, dims, strides, true, false, 0});
    return next_++;
  }
  std::int64_t scalar(const std::string& name, double v) {
    g_.tensors.push_back({next_, name, DataType::Float, {1, 1, 1, 1}, {1, 1, 1, 1}, false, true, v});
    return next_++;
  }
  void matmul(const std::string& name, std::int64_t a, std::int64_t b, std::int64_t out) {
    add(OpKind::Matmul, name, {a, b}, out);
  }
  void pointwise(const std::string& name, Pointwise mode, std::vector<std::int64_t> in, std::int64_t out,
                 DataType compute = DataType::Float, int axis = -1) {
    Op& op = add(OpKind::Pointwise, name, std::move(in), out);
    op.pw = mode;
    op.compute = compute;
    op.axis = axis;
  }
  void reduction(const std::string& name, Reduce mode, std::int64_t in, std::int64_t out) {
    add(OpKind::Reduction, name, {in}, out).reduce = mode;
  }
  void reshape(const std::string& name, std::int64_t in, std::int64_t out) { add(OpKind::Reshape, name, {in}, out); }
  // x with the keys after each query's position replaced by -inf (top-left causal mask).
  std::int64_t causal_mask(std::int64_t x, const Dims& dims) {
    const std::int64_t row = virt("row_index", DataType::Int32, dims);
    pointwise("gen_row_index", Pointwise::GenIndex, {x}, row, DataType::Float, 2);
    const std::int64_t col = virt("col_index", DataType::Int32, dims);
    pointwise("gen_col_index", Pointwise::GenIndex, {x}, col, DataType::Float, 3);
    const std::int64_t keep = virt("row_ge_col", DataType::Bool, dims);
    pointwise("row_ge_col", Pointwise::CmpGe, {row, col}, keep, DataType::Bool);
    const std::int64_t out = virt("S_masked", DataType::Float, dims);
    pointwise("causal_select", Pointwise::BinarySelect,
              {x, scalar("minus_inf", -std::numeric_limits<double>::infinity()), keep}, out);
    return out;
  }
  Graph take() { return std::move(g_); }

 private:
  Op& add(OpKind kind, const std::string& name, std::vector<std::int64_t> in, std::int64_t out) {
    Op& op = g_.ops.emplace_back();
    op.kind = kind;
    op.name = name;
    op.in = std::move(in);
    op.out = out;
    return op;
  }

  Graph g_;
  std::int64_t next_ = 100;
};

void check(const Shape& s) {
  const std::string why = unsupported(s);
  if (!why.empty()) throw Error(why);
}

}  // namespace

Graph forward_graph(const Shape& s) {
  check(s);
  Builder g(s, false);
  const std::int64_t b = s.batch, hq = s.heads_q, hk = s.heads_kv, sq = s.seq_q, skv = s.seq_kv, d = s.head_dim;
  const Dims q{b, hq, sq, d}, kv{b, hk, skv, d}, kt{b, hk, d, skv}, scores{b, hq, sq, skv}, rows{b, hq, sq, 1};
  g.bound(kQ, "Q", DataType::Bf16, q, contiguous(q));
  g.bound(kK, "K^T", DataType::Bf16, kt, transposed_strides(kv));
  g.bound(kV, "V", DataType::Bf16, kv, contiguous(kv));
  g.bound(kO, "O", DataType::Bf16, q, contiguous(q));
  g.bound(kStats, "Stats", DataType::Float, rows, contiguous(rows));

  const std::int64_t s0 = g.virt("S", DataType::Float, scores);
  g.matmul("bmm1", kQ, kK, s0);
  std::int64_t sc = g.virt("S_scaled", DataType::Float, scores);
  g.pointwise("attn_scale", Pointwise::Mul, {s0, g.scalar("scale", s.attn_scale())}, sc);
  if (s.causal) sc = g.causal_mask(sc, scores);
  const std::int64_t m = g.virt("M", DataType::Float, rows);
  g.reduction("row_max", Reduce::Max, sc, m);
  const std::int64_t shifted = g.virt("S_minus_M", DataType::Float, scores);
  g.pointwise("sub_max", Pointwise::Sub, {sc, m}, shifted);
  const std::int64_t e = g.virt("E", DataType::Float, scores);
  g.pointwise("exp", Pointwise::Exp, {shifted}, e);
  const std::int64_t z = g.virt("Z", DataType::Float, rows);
  g.reduction("row_sum", Reduce::Add, e, z);
  const std::int64_t logz = g.virt("log_Z", DataType::Float, rows);
  g.pointwise("log", Pointwise::Log, {z}, logz);
  g.pointwise("stats", Pointwise::Add, {m, logz}, kStats);
  // P is stored at the operands' width: the second matmul takes bf16 on both sides.
  const std::int64_t p = g.virt("P", DataType::Bf16, scores);
  g.pointwise("normalize", Pointwise::Div, {e, z}, p);
  g.matmul("bmm2", p, kV, kO);
  return g.take();
}

bool backward_uses_dq_accum(const Shape& s) {
  const auto round64 = [](std::int64_t x) { return (x + 63) / 64 * 64; };
  const double dp_bytes = 2.0 * static_cast<double>(s.batch) * static_cast<double>(s.heads_q) *
                          static_cast<double>(round64(s.seq_q)) * static_cast<double>(round64(s.seq_kv));
  return dp_bytes > 256.0 * 1024 * 1024;
}

Graph backward_graph(const Shape& s) { return backward_graph(s, backward_uses_dq_accum(s)); }

Graph backward_graph(const Shape& s, bool dq_accum) {
  check(s);
  Builder g(s, true);
  const std::int64_t b = s.batch, hq = s.heads_q, hk = s.heads_kv, sq = s.seq_q, skv = s.seq_kv, d = s.head_dim;
  const Dims q{b, hq, sq, d}, kv{b, hk, skv, d}, kt{b, hk, d, skv}, scores{b, hq, sq, skv}, rows{b, hq, sq, 1};
  const Dims scores_t{b, hq, skv, sq}, kv_full{b, hq, skv, d};
  const Dims scores_t_strides{hq * sq * skv, sq * skv, 1, skv};  // P^T, dS^T: the scores' memory, transposed
  g.bound(kQ, "Q", DataType::Bf16, q, contiguous(q));
  g.bound(kK, "K^T", DataType::Bf16, kt, transposed_strides(kv));
  g.bound(kV, "V^T", DataType::Bf16, kt, transposed_strides(kv));
  g.bound(kO, "O", DataType::Bf16, q, contiguous(q));
  g.bound(kStats, "Stats", DataType::Float, rows, contiguous(rows));
  g.bound(kdO, "dO", DataType::Bf16, q, contiguous(q));
  g.bound(kdQ, "dQ", DataType::Bf16, q, contiguous(q));
  g.bound(kdK, "dK", DataType::Bf16, kv, contiguous(kv));
  g.bound(kdV, "dV", DataType::Bf16, kv, contiguous(kv));
  g.bound(kSoftmaxSum, "softmax_sum", DataType::Float, rows, contiguous(rows));
  if (dq_accum) g.bound(kDqAccum, "dq_accum", DataType::Float, q, contiguous(q));

  // D = rowsum(dO * O), kept in the scratch tensor.
  const std::int64_t dodo = g.virt("dO_times_O", DataType::Float, q);
  g.pointwise("mul_dO_O", Pointwise::Mul, {kdO, kO}, dodo);
  const std::int64_t dsum = g.virt("rowsum_dO_O", DataType::Float, rows);
  g.reduction("reduce_dO_O", Reduce::Add, dodo, dsum);
  g.pointwise("softmax_sum", Pointwise::Mul, {dsum, g.scalar("one", 1.0)}, kSoftmaxSum);

  // P recomputed from the forward's statistics.
  const std::int64_t s0 = g.virt("S", DataType::Float, scores);
  g.matmul("matmul_Q_KT", kQ, kK, s0);
  const std::int64_t sc = g.virt("S_scaled", DataType::Float, scores);
  g.pointwise("attn_scale", Pointwise::Mul, {s0, g.scalar("scale", s.attn_scale())}, sc);
  std::int64_t shifted = g.virt("S_minus_stats", DataType::Float, scores);
  g.pointwise("sub_stats", Pointwise::Sub, {sc, kStats}, shifted);
  if (s.causal) shifted = g.causal_mask(shifted, scores);
  const std::int64_t p = g.virt("P", DataType::Float, scores);
  g.pointwise("exp", Pointwise::Exp, {shifted}, p);

  // dV = P^T dO (per query head, then summed over each group).
  const std::int64_t pt = g.virt("P^T", DataType::Bf16, scores_t, scores_t_strides);
  g.reshape("transpose_P", p, pt);
  auto grouped = [&](const std::string& name, std::int64_t a, std::int64_t bm, std::int64_t out) {
    if (hq == hk) return g.matmul(name, a, bm, out);
    const std::int64_t full = g.virt(name + "_per_query_head", DataType::Bf16, kv_full);
    g.matmul(name, a, bm, full);
    g.reduction(name + "_group_sum", Reduce::Add, full, out);
  };
  grouped("matmul_PT_dO", pt, kdO, kdV);

  // dS = scale * P * (dO V^T - D).
  const std::int64_t dp = g.virt("dP", DataType::Float, scores);
  g.matmul("matmul_dO_VT", kdO, kV, dp);
  const std::int64_t dp_minus = g.virt("dP_minus_D", DataType::Float, scores);
  g.pointwise("sub_softmax_sum", Pointwise::Sub, {dp, kSoftmaxSum}, dp_minus);
  const std::int64_t ds_unscaled = g.virt("P_dP_minus_D", DataType::Float, scores);
  g.pointwise("mul_P", Pointwise::Mul, {dp_minus, p}, ds_unscaled);
  const std::int64_t ds = g.virt("dS", DataType::Float, scores);
  g.pointwise("dS_scale", Pointwise::Mul, {ds_unscaled, g.scalar("scale", s.attn_scale())}, ds);

  // dK = dS^T Q.
  const std::int64_t dst = g.virt("dS^T", DataType::Bf16, scores_t, scores_t_strides);
  g.reshape("transpose_dS", ds, dst);
  grouped("matmul_dST_Q", dst, kQ, kdK);

  // dQ = dS K, K read back from its K^T description.
  const std::int64_t k = g.virt("K", DataType::Bf16, kv, contiguous(kv));
  g.reshape("transpose_KT", kK, k);
  if (dq_accum) {
    g.matmul("matmul_dS_K", ds, k, kDqAccum);
    g.pointwise("dQ_from_accum", Pointwise::Identity, {kDqAccum}, kdQ);
  } else {
    g.matmul("matmul_dS_K", ds, k, kdQ);
  }
  return g.take();
}

// ---- the CPU interpreter ----

namespace {

struct Storage {
  const Tensor* t = nullptr;
  float* data = nullptr;
  float at(const std::int64_t* i) const { return ref(i); }
  float& ref(const std::int64_t* i) const {
    return data[i[0] * t->strides[0] + i[1] * t->strides[1] + i[2] * t->strides[2] + i[3] * t->strides[3]];
  }
  void put(const std::int64_t* i, float v) const { ref(i) = t->type == DataType::Bf16 ? round_to_bf16(v) : v; }
};

// Calls f(index) for every index of `dims` in row-major order.
template <class F>
void for_each_index(const Dims& dims, F&& f) {
  std::int64_t i[4];
  for (i[0] = 0; i[0] < dims[0]; ++i[0])
    for (i[1] = 0; i[1] < dims[1]; ++i[1])
      for (i[2] = 0; i[2] < dims[2]; ++i[2])
        for (i[3] = 0; i[3] < dims[3]; ++i[3]) f(i);
}

// The index of an operand of dims `in` read for output index `o`: a dimension of 1
// broadcasts; a batch dimension g times smaller is shared by g consecutive output indices
// (grouped-query heads).
void source_index(const Dims& in, const Dims& out, const std::int64_t* o, std::int64_t* i, const std::string& op) {
  for (int k = 0; k < 4; ++k) {
    if (in[k] == out[k]) {
      i[k] = o[k];
    } else if (in[k] == 1) {
      i[k] = 0;
    } else if (in[k] < out[k] && out[k] % in[k] == 0 && k < 2) {
      i[k] = o[k] / (out[k] / in[k]);
    } else {
      throw Error("sdpa: op " + op + ": operand dimension " + std::to_string(k) + " is " + std::to_string(in[k]) +
                  ", which does not broadcast to " + std::to_string(out[k]));
    }
  }
}

}  // namespace

void run_graph_cpu(const Graph& g, std::map<std::int64_t, std::vector<float>>& buffers) {
  std::map<std::int64_t, std::vector<float>> local;  // virtual tensors and scalars
  std::map<std::int64_t, Storage> st;
  for (const Tensor& t : g.tensors) {
    float* data = nullptr;
    if (t.is_virtual || t.by_value) {
      auto& v = local[t.uid];
      v.assign(static_cast<std::size_t>(t.elements()), static_cast<float>(t.value));
      data = v.data();
    } else {
      auto it = buffers.find(t.uid);
      if (it == buffers.end())
        throw Error("sdpa: no buffer bound for " + t.name + " (uid " + std::to_string(t.uid) + ")");
      if (static_cast<std::int64_t>(it->second.size()) < t.elements())
        throw Error("sdpa: buffer for " + t.name + " holds " + std::to_string(it->second.size()) + " floats, needs " +
                    std::to_string(t.elements()));
      data = it->second.data();
    }
    st[t.uid] = {&t, data};
  }
  for (const Op& op : g.ops) {
    const Storage& out = st.at(op.out);
    const Dims& od = out.t->dims;
    std::vector<const Storage*> in;
    for (std::int64_t u : op.in) in.push_back(&st.at(u));
    std::int64_t i[4], j[4];
    switch (op.kind) {
      case OpKind::Matmul: {
        const Storage &a = *in[0], &b = *in[1];
        const std::int64_t kdim = a.t->dims[3];
        if (b.t->dims[2] != kdim || a.t->dims[2] != od[2] || b.t->dims[3] != od[3])
          throw Error("sdpa: op " + op.name + ": matmul dimensions do not agree");
        for_each_index(od, [&](const std::int64_t* o) {
          source_index({a.t->dims[0], a.t->dims[1], 1, 1}, {od[0], od[1], 1, 1}, o, i, op.name);
          source_index({b.t->dims[0], b.t->dims[1], 1, 1}, {od[0], od[1], 1, 1}, o, j, op.name);
          float acc = 0;
          i[2] = o[2];
          j[3] = o[3];
          for (std::int64_t k = 0; k < kdim; ++k) {
            i[3] = k;
            j[2] = k;
            acc += a.at(i) * b.at(j);
          }
          out.put(o, acc);
        });
        break;
      }
      case OpKind::Pointwise:
        for_each_index(od, [&](const std::int64_t* o) {
          auto arg = [&](std::size_t n) {
            std::int64_t x[4];
            source_index(in.at(n)->t->dims, od, o, x, op.name);
            return in[n]->at(x);
          };
          float y = 0;
          switch (op.pw) {
            case Pointwise::Add:
              y = arg(0) + arg(1);
              break;
            case Pointwise::Sub:
              y = arg(0) - arg(1);
              break;
            case Pointwise::Mul:
              y = arg(0) * arg(1);
              break;
            case Pointwise::Div:
              y = arg(0) / arg(1);
              break;
            case Pointwise::Exp:
              y = std::exp(arg(0));
              break;
            case Pointwise::Log:
              y = std::log(arg(0));
              break;
            case Pointwise::Identity:
              y = arg(0);
              break;
            case Pointwise::GenIndex:
              y = static_cast<float>(o[op.axis]);
              break;
            case Pointwise::CmpGe:
              y = arg(0) >= arg(1) ? 1.0f : 0.0f;
              break;
            case Pointwise::BinarySelect:
              y = arg(2) != 0 ? arg(0) : arg(1);
              break;
          }
          out.put(o, y);
        });
        break;
      case OpKind::Reduction: {
        const Storage& x = *in[0];
        const Dims& xd = x.t->dims;
        const float init = op.reduce == Reduce::Max ? -std::numeric_limits<float>::infinity() : 0.0f;
        for_each_index(od, [&](const std::int64_t* o) { out.ref(o) = init; });
        for_each_index(xd, [&](const std::int64_t* s) {
          for (int k = 0; k < 4; ++k) {
            if (xd[k] % od[k] != 0) throw Error("sdpa: op " + op.name + ": reduction dimensions do not divide");
            j[k] = s[k] / (xd[k] / od[k]);
          }
          float& acc = out.ref(j);
          acc = op.reduce == Reduce::Max ? std::max(acc, x.at(s)) : acc + x.at(s);
        });
        for_each_index(od, [&](const std::int64_t* o) { out.put(o, out.at(o)); });
        break;
      }
      case OpKind::Reshape: {
        // A view of the same memory with other dims and strides: element at address a of the
        // output is element at address a of the input.
        const Storage& x = *in[0];
        if (x.t->elements() != out.t->elements())
          throw Error("sdpa: op " + op.name + ": reshape changes the storage span");
        for (std::int64_t a = 0; a < out.t->elements(); ++a)
          out.data[a] = out.t->type == DataType::Bf16 ? round_to_bf16(x.data[a]) : x.data[a];
        break;
      }
    }
  }
}

std::string describe(const Graph& g) {
  std::ostringstream os;
  auto name = [&](std::int64_t uid) { return g.tensor(uid).name; };
  auto dims = [&](const Tensor& t) {
    std::string s = "[";
    for (std::size_t k = 0; k < t.dims.size(); ++k) s += (k ? "," : "") + std::to_string(t.dims[k]);
    return s + "]";
  };
  static const char* pw[] = {"add", "sub", "mul", "div", "exp", "log", "identity", "gen_index", "cmp_ge", "select"};
  for (const Op& op : g.ops) {
    os << op.name << ": ";
    switch (op.kind) {
      case OpKind::Matmul:
        os << "matmul";
        break;
      case OpKind::Pointwise:
        os << pw[static_cast<int>(op.pw)];
        if (op.pw == Pointwise::GenIndex) os << " axis " << op.axis;
        break;
      case OpKind::Reduction:
        os << (op.reduce == Reduce::Max ? "reduce_max" : "reduce_add");
        break;
      case OpKind::Reshape:
        os << "reshape";
        break;
    }
    os << "(";
    for (std::size_t k = 0; k < op.in.size(); ++k) os << (k ? ", " : "") << name(op.in[k]);
    const Tensor& t = g.tensor(op.out);
    os << ") -> " << t.name << " " << dims(t) << " " << to_string(t.type) << (t.is_virtual ? " virtual" : "") << "\n";
  }
  return os.str();
}

}  // namespace meshsim::cuda::sdpa
