#include "report/table.h"

#include <fmt/format.h>

#include <stdexcept>

namespace meshsim {

namespace {

// One cell padded as fmt's "{:<W}" / "{:>W}" pads it, so a table prints exactly what a
// hand-written format string of the same widths printed.
std::string pad(const std::string& cell, const TextColumn& c) {
  return c.align == Align::Left ? fmt::format("{:<{}}", cell, c.width) : fmt::format("{:>{}}", cell, c.width);
}

}  // namespace

void TextTable::add_row(std::vector<std::string> cells) {
  if (cells.size() > columns_.size())
    throw std::invalid_argument(
        fmt::format("TextTable: a row of {} cells in a table of {} columns", cells.size(), columns_.size()));
  rows_.push_back(std::move(cells));
}

std::string TextTable::text(std::string_view indent) const {
  std::string out;
  auto line = [&](auto cell_of, std::size_t cells) {
    out += indent;
    for (std::size_t i = 0; i < cells; ++i) {
      if (i > 0) out += ' ';
      out += pad(cell_of(i), columns_[i]);
    }
    out += '\n';
  };
  line([&](std::size_t i) { return columns_[i].header; }, columns_.size());
  for (const auto& row : rows_) line([&](std::size_t i) { return row[i]; }, row.size());
  return out;
}

}  // namespace meshsim
