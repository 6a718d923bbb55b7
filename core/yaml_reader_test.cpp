#include "core/yaml_reader.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace meshsim {
namespace {

// A second document is found in the text (yaml-cpp's LoadAll loops forever on some malformed
// files, and Load silently reads the first document only).
TEST(YamlReader, ASecondDocumentIsFoundByItsLine) {
  EXPECT_EQ(second_document_line("model: x\n---\nparallel: {tp: 2}\n"), 2);
  EXPECT_EQ(second_document_line("---\nmodel: x\n"), 0);  // the first document's marker
  EXPECT_EQ(second_document_line("# c\n--- # start\nmodel: x\n"), 0);
  EXPECT_EQ(second_document_line("model: x\n...\n"), 0);  // an end marker, nothing after
  EXPECT_EQ(second_document_line("model: x\n...\n\n# c\nb: 1\n"), 5);
  EXPECT_EQ(second_document_line("a: '---'\nb: |\n  ---\n"), 0);  // not at column 0: data
  EXPECT_EQ(second_document_line("--- {a: 1}\n--- {b: 2}\n"), 2);
  EXPECT_EQ(second_document_line("a: 1\r\n---\r\nb: 2\r\n"), 2);
  try {
    parse_yaml_text("model: x\n---\nparallel: {tp: 3}\n", "two.yaml");
    ADD_FAILURE() << "a second document was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("two.yaml:2: a second YAML document"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace meshsim
