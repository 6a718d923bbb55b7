// Every field a scenario file may hold, one row each: its section and key, what it takes, its
// default and what it means. The resolver (sim/scenario.cpp) accepts exactly these keys in each
// section, so the table cannot drift from what is read; `meshsim fields` prints it, and
// docs/scenarios.md's field reference is that output (CTest scenario_fields_doc compares them).
//
//   for (const ScenarioField& f : scenario_fields()) ...      // f.path() == "parallel.tp"
//   section_keys("run")                                        // {"fidelity", "algorithm", ...}
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace meshsim {

struct ScenarioField {
  std::string_view section;  // "" (the top level), model, parallel, stack, run, perturb, workload, jobs
  std::string_view key;
  std::string_view values;    // what it takes: "integer >= 1", "true | false", "none | full | ..."
  std::string_view fallback;  // its default when left out ("-": required or none)
  std::string_view help;
  // "parallel.tp"; a field of each entry of the jobs list: "jobs[i].nodes".
  std::string path() const {
    if (section.empty()) return std::string(key);
    return std::string(section) + (section == "jobs" ? "[i]." : ".") + std::string(key);
  }
};

// In the order docs/scenarios.md lists them: the top level, then each section.
std::span<const ScenarioField> scenario_fields();
// The keys a section accepts ("" for the top level), in table order.
std::vector<std::string> section_keys(std::string_view section);
// The table as Markdown, a heading per section (what `meshsim fields` prints).
std::string scenario_fields_markdown();

}  // namespace meshsim
