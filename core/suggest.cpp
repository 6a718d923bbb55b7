#include "core/suggest.h"

#include <algorithm>
#include <cctype>

namespace meshsim {

int edit_distance(const std::string& a, const std::string& b) {
  auto lower = [](char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); };
  const std::size_t n = a.size(), m = b.size();
  // Three rows: the one two back for swaps of neighbours.
  std::vector<int> prev2(m + 1), prev(m + 1), cur(m + 1);
  for (std::size_t j = 0; j <= m; ++j) prev[j] = static_cast<int>(j);
  for (std::size_t i = 1; i <= n; ++i) {
    cur[0] = static_cast<int>(i);
    for (std::size_t j = 1; j <= m; ++j) {
      const bool same = lower(a[i - 1]) == lower(b[j - 1]);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (same ? 0 : 1)});
      if (i > 1 && j > 1 && lower(a[i - 1]) == lower(b[j - 2]) && lower(a[i - 2]) == lower(b[j - 1]))
        cur[j] = std::min(cur[j], prev2[j - 2] + 1);
    }
    std::swap(prev2, prev);
    std::swap(prev, cur);
  }
  return prev[m];
}

std::optional<std::string> closest_name(const std::string& word, const std::vector<std::string>& names) {
  const int limit = std::clamp(static_cast<int>(word.size()) / 3, 1, 3);
  std::optional<std::string> best;
  int best_d = limit + 1;
  bool tie = false;
  for (const std::string& name : names) {
    const int d = edit_distance(word, name);
    if (d < best_d) {
      best = name;
      best_d = d;
      tie = false;
    } else if (d == best_d && best && *best != name) {
      tie = true;
    }
  }
  if (!best || tie || best_d == 0) return std::nullopt;
  return best;
}

std::string did_you_mean(const std::string& word, const std::vector<std::string>& names, const char* quote) {
  const std::optional<std::string> name = closest_name(word, names);
  return name ? "did you mean " + std::string(quote) + *name + quote + "?" : std::string();
}

}  // namespace meshsim
