#include "sim/collective_job.h"

#include <fmt/format.h>

#include <cmath>
#include <fstream>

#include "core/error.h"
#include "core/flag.h"
#include "core/units.h"
#include "sim/nccl_model.h"
#include "sim/scenario.h"
#include "topology/presets.h"

namespace meshsim {

namespace {

// Whitespace-separated p x p matrix of sizes (units allowed), one row per sender.
std::vector<std::vector<Bytes>> read_alltoall_sizes(const std::string& path, int p) {
  const std::string field = flag("alltoall-sizes");
  std::ifstream in(path);
  if (!in) throw Error(fmt::format("{}: cannot open '{}'", field, path));
  std::vector<std::vector<Bytes>> m(static_cast<std::size_t>(p));
  std::string tok;
  int n = 0;
  while (in >> tok) {
    if (n >= p * p) throw Error(fmt::format("{}: '{}' has more than {}x{} entries", field, path, p, p));
    m[static_cast<std::size_t>(n / p)].push_back(parse_bytes(tok, fmt::format("{}[{}][{}]", field, n / p, n % p)));
    ++n;
  }
  if (n != p * p)
    throw Error(fmt::format("{}: '{}' has {} entries; a {}-rank all-to-all needs {} ({} rows of {})", field, path, n, p,
                            p * p, p, p));
  return m;
}

// ranks (default: every GPU of the topology, or the mesh size), checked against the topology.
int resolve_ranks(const CollectiveJob& j, const Topology& topo) {
  int ranks = j.ranks;
  if (ranks == -1) ranks = j.mesh.empty() ? topo.num_gpus() : parse_mesh(j.mesh, flag("mesh")).size();
  if (ranks < 1)
    throw Error(fmt::format("{}: {} ranks cannot run a collective; use {} with N >= 1", flag("ranks"), ranks,
                            flag("ranks", "N")));
  if (ranks > topo.num_gpus())
    throw Error(fmt::format("{}: topology '{}' has only {} GPUs; use {} <= {} or a larger topology (e.g. {}:nodes=N)",
                            flag("ranks", std::to_string(ranks)), j.topology, topo.num_gpus(), flag("ranks"),
                            topo.num_gpus(), flag("topology", topo.name())));
  return ranks;
}

Mesh choose_mesh(const CollectiveJob& j, int ranks) {
  if (!j.mesh.empty()) {
    Mesh m = parse_mesh(j.mesh, flag("mesh"));
    if (ranks > 0 && m.size() != ranks)
      throw Error(fmt::format("{} has {} ranks but {} is {}; make them agree", flag("mesh", j.mesh), m.size(),
                              flag("ranks"), ranks));
    return m;
  }
  const bool two_d = j.group == "row" || j.group == "col" || j.placement.rfind("bunched", 0) == 0;
  if (two_d) {
    const int q = static_cast<int>(std::lround(std::sqrt(static_cast<double>(ranks))));
    if (q * q != ranks)
      throw Error(fmt::format("{} / {} need a 2D mesh, and {} ranks is not a square; give {}", flag("group", j.group),
                              flag("placement", j.placement), ranks, flag("mesh", "row=R,col=C")));
    return parse_mesh(fmt::format("row={},col={}", q, q), flag("mesh"));
  }
  return parse_mesh(fmt::format("rank={}", ranks), flag("ranks"));
}

std::vector<std::vector<int>> choose_groups(const Placement& pl, const std::string& group) {
  const Mesh& m = pl.mesh();
  if (group == "all") return {pl.gpus()};
  if (group == "row" || group == "col") {
    if (m.dims.size() != 2)
      throw Error(fmt::format("{}: needs a 2D mesh (got {} dimensions); give {}", flag("group", group), m.dims.size(),
                              flag("mesh", "row=R,col=C")));
    // Mesh rows vary along the second dimension; columns along the first.
    return pl.groups_along(MeshAxis(group == "row" ? m.dims[1].first : m.dims[0].first));
  }
  return pl.groups_along(MeshAxis::parse(group, flag("group")));
}

// The request for every size (bytes set per size), options checked in order.
CollectiveRequest make_request(const CollectiveJob& j, CollKind kind, const Placement& pl) {
  CollectiveRequest req;
  req.kind = kind;
  req.algorithm = j.algo;
  req.fidelity = collective_fidelity(j.fidelity, j.algo, flag("fidelity"));
  if (req.fidelity != Fidelity::Nccl && (!j.nccl_arch.empty() || j.nccl_channels != 0))
    throw Error(fmt::format("{}/{}: only apply to NCCL's model; add {}", flag("nccl-arch"), flag("nccl-channels"),
                            flag("algo", "nccl")));
  if (j.nccl_channels < 0 || j.nccl_channels > 64)
    throw Error(fmt::format("{}: {} is not a channel count NCCL runs; use 1..64 (or 0 = derived from the topology)",
                            flag("nccl-channels"), j.nccl_channels));
  req.nccl.sm = nccl_sm(j.nccl_arch.empty() ? default_gpu_for(j.topology) : j.nccl_arch, flag("nccl-arch"));
  req.nccl.channels = j.nccl_channels;
  req.groups = choose_groups(pl, j.group);
  req.root = j.root;
  req.chunks = j.chunks;
  if (j.chunks < 0) throw Error(flag("chunks") + ": must be >= 0 (0 = the algorithm's default)");
  if (!j.reduce_bw.empty()) req.gamma_ps = 1.0 / parse_bandwidth(j.reduce_bw, flag("reduce-bw")).bytes_per_ps();
  if (!j.alltoall_sizes.empty()) {
    if (kind != CollKind::AllToAll) throw Error(flag("alltoall-sizes") + ": only applies to alltoall");
    req.alltoall_bytes = read_alltoall_sizes(j.alltoall_sizes, static_cast<int>(req.groups.front().size()));
  }
  const bool small = req.groups.front().size() <= 16;
  req.record = req.fidelity != Fidelity::Nccl && (j.trace || (j.explain && small));
  if (req.fidelity == Fidelity::Nccl && j.trace)
    throw Error(fmt::format("{}: NCCL's model predicts a time, not steps; drop {} or use {}", flag("trace"),
                            flag("trace"), flag("fidelity", "flow")));
  return req;
}

}  // namespace

std::string ResolvedCollective::mesh_text() const {
  std::string text;
  for (const auto& [name, size] : mesh.dims) text += fmt::format("{}{}={}", text.empty() ? "" : ",", name, size);
  return text;
}

ResolvedCollective resolve_collective_job(const CollectiveJob& j) {
  ResolvedCollective c;
  const auto kind = parse_coll_kind(j.kind);
  if (!kind)
    throw Error(
        fmt::format("{}: unknown kind '{}'; use allreduce, allgather, reducescatter, broadcast, reduce, "
                    "alltoall or sendrecv",
                    spelling() == Spelling::Python ? "kind" : "collective", j.kind));
  c.kind = *kind;
  c.topology = shared_topology(j.topology);
  const int ranks = resolve_ranks(j, *c.topology);
  c.mesh = choose_mesh(j, ranks);
  c.placement = Placement::parse(j.placement, c.mesh, *c.topology, flag("placement"));
  c.request = make_request(j, *kind, c.placement);
  c.sizes = parse_bytes_sweep(j.bytes, flag("bytes"));
  return c;
}

}  // namespace meshsim
