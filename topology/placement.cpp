// Meshes, placements of mesh ranks onto GPUs, and the groups they imply.
#include "topology/placement.h"

#include <fmt/format.h>

#include <algorithm>
#include <sstream>

#include "core/error.h"

namespace meshsim {

namespace {

std::string mesh_text(const Mesh& m) {
  std::string s;
  for (const auto& [name, size] : m.dims) s += fmt::format("{}{}={}", s.empty() ? "" : ",", name, size);
  return s;
}

std::string topo_name(const Topology& t) { return t.name().empty() ? std::string("unnamed") : t.name(); }

void check_fits(const Mesh& mesh, const Topology& topo, const std::string& what) {
  if (mesh.size() <= topo.num_gpus()) return;
  std::string hint = "use a larger topology";
  if (const int gpn = topo.gpus_per_node(); gpn > 0)
    hint += fmt::format(" (e.g. nodes={})", (mesh.size() + gpn - 1) / gpn);
  throw Error(fmt::format("{}: mesh {} has {} ranks but topology '{}' has {} GPUs; {} or a smaller mesh", what,
                          mesh_text(mesh), mesh.size(), topo_name(topo), topo.num_gpus(), hint));
}

int parse_int(const std::string& s, const std::string& field, const std::string& what) {
  const std::optional<int> v = meshsim::parse_int(s);
  if (!v) throw Error(fmt::format("{}: '{}' is not an integer {}", field, s, what));
  return *v;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep)) out.push_back(item);
  if (!s.empty() && s.back() == sep) out.emplace_back();
  return out;
}

}  // namespace

int Mesh::size() const {
  int n = 1;
  for (const auto& d : dims) n *= d.second;
  return n;
}

int Mesh::dim_index(const std::string& name) const {
  std::string list;
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (dims[i].first == name) return static_cast<int>(i);
    list += (list.empty() ? "" : ", ") + dims[i].first;
  }
  throw Error(fmt::format("mesh {} has no dimension '{}'; dimensions are {} (or all)", mesh_text(*this), name, list));
}

std::vector<int> Mesh::coords(int rank) const {
  MESHSIM_ASSERT(rank >= 0 && rank < size());
  std::vector<int> c(dims.size());
  for (int i = static_cast<int>(dims.size()) - 1; i >= 0; --i) {
    c[i] = rank % dims[i].second;
    rank /= dims[i].second;
  }
  return c;
}

int Mesh::rank_of(const std::vector<int>& coords) const {
  MESHSIM_ASSERT(coords.size() == dims.size());
  int r = 0;
  for (std::size_t i = 0; i < dims.size(); ++i) {
    MESHSIM_ASSERT(coords[i] >= 0 && coords[i] < dims[i].second);
    r = r * dims[i].second + coords[i];
  }
  return r;
}

Mesh parse_mesh(const std::string& text, const std::string& field) {
  Mesh m;
  if (text.empty()) throw Error(fmt::format("{}: empty mesh; write e.g. row=4,col=4", field));
  long long total = 1;
  for (const auto& item : split(text, ',')) {
    const auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == item.size())
      throw Error(fmt::format("{}: '{}' is not name=size; write e.g. row=4,col=4", field, item));
    const std::string name = item.substr(0, eq);
    const int size = parse_int(item.substr(eq + 1), field, fmt::format("(dimension {}); write e.g. {}=4", name, name));
    if (size < 1) throw Error(fmt::format("{}: dimension {} has size {}; sizes must be >= 1", field, name, size));
    for (const auto& d : m.dims)
      if (d.first == name) throw Error(fmt::format("{}: dimension '{}' appears twice", field, name));
    if (name == "all") throw Error(fmt::format("{}: 'all' is reserved; name the dimension differently", field));
    total *= size;
    if (total > 1'000'000'000) throw Error(fmt::format("{}: mesh '{}' has too many ranks", field, text));
    m.dims.emplace_back(name, size);
  }
  return m;
}

Placement Placement::natural(const Mesh& mesh, const Topology& topo) {
  check_fits(mesh, topo, "placement");
  Placement p;
  p.mesh_ = mesh;
  p.kind_ = "natural";
  p.gpus_.resize(static_cast<std::size_t>(mesh.size()));
  for (int r = 0; r < mesh.size(); ++r) p.gpus_[r] = r;
  return p;
}

