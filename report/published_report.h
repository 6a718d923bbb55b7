// Reporting the published measurements checked (sim/published.h) as `meshsim check-published`
// prints them: per group its cases (measured, predicted, signed error) and the mean and worst
// |error| against the bounds recorded for it; or JSON.
//
//   const PublishedReport r = check_published(suite, AlgorithmRegistry::builtin());
//   std::cout << published_text(r);
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "sim/published.h"

namespace meshsim {

std::string published_text(const PublishedReport& report);
nlohmann::json published_json(const PublishedReport& report);

}  // namespace meshsim
