// "Did you mean": the known name closest to a mistyped one, for error messages.
//
//   closest_name("colective", {"collective", "topology"})  -> "collective"
//   did_you_mean("fidelty", {"fidelity", "format"})        -> "did you mean 'fidelity'?"
//
// Closeness is the optimal-string-alignment distance (insertions, deletions, substitutions
// and swaps of two neighbours each cost 1), case-insensitive; a name is suggested only within
// max(1, length / 3) edits of the word (at most 3) and only when no other name ties it.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace meshsim {

int edit_distance(const std::string& a, const std::string& b);
std::optional<std::string> closest_name(const std::string& word, const std::vector<std::string>& names);
// "did you mean 'NAME'?" (with `quote` around NAME), or "" when nothing is close.
std::string did_you_mean(const std::string& word, const std::vector<std::string>& names, const char* quote = "'");

}  // namespace meshsim
