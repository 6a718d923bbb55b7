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

const MeshAxis& MeshAxis::dp() {
  static const MeshAxis a{std::string("dp")};
  return a;
}
const MeshAxis& MeshAxis::pp() {
  static const MeshAxis a{std::string("pp")};
  return a;
}
const MeshAxis& MeshAxis::cp() {
  static const MeshAxis a{std::string("cp")};
  return a;
}
const MeshAxis& MeshAxis::tp() {
  static const MeshAxis a{std::string("tp")};
  return a;
}
const MeshAxis& MeshAxis::ep() {
  static const MeshAxis a{std::string("ep")};
  return a;
}
const MeshAxis& MeshAxis::edp() {
  static const MeshAxis a{std::string("edp")};
  return a;
}
const MeshAxis& MeshAxis::row() {
  static const MeshAxis a{std::string("row")};
  return a;
}
const MeshAxis& MeshAxis::col() {
  static const MeshAxis a{std::string("col")};
  return a;
}
const MeshAxis& MeshAxis::rank() {
  static const MeshAxis a{std::string("rank")};
  return a;
}
const MeshAxis& MeshAxis::all() {
  static const MeshAxis a{std::string("all")};
  return a;
}

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
