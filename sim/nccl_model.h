// The `nccl` cost mode: NCCL's own published tuning model, which predicts the time of a
// collective for each (algorithm, protocol) pair and runs the fastest enabled one.
//
// Source: NVIDIA NCCL 2.20.3, src/graph/tuning.cc (ncclTopoTuneModel builds a latency
// and bandwidth table per collective, algorithm and protocol; ncclTopoGetAlgoTime turns
// one entry into a time) and src/graph/search.cc (the per-channel speeds its topology
// search tries). The constants below are facts taken from those files; the code is ours.
// docs/nccl-model.md states the model, every assumption and a table of predicted choices.
//
//   time(a, p) = latency(a, p) [x plateau] + bytes / (1000 * algbw(a, p) [x tree correction])
//                 (us, GB/s: bytes / (1000 * GB/s) is microseconds)
//   Ring latency = base(a,p) + (nsteps - interSteps) * max(intraHop, netOverhead) + interSteps * netHop
//   Tree latency = base(a,p) + 2 * ((ranks/nodes - 1) * intraHop + floor(log2 nodes) * netHop)
//   busbw       = channels * bw per channel, then per protocol factors and per-channel caps
//   algbw       = busbw * ranks/nsteps (Ring) or busbw / 2 (Tree)
//
// Channels and their speed stand for NCCL's topology search (ring graph): the speed from
// NCCL's list that maximizes channels x speed under the GPU's NVLink/PCIe bandwidth and,
// across nodes, its NIC bandwidth (NCCL's own view of each link, see nccl_link_bw).
//
//   NcclShape shape = nccl_shape(topo, router, gpus);          // ranks, nodes, link kinds
//   NcclPrediction p = nccl_predict(CollKind::AllReduce, MiB(64), shape, {.sm = 90});
//   p.chosen().algo, p.chosen().proto, p.time, nccl_table_text(p)
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "schedule/collective.h"
#include "topology/topology.h"

namespace meshsim {

enum class NcclAlgo { Tree, Ring, Nvls, NvlsTree };
enum class NcclProto { LL, LL128, Simple };
using NcclHw = HopKind;  // NCCL's three hop kinds for latencies (schedule/protocol.h)
const char* to_string(NcclAlgo a);
const char* to_string(NcclProto p);

// What NCCL sees of one group on the topology (bandwidths in GB/s, NCCL's view).
struct NcclShape {
  int ranks = 0;
  int nodes = 0;
  NcclHw intra = NcclHw::NvLink;  // how GPUs of one node reach each other
  double intra_path_GBps = 0;     // one GPU-to-GPU path inside a node (0: one GPU per node)
  double intra_total_GBps = 0;    // all a GPU can push into its node (sum of its NVLinks)
  double nic_GBps = 0;            // one NIC (multi-node only)
  int nics_per_node = 0;
  double nic_path_GBps = 0;  // GPU -> NIC -> fabric path bottleneck
  // Every GPU of the group hangs off an NVSwitch that reduces (NVLink SHARP;
  // Device::reduce_efficiency > 0), one switch per node shared by the node's group GPUs: what
  // NCCL's NVLS (one node) and NVLS-Tree (several nodes) algorithms need.
  bool nvls_switch = false;
};

// Settings a user may change. sm: compute capability x10 (70 Volta, 80 Ampere, 90 Hopper, 100
// Blackwell (NCCL 2.28.3's rows); others use the Volta rows and disable LL128, as NCCL does). channels: 0 = derived.
struct NcclConfig {
  int sm = 90;
  int channels = 0;
};

// The graph NCCL's search would build: channels x per-channel speed.
struct NcclGraph {
  int channels = 0;
  double bw_GBps = 0;        // per channel (bwIntra)
  double bw_inter_GBps = 0;  // NVLS graph: the per-channel bwInter its second search pass raises
  std::string how;           // one line on how it was derived
};

struct NcclCandidate {
  NcclAlgo algo = NcclAlgo::Ring;
  NcclProto proto = NcclProto::Simple;
  bool enabled = false;
  std::string disabled_why;
  double latency_us = 0;  // after the ring plateau factor
  double busbw_GBps = 0;  // model bus bandwidth
  double algbw_GBps = 0;  // after the tree correction factor
  double time_us = 0;
  std::vector<std::string> steps;  // the formula with numbers, one line per refinement
};

struct NcclPrediction {
  CollKind kind = CollKind::AllReduce;
  Bytes bytes = 0;
  NcclShape shape;
  NcclConfig config;
  NcclGraph graph;                        // the ring graph (Tree and Ring)
  NcclGraph nvls_graph;                   // the NVLS graph (channels 0: no NVLS)
  std::vector<NcclCandidate> candidates;  // Tree, Ring, NVLS; LL / LL128 / Simple each
  int chosen_index = -1;
  Time time;  // the chosen candidate's time
  const NcclCandidate& chosen() const { return candidates[static_cast<std::size_t>(chosen_index)]; }
  std::string choice_name() const;  // "Ring/LL128"
};

// NCCL's view of one link's bandwidth per direction: NVLink counted in lanes at NCCL's per-lane
// figure for the arch (50 GB/s lanes at 40.1 on sm100; 25 GB/s lanes at 20.6 sm90, 20
// sm70/sm80, 18 sm60, 12 sm86),
// PCIe at 3/4 of its line rate (NCCL: 12 GB/s for Gen3 x16, 24 Gen4), NICs at line rate.
double nccl_link_bw(const LinkSpec& link, int sm);

// Reads the group's shape off the topology. Throws Error for fewer than 2 GPUs.
NcclShape nccl_shape(const Topology& topo, Router& router, const std::vector<int>& gpus, int sm);
NcclGraph nccl_graph(const NcclShape& shape, const NcclConfig& config);
// NCCL's NVLS graph (search.cc, pattern NVLS; NCCL 2.28): one channel per GPU of the node,
// pulling from the switch; the speed s is the fastest of the arch's intra list (sm90, sm100) with
// (GPUs + 1) x s within a GPU's NVLink bandwidth (each GPU's switch link carries every
// channel once and its own channel twice); the second pass raises bwInter to the fastest
// speed below 2s. Zero channels where NVLS cannot run (no reducing switch, more than one
// node, sm < 90, fewer than 2 GPUs).
NcclGraph nccl_nvls_graph(const NcclShape& shape, const NcclConfig& config);

// Every candidate, NCCL's choice (lowest time among enabled; ties to Tree, then the
// lower protocol, as NCCL's loop order does) and its time. Throws Error naming the fix
// for kinds the model does not cover (alltoall, sendrecv), 0 bytes, or < 2 ranks.
NcclPrediction nccl_predict(CollKind kind, Bytes bytes, const NcclShape& shape, const NcclConfig& config);

// The candidate table (why NCCL picks what it picks) and the formulas with numbers.
std::string nccl_table_text(const NcclPrediction& p);
std::string nccl_explain_text(const NcclPrediction& p);

// sm of a compute preset name (h100/h200 90, b200/gb200 100, a100 80, v100 70, rtx5000 75); "sm90" or
// "90" parse too. Throws Error naming `field` for anything else.
int nccl_sm(const std::string& text, const std::string& field);

}  // namespace meshsim
