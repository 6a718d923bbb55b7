// direct: send/recv of the whole buffer from rank 0 to rank 1 in one step (registry name
// "direct", kind sendrecv). In a group of more than 2 ranks the others have no steps.
//
//   p = 4:   step 0:  r0 --[n bytes]--> r1        r2, r3 idle
//
// Cost: alpha + n*beta (exact: one message alone on its links).
#include <fmt/format.h>

#include "core/error.h"
#include "schedule/collectives/common.h"

namespace meshsim::collectives {
namespace {

class DirectProgram final : public StepProgram {
 public:
  explicit DirectProgram(const CollectiveSpec& s) : p_(s.ranks), n_(s.bytes) {}
  int ranks() const override { return p_; }
  int num_steps(int rank) const override { return rank <= 1 ? 1 : 0; }
  void step(int rank, int, Step& out) const override {
    if (rank == 0)
      out.sends.push_back(Transfer{1, 0, n_, 0});
    else
      out.recvs.push_back(Transfer{0, 0, n_, 0});
    out.op = RecvOp::Copy;
  }

 private:
  int p_;
  Bytes n_;
};

const std::vector<CollKind> kKinds = {CollKind::SendRecv};

std::optional<std::string> unsupported(const CollectiveSpec& s) {
  if (auto k = kind_reason("direct", kKinds, s.kind)) return k;
  if (s.ranks < 2) return fmt::format("send/recv needs at least 2 ranks (got {}); add a receiver", s.ranks);
  return std::nullopt;
}

double cost(const CollectiveSpec& s, const CostParams& c) {
  validate_spec(s);
  return c.alpha_ps + static_cast<double>(s.bytes) * c.beta_ps;
}

std::string explain(const CollectiveSpec& s, const CostParams& c) {
  return explain_text(fmt::format("direct sendrecv (n={}B)", s.bytes), "alpha + n*beta",
                      fmt::format("{} + {}B/{}", fmt_alpha(c.alpha_ps), s.bytes, fmt_rate(c.beta_ps)), cost(s, c));
}

}  // namespace

Algorithm make_direct() {
  return basic_algorithm<DirectProgram>("direct", "one message from rank 0 to rank 1", kKinds, cost, explain,
                                        unsupported);
}

}  // namespace meshsim::collectives
