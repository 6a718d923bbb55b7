// The field table against the resolver: every documented field is read (a value of the wrong
// shape is an error naming that field's path), and a key the table does not hold is refused.
#include "sim/scenario_fields.h"

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "sim/scenario.h"

namespace meshsim {
namespace {

// A scenario holding `key: {x: 1}` (a map, which no scalar field takes) in the field's section,
// beside the fields that section needs (unless the field is one of them).
std::string with_bad_value(const ScenarioField& f) {
  const std::string key(f.key), bad = key + ": {x: 1}";
  auto map = [&](std::string needed, const std::string& needed_key) {
    return key == needed_key ? "{" + bad + "}" : "{" + needed + ", " + bad + "}";
  };
  if (f.section.empty()) return key == "model" ? bad + "\n" : "model: gpt3-175b\n" + bad + "\n";
  if (f.section == "model") return "model: " + map("preset: gpt3-175b", "preset") + "\n";
  if (f.section == "stack") return "model: gpt3-175b\nstack: " + map("name: megatron", "name") + "\n";
  if (f.section == "workload") {
    const std::string needed = key == "collective" ? "bytes: 1MiB"
                               : key == "bytes"    ? "collective: allreduce"
                                                   : "collective: allreduce, bytes: 1MiB";
    return "workload: {" + needed + ", " + bad + "}\n";
  }
  if (f.section == "jobs")  // the first job's field (its error names jobs[0].KEY)
    return "model: gpt3-175b\nrun: {fidelity: flow}\njobs: [" +
           (key == "nodes" || key == "gpus" ? "{" + bad + "}" : "{nodes: 0, " + bad + "}") + "]\n";
  return "model: gpt3-175b\n" + std::string(f.section) + ": {" + bad + "}\n";
}

TEST(ScenarioFields, EveryDocumentedFieldIsRead) {
  int fields = 0;
  for (const ScenarioField& f : scenario_fields()) {
    ++fields;
    std::string message;
    try {
      (void)ScenarioNode::parse(with_bad_value(f), "f.yaml").resolve();
    } catch (const Error& e) {
      message = e.what();
    }
    std::string path = f.path();
    if (const auto i = path.find("[i]"); i != std::string::npos) path.replace(i, 3, "[0]");
    EXPECT_NE(message.find(" " + path + ":"), std::string::npos) << path << ": '" << message << "'";
    EXPECT_FALSE(f.values.empty() || f.fallback.empty() || f.help.empty()) << f.path();
  }
  EXPECT_GE(fields, 70);
}

TEST(ScenarioFields, AKeyOutsideTheTableIsRefusedWithTheTablesKeys) {
  std::string message;
  try {
    (void)ScenarioNode::parse("model: gpt3-175b\nrun: {fidelty: flow}\n", "f.yaml").resolve();
  } catch (const Error& e) {
    message = e.what();
  }
  std::string keys;
  for (const std::string& k : section_keys("run")) keys += (keys.empty() ? "" : ", ") + k;
  EXPECT_NE(message.find("unknown key 'fidelty'"), std::string::npos) << message;
  EXPECT_NE(message.find(keys), std::string::npos) << message << " lacks " << keys;
}

TEST(ScenarioFields, TheMarkdownHasARowPerField) {
  const std::string md = scenario_fields_markdown();
  for (const ScenarioField& f : scenario_fields())
    EXPECT_NE(md.find("| `" + f.path() + "` |"), std::string::npos) << f.path();
  EXPECT_NE(md.find("| `parallel.recompute` | none \\| full \\| selective"), std::string::npos);
}

}  // namespace
}  // namespace meshsim
