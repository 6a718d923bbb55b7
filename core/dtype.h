// The element types meshsim trains and measures in: a model's precision (ModelSpec::dtype),
// a measured GEMM's (machine profiles), the cuda backend's GEMMs and native collectives. One
// enum and one table of names, parsed once where the text enters.
//
//   const std::optional<DType> t = parse_dtype("bf16");   // DType::Bf16
//   dtype_bytes(DType::Fp32);                              // 4
//   to_string(DType::Fp16);                                // "fp16"
#pragma once

#include <optional>
#include <string_view>

#include "core/enum_names.h"

namespace meshsim {

enum class DType { Bf16, Fp16, Fp32 };

inline constexpr EnumName<DType> kDTypeNames[] = {{DType::Bf16, "bf16"}, {DType::Fp16, "fp16"}, {DType::Fp32, "fp32"}};

inline const char* to_string(DType t) { return enum_name(kDTypeNames, t); }
inline std::optional<DType> parse_dtype(std::string_view text) { return enum_parse(kDTypeNames, text); }
inline int dtype_bytes(DType t) { return t == DType::Fp32 ? 4 : 2; }

}  // namespace meshsim
