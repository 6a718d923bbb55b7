// Writing a command's output files: every one is written whole or is an Error naming the flag
// that named it, and every one is named on stderr once written, so scripts piping --json from
// stdout see nothing extra.
//
//   write_file("trace.json", text, "--trace");
//   say_wrote("trace.json", "Perfetto trace");   // stderr: "meshsim: wrote trace.json (Perfetto trace)"
#pragma once

#include <string>

namespace meshsim {

// Every file a command writes is named on stderr once written ("meshsim: wrote PATH (WHAT)").
void say_wrote(const std::string& path, const std::string& what);

// Writes `text` to `path` and closes it: an Error naming `flag` and the file when it cannot be
// opened or when the write fails (a full disk, a directory), never a silently short file.
void write_file(const std::string& path, const std::string& text, const std::string& flag);

}  // namespace meshsim
