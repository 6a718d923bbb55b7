// One collective as a user asks for it, from either front end (meshsim collective's flags,
// Python's collective() keyword arguments), resolved once into what run_collective takes:
// the topology, the mesh placed on it, the groups, the request and the sizes to run.
//
//   CollectiveJob job;  job.kind = "allreduce";  job.bytes = "1KiB:1GiB";  job.algo = "ring";
//   const ResolvedCollective c = resolve_collective_job(job);
//   for (Bytes b : c.sizes) { c.request.bytes = b; run_collective(*c.topology, router, registry, c.request); }
//
// Errors name the field as the front end spells it (core/flag.h: --mesh, or mesh=).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "sim/collective_sim.h"
#include "topology/placement.h"

namespace meshsim {

struct CollectiveJob {
  std::string kind;            // allreduce, allgather, reducescatter, broadcast, reduce, alltoall, sendrecv
  std::string bytes = "1GiB";  // a size or a sweep MIN:MAX[:FACTOR]
  std::string topology = "dgx-h100";
  int ranks = -1;    // -1: every GPU of the topology (or the mesh's size)
  std::string mesh;  // "row=4,col=4"; empty: 1D, or square for row/col groups
  std::string placement = "natural";
  std::string group = "all";  // all, row, col or a mesh dimension: every group runs at once
  std::string algo = "auto";
  std::string fidelity;   // empty: flow, or nccl with algo nccl
  std::string nccl_arch;  // empty: the topology preset's GPU
  int nccl_channels = 0;  // 0: derived from the topology
  int root = 0;
  int chunks = 0;              // 0: the algorithm's default
  std::string reduce_bw;       // empty: reductions fused with the transfers
  std::string alltoall_sizes;  // a file with a p x p matrix of per-destination sizes
  bool explain = false;        // the steps will be explained: groups of up to 16 keep their transfers
  bool trace = false;          // a trace will be written: every transfer is kept
};

struct ResolvedCollective {
  CollKind kind = CollKind::AllReduce;
  std::shared_ptr<const Topology> topology;
  Mesh mesh;
  Placement placement;
  CollectiveRequest request;  // every field but bytes, which is set per size
  std::vector<Bytes> sizes;
  std::string mesh_text() const;  // "row=4,col=4"
};

// Checks in order: kind, topology, ranks (against the topology and the mesh), mesh, placement,
// algorithm and fidelity, NCCL's options, groups, root and chunks, reduce_bw, all-to-all sizes,
// the sizes.
ResolvedCollective resolve_collective_job(const CollectiveJob& job);

}  // namespace meshsim
