#include "topology/mesh_axis.h"

#include <algorithm>

#include "core/error.h"

namespace meshsim {

namespace {

bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

}  // namespace

MeshAxis MeshAxis::parse(std::string_view text, const std::string& field) {
  MeshAxis a;
  for (std::size_t pos = 0;;) {
    const std::size_t plus = text.find('+', pos);
    const std::string_view dim = text.substr(pos, plus == std::string_view::npos ? std::string_view::npos : plus - pos);
    if (dim.empty() || !std::all_of(dim.begin(), dim.end(), name_char))
      throw Error(field + ": '" + std::string(text) +
                  "' is not a mesh axis; write a dimension's name (tp) or several joined by '+' (edp+ep)");
    if (std::find(a.dims_.begin(), a.dims_.end(), dim) != a.dims_.end())
      throw Error(field + ": '" + std::string(text) + "' names the dimension '" + std::string(dim) +
                  "' twice; give each once");
    a.dims_.emplace_back(dim);
    if (plus == std::string_view::npos) break;
    pos = plus + 1;
  }
  if (a.dims_.size() > 1 && std::find(a.dims_.begin(), a.dims_.end(), "all") != a.dims_.end())
    throw Error(field + ": '" + std::string(text) + "' joins 'all' with other dimensions; 'all' stands alone");
  return a;
}

bool MeshAxis::is_all() const { return *this == all(); }

namespace {

// The axes the planners name, built once: dp, pp, cp, tp, ep, edp, row, col, rank, all.
const MeshAxis& named(std::size_t k) {
  static const std::vector<MeshAxis> axes = [] {
    std::vector<MeshAxis> v;
    for (const char* name : {"dp", "pp", "cp", "tp", "ep", "edp", "row", "col", "rank", "all"})
      v.emplace_back(std::string(name));
    return v;
  }();
  return axes[k];
}

}  // namespace

const MeshAxis& MeshAxis::dp() { return named(0); }
const MeshAxis& MeshAxis::pp() { return named(1); }
const MeshAxis& MeshAxis::cp() { return named(2); }
const MeshAxis& MeshAxis::tp() { return named(3); }
const MeshAxis& MeshAxis::ep() { return named(4); }
const MeshAxis& MeshAxis::edp() { return named(5); }
const MeshAxis& MeshAxis::row() { return named(6); }
const MeshAxis& MeshAxis::col() { return named(7); }
const MeshAxis& MeshAxis::rank() { return named(8); }
const MeshAxis& MeshAxis::all() { return named(9); }

MeshAxis MeshAxis::plus(const MeshAxis& b) const {
  MeshAxis r = *this;
  r.dims_.insert(r.dims_.end(), b.dims_.begin(), b.dims_.end());
  return r;
}

std::string MeshAxis::str() const {
  std::string s;
  for (const std::string& d : dims_) s += (s.empty() ? "" : "+") + d;
  return s;
}

}  // namespace meshsim
