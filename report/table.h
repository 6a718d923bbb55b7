// A plain text table, as the terminal reports print them: a header line, then a line per
// row; each line is the indent, then the cells padded to their column's width (fmt's
// padding: a longer cell is never cut, it pushes the rest of the line right), joined by one
// space. A cell is text the caller formatted, so a number keeps its own format and unit
// ("{:>9.2f}GB/s") and the column only pads it.
//
//   TextTable t({{"op", 16, Align::Left}, {"measured", 12}, {"error", 8}});
//   t.add_row({"allreduce #0", format_time(t0), fmt::format("{:>+7.1f}%", e)});
//   std::cout << t.text("  ");   // "  op                   measured    error\n"
//                                // "  allreduce #0           1.20ms    +3.1%\n"
//
// A row may have fewer cells than there are columns: its line ends after its last cell.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace meshsim {

enum class Align { Left, Right };

struct TextColumn {
  std::string header;
  int width = 0;
  Align align = Align::Right;
};

class TextTable {
 public:
  explicit TextTable(std::vector<TextColumn> columns) : columns_(std::move(columns)) {}
  // Throws std::invalid_argument for more cells than columns (a bug in the caller).
  void add_row(std::vector<std::string> cells);
  // The header line and every row, each line `indent` first and ending in a newline.
  std::string text(std::string_view indent = "") const;

 private:
  std::vector<TextColumn> columns_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace meshsim
