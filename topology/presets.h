// Named, parameterized cluster presets and YAML topology files.
//
//   dgx-h100      8 H100 per node on NVSwitch (NVLink4, 450 GB/s per direction per GPU),
//                 8 ConnectX-7 NICs of 400 Gb/s (one per GPU, via PCIe switches);
//                 between nodes: rail-optimized (one leaf per rail) or fat-tree.
//   dgx-h200      dgx-h100 around H200 GPUs.
//   dgx-b200      8 B200 on NVSwitch (NVLink5, 900 GB/s per direction per GPU), 8 NDR NICs.
//   gb200-nvl72   racks of 72 GB200 GPUs, each rack one NVLink5 domain (one node), a 400 Gb/s
//                 NIC per GPU; racks on the rail or fat-tree fabric.
//   dgx-a100      8 A100 on NVSwitch (NVLink3, 300 GB/s), 8 HDR NICs of 200 Gb/s.
//   pcie-node     GPUs behind PCIe switches, NICs shared by the GPUs of a switch.
//   frontera-rtx  4 Quadro RTX 5000 per node on PCIe 3.0 x16 to the host bridge,
//                 one 56 Gb/s FDR NIC per node, nodes on a fat-tree.
//   fat-tree      nodes of GPUs (each GPU its own NIC), two or three switch levels,
//                 with an oversubscription ratio at the leaves.
//   switch        every GPU on one crossbar (the uncontended reference).
//   ring, torus2d, torus3d   GPUs as a ring / 2D / 3D torus of direct links.
//
// Parameters are key=value strings: make_preset("dgx-h100", {{"nodes","4"}}).
// `meshsim topology show` lists each preset's parameters and defaults.
//
// YAML (units written out):
//   name: two-nodes
//   devices:
//     - {name: gpu0, kind: gpu, node: 0}
//     - {name: sw, kind: switch}
//   links:
//     - {a: gpu0, b: sw, kind: nvlink, bandwidth: 450GB/s, efficiency: 0.8, latency: 0.5us}
//   # or a preset with parameters:
//   preset: dgx-h100
//   params: {nodes: 2, inter: fat-tree}
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "topology/topology.h"

namespace meshsim {

using PresetParams = std::map<std::string, std::string>;

struct PresetParamInfo {
  std::string name;
  std::string default_value;
  std::string help;
};

struct PresetInfo {
  std::string name;
  std::string summary;
  std::vector<PresetParamInfo> params;
  std::string gpu = "h100";  // the GPU preset (sim/compute_model.h) its devices are
  int gpu_sm = 90;           // that GPU's compute capability x 10 (Topology::gpu_sm)
};

// All presets, in a fixed order (feeds the CLI help).
const std::vector<PresetInfo>& preset_catalog();

// The most GPUs a preset builds (a 512k-GPU fat-tree builds and routes a collective of all of
// them at formula fidelity in seconds).
inline constexpr int kMaxTopologyGpus = 1 << 19;

// Builds and seals a preset. Unknown preset or parameter names, bad values and
// impossible combinations throw meshsim::Error naming the parameter and the fix.
Topology make_preset(const std::string& name, const PresetParams& params = {});

// Loads a topology YAML file (explicit devices/links, or preset + params).
Topology load_topology_yaml(const std::string& path);
Topology parse_topology_yaml(const std::string& text, const std::string& source_name);

// "PRESET", "PRESET:key=value,key=value" or a path to a .yaml/.yml file.
Topology resolve_topology(const std::string& spec);
// The same, built once per process for each spec (the eight most recently asked for are kept):
// what the scenario resolver (dp: auto) and the simulator share, so that one simulation
// builds its topology once. Thread-safe.
std::shared_ptr<const Topology> shared_topology(const std::string& spec);
// How many topologies this process has built (resolve_topology calls; tests count them).
std::int64_t topology_builds();

// Graphviz (dot) picture of the topology.
std::string to_graphviz(const Topology& topo);

}  // namespace meshsim
