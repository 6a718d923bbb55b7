// One way to name an enum's values: a table of {value, name} pairs per enum, read by
// to_string, the parsers and the error messages that list the valid names.
//
//   constexpr EnumName<Fidelity> kFidelityNames[] = {{Fidelity::Flow, "flow"}, ...};
//   const char* to_string(Fidelity f) { return enum_name(kFidelityNames, f); }
//   std::optional<Fidelity> f = enum_parse(kFidelityNames, "flow");
//   enum_list(kFidelityNames)   // "flow, formula, nccl"
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace meshsim {

template <class E>
struct EnumName {
  E value;
  const char* name;
};

// The name of `v`; "?" for a value the table lacks.
template <class E, std::size_t N>
constexpr const char* enum_name(const EnumName<E> (&table)[N], E v) {
  for (const EnumName<E>& e : table)
    if (e.value == v) return e.name;
  return "?";
}

// The value named `text` exactly; nullopt when none is.
template <class E, std::size_t N>
std::optional<E> enum_parse(const EnumName<E> (&table)[N], std::string_view text) {
  for (const EnumName<E>& e : table)
    if (text == e.name) return e.value;
  return std::nullopt;
}

// Every name, in table order, joined by `sep` (for "use one of ..." messages).
template <class E, std::size_t N>
std::string enum_list(const EnumName<E> (&table)[N], std::string_view sep = ", ") {
  std::string out;
  for (const EnumName<E>& e : table) {
    if (!out.empty()) out += sep;
    out += e.name;
  }
  return out;
}

}  // namespace meshsim
