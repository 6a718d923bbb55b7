// Placement of a logical device mesh onto GPUs, and the process groups it implies.
//
// A mesh has named dimensions, row-major: "row=4,col=4" or "dp=16,pp=8,tp=8" (the last
// dimension varies fastest). Mesh rank r has coordinates coords(r). A placement maps
// every mesh rank to a GPU of the topology.
//
//   natural   mesh rank r -> GPU r (row-major fill: mesh row k of a 4x4 mesh lands on
//             node k when nodes hold 4 GPUs)
//   bunched   a block of the mesh per node: "bunched:2x2" puts a 2x2 block of a 4x4 mesh
//             on each 4-GPU node (the 2D-parallelism paper's arrangement); the block
//             covers the last two dimensions, blocks are assigned to nodes row-major
//   explicit  a list of GPU indices, one per mesh rank
//
//        natural (4 GPUs/node)        bunched:2x2
//        n0 n0 n0 n0                  n0 n0 n1 n1
//        n1 n1 n1 n1                  n0 n0 n1 n1
//        n2 n2 n2 n2                  n2 n2 n3 n3
//        n3 n3 n3 n3                  n2 n2 n3 n3
//
// Groups: groups_along(MeshAxis::col()) lists, for each fixed value of the other coordinates, the
// mesh ranks that differ only in "col" (for a row x col mesh these are the mesh rows).
//   Mesh m = parse_mesh("row=4,col=4", "--mesh");
//   Placement p = Placement::bunched(m, topo, {2, 2});
//   auto cols = p.groups_along(MeshAxis::row());   // 4 groups of 4 GPUs each: the mesh columns
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "topology/mesh_axis.h"
#include "topology/topology.h"

namespace meshsim {

struct Mesh {
  std::vector<std::pair<std::string, int>> dims;  // row-major, last fastest
  int size() const;
  int dim_index(const std::string& name) const;  // throws Error when absent
  std::vector<int> coords(int rank) const;
  int rank_of(const std::vector<int>& coords) const;
};

// "row=4,col=4"; throws Error naming `field` on bad syntax, duplicates or sizes < 1.
Mesh parse_mesh(const std::string& text, const std::string& field);

class Placement {
 public:
  static Placement natural(const Mesh& mesh, const Topology& topo);
  // block: sizes of the block over the trailing dimensions (one entry per trailing dim).
  // Throws Error unless blocks tile the mesh and each block fills exactly one node.
  static Placement bunched(const Mesh& mesh, const Topology& topo, const std::vector<int>& block);
  static Placement explicit_list(const Mesh& mesh, const Topology& topo, const std::vector<int>& gpus);
  // "natural", "bunched:2x2", "list:0,1,4,5,..." ; field names the flag/key for errors.
  static Placement parse(const std::string& spec, const Mesh& mesh, const Topology& topo, const std::string& field);

  // The same placement moved onto a subset of the cluster's GPUs: rank r goes to
  // gpus[gpu_of(r)] (a job of several on one fabric, laid out over its own GPUs as over a
  // cluster of its own). Every gpu_of(r) must index `gpus`.
  Placement on_gpus(const std::vector<int>& gpus) const;

  const Mesh& mesh() const { return mesh_; }
  const std::string& kind() const { return kind_; }  // "natural", "bunched:2x2", "list"
  int gpu_of(int mesh_rank) const { return gpus_[mesh_rank]; }
  const std::vector<int>& gpus() const { return gpus_; }
  // Groups of GPU indices, each ordered by the varying coordinate; groups ordered by
  // the remaining coordinates row-major. MeshAxis::all() gives one group with every mesh rank;
  // "a+b" the ranks that differ only in dimensions a and b (row-major over a, b). Throws
  // Error when a dimension is not the mesh's.
  std::vector<std::vector<int>> groups_along(const MeshAxis& axis) const;

 private:
  Mesh mesh_;
  std::string kind_;
  std::vector<int> gpus_;
};

}  // namespace meshsim
