// How the front end in use names an input field in the messages raised below it (issue 36:
// "errors carry a field path that each front end spells its own way"). sim/ and schedule/
// name a request's fields by their key, which is the CLI flag without its dashes and the
// Python keyword argument alike ("algo", "ranks", "fidelity"); the front end chooses the
// spelling once, at start:
//
//   flag("algo")          // "--algo"       (meshsim, the default)      "algo"        (Python)
//   flag("algo", "nccl")  // "--algo nccl"                               "algo=nccl"
//
//   set_spelling(Spelling::Python);   // python/bindings.cpp, when the module loads
//
// Scenario fields are named by their YAML path instead (parallel.tp), which every front end
// shares; --set is the CLI's spelling of Python's set=/overrides=.
#pragma once

#include <string>
#include <string_view>

namespace meshsim {

enum class Spelling { Cli, Python };

// Process-wide; the front end sets it before any work (the CLI never does: Cli is the default).
void set_spelling(Spelling s);
Spelling spelling();

std::string flag(std::string_view name);
std::string flag(std::string_view name, std::string_view value);

}  // namespace meshsim
