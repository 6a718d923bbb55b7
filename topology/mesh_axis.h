// The mesh dimensions a collective runs along, as a value: one ("tp"), several ("edp+ep+cp":
// the ranks that differ only in those dimensions), or every rank of the mesh ("all"). Text is
// parsed and checked once, where it enters (a schedule's planner, a workload's `group`); from
// there on ops, groups and communicators compare and key by the value, and the text comes
// back only for people (reports, traces, errors).
//
//   const MeshAxis a = MeshAxis::parse("edp+ep", "workload.group");
//   a.dims();             // {"edp", "ep"}
//   a == MeshAxis::tp();      // false
//   a.str();                  // "edp+ep"
//   a.plus(MeshAxis::cp());   // edp+ep+cp
#pragma once

#include <compare>
#include <string>
#include <string_view>
#include <vector>

namespace meshsim {

class MeshAxis {
 public:
  MeshAxis() = default;  // none: an op that is no collective
  // One dimension the code names itself ("tp"); a name from outside goes through parse().
  explicit MeshAxis(std::string dim) : dims_{std::move(dim)} {}
  // "a", "a+b+...": each name non-empty, made of letters, digits, '_' and '-', and given once.
  // Throws Error naming `field` and the fix.
  static MeshAxis parse(std::string_view text, const std::string& field);

  const std::vector<std::string>& dims() const { return dims_; }
  bool empty() const { return dims_.empty(); }
  bool is_all() const;                     // the whole mesh ("all")
  MeshAxis plus(const MeshAxis& b) const;  // these dimensions, then b's
  std::string str() const;                 // "a+b"; "" when empty

  // The axes meshsim's planners name (schedule/plan.h): dp, pp, cp, tp, ep, edp; row and col
  // of 2D SUMMA (mesh2d); rank, a collective workload's one axis; all, every rank of the mesh.
  static const MeshAxis& dp();
  static const MeshAxis& pp();
  static const MeshAxis& cp();
  static const MeshAxis& tp();
  static const MeshAxis& ep();
  static const MeshAxis& edp();
  static const MeshAxis& row();
  static const MeshAxis& col();
  static const MeshAxis& rank();
  static const MeshAxis& all();

  friend bool operator==(const MeshAxis&, const MeshAxis&) = default;
  friend auto operator<=>(const MeshAxis&, const MeshAxis&) = default;

 private:
  std::vector<std::string> dims_;
};

}  // namespace meshsim