Placement Placement::bunched(const Mesh& mesh, const Topology& topo, const std::vector<int>& block) {
  std::string kind = "bunched:";
  for (std::size_t i = 0; i < block.size(); ++i) kind += fmt::format("{}{}", i ? "x" : "", block[i]);
  const std::string what = "placement " + kind;
  check_fits(mesh, topo, what);
  const int gpn = topo.gpus_per_node();
  if (gpn == 0)
    throw Error(fmt::format("{}: topology '{}' has nodes of different sizes; use natural or an explicit list", what,
                            topo_name(topo)));
  const std::string fix = fmt::format("use a block whose product is {} that divides {}", gpn, mesh_text(mesh));
  if (block.empty() || block.size() > mesh.dims.size())
    throw Error(fmt::format("{}: the block needs 1 to {} sizes (one per trailing mesh dimension); {}", what,
                            mesh.dims.size(), fix));
  const std::size_t first = mesh.dims.size() - block.size();
  long long volume = 1;
  for (int b : block) volume *= b;
  if (volume != gpn)
    throw Error(fmt::format("{}: a block of {} ranks does not fill a {}-GPU node; {}", what, volume, gpn, fix));
  for (std::size_t i = 0; i < block.size(); ++i) {
    const auto& [name, size] = mesh.dims[first + i];
    if (block[i] < 1 || size % block[i] != 0)
      throw Error(
          fmt::format("{}: block size {} does not divide dimension {}={}; {}", what, block[i], name, size, fix));
  }

  // GPUs of each node, in index order.
  std::vector<std::vector<int>> node_gpus(static_cast<std::size_t>(topo.num_nodes()));
  for (int g = 0; g < topo.num_gpus(); ++g) node_gpus[topo.node_of_gpu(g)].push_back(g);

  // Block grid: leading dims whole, trailing dims divided by the block.
  std::vector<int> grid(mesh.dims.size());
  std::vector<int> inner(mesh.dims.size(), 1);
  for (std::size_t i = 0; i < mesh.dims.size(); ++i) {
    inner[i] = i >= first ? block[i - first] : 1;
    grid[i] = mesh.dims[i].second / inner[i];
  }
  Placement p;
  p.mesh_ = mesh;
  p.kind_ = kind;
  p.gpus_.resize(static_cast<std::size_t>(mesh.size()));
  for (int r = 0; r < mesh.size(); ++r) {
    const std::vector<int> c = mesh.coords(r);
    int b = 0, within = 0;
    for (std::size_t i = 0; i < c.size(); ++i) {
      b = b * grid[i] + c[i] / inner[i];
      within = within * inner[i] + c[i] % inner[i];
    }
    p.gpus_[r] = node_gpus[b][within];  // b < num_nodes: check_fits and volume == gpn
  }
  return p;
}

Placement Placement::explicit_list(const Mesh& mesh, const Topology& topo, const std::vector<int>& gpus) {
  if (static_cast<int>(gpus.size()) != mesh.size())
    throw Error(fmt::format("placement list: has {} GPUs but mesh {} has {} ranks; give one GPU index per mesh rank",
                            gpus.size(), mesh_text(mesh), mesh.size()));
  std::vector<int> owner(static_cast<std::size_t>(topo.num_gpus()), -1);
  for (std::size_t r = 0; r < gpus.size(); ++r) {
    const int g = gpus[r];
    if (g < 0 || g >= topo.num_gpus())
      throw Error(fmt::format("placement list: entry {} is gpu {} but topology '{}' has GPUs 0..{}", r, g,
                              topo_name(topo), topo.num_gpus() - 1));
    if (owner[g] >= 0)
      throw Error(fmt::format("placement list: gpu {} is given twice (entries {} and {}); each GPU holds one rank", g,
                              owner[g], r));
    owner[g] = static_cast<int>(r);
  }
  Placement p;
  p.mesh_ = mesh;
  p.kind_ = "list";
  p.gpus_ = gpus;
  return p;
}

Placement Placement::parse(const std::string& spec, const Mesh& mesh, const Topology& topo, const std::string& field) {
  try {
    if (spec == "natural") return natural(mesh, topo);
    if (spec.rfind("bunched:", 0) == 0) {
      std::vector<int> block;
      for (const auto& s : split(spec.substr(8), 'x'))
        block.push_back(parse_int(s, field, "in the block; write e.g. bunched:2x2"));
      return bunched(mesh, topo, block);
    }
    if (spec.rfind("list:", 0) == 0) {
      std::vector<int> gpus;
      for (const auto& s : split(spec.substr(5), ','))
        gpus.push_back(parse_int(s, field, "in the GPU list; write e.g. list:0,1,2,3"));
      return explicit_list(mesh, topo, gpus);
    }
  } catch (const Error& e) {
    const std::string msg = e.what();
    if (msg.rfind(field + ":", 0) == 0) throw;
    throw Error(fmt::format("{}: {}", field, msg));
  }
  throw Error(fmt::format("{}: unknown placement '{}'; use natural, bunched:AxB or list:0,1,...", field, spec));
}

Placement Placement::on_gpus(const std::vector<int>& gpus) const {
  Placement p = *this;
  for (int& g : p.gpus_) {
    MESHSIM_ASSERT(g >= 0 && g < static_cast<int>(gpus.size()));
    g = gpus[static_cast<std::size_t>(g)];
  }
  return p;
}

std::vector<std::vector<int>> Placement::groups_along(const MeshAxis& axis) const {
  if (axis.is_all()) return {gpus_};
  // "a+b": ranks that differ only in a and b, ordered row-major over (a, b) in mesh order.
  std::vector<int> ks;
  for (const std::string& d : axis.dims()) ks.push_back(mesh_.dim_index(d));
  std::sort(ks.begin(), ks.end());
  int size = 1;
  for (int k : ks) size *= mesh_.dims[static_cast<std::size_t>(k)].second;
  std::vector<std::vector<int>> groups;
  // Ranks whose varying coordinates are all 0, in row-major order, each start one group.
  for (int r = 0; r < mesh_.size(); ++r) {
    std::vector<int> c = mesh_.coords(r);
    if (std::any_of(ks.begin(), ks.end(), [&](int k) { return c[static_cast<std::size_t>(k)] != 0; })) continue;
    std::vector<int> g;
    g.reserve(static_cast<std::size_t>(size));
    for (int v = 0; v < size; ++v) {
      int rest = v;
      for (auto it = ks.rbegin(); it != ks.rend(); ++it) {
        const int n = mesh_.dims[static_cast<std::size_t>(*it)].second;
        c[static_cast<std::size_t>(*it)] = rest % n;
        rest /= n;
      }
      g.push_back(gpus_[static_cast<std::size_t>(mesh_.rank_of(c))]);
    }
    groups.push_back(std::move(g));
  }
  return groups;
}

}  // namespace meshsim
