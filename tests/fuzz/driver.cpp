// meshsim_fuzz: a deterministic mutation fuzzer for the targets of targets.h, for builds
// without libFuzzer (CI builds with g++).
//
//   meshsim_fuzz TARGET --seconds 60 [--seed 1] [--source-dir DIR] [--out DIR] [--corpus FILE...]
//   meshsim_fuzz TARGET --replay FILE...          # run inputs once (a crash file, a corpus)
//
// It starts from the target's seeds (files of the source tree, inline seeds, --corpus) and
// mutates them: bit flips, interesting bytes, deleted, duplicated or swapped ranges and
// lines, splices of another corpus entry and of the target's dictionary. An input that
// finds a new outcome (the first line of its error, or acceptance) joins the corpus, a
// cheap stand-in for coverage feedback. A finding writes the input to OUT/TARGET-crash.bin
// (an escaped exception or a fatal signal) or OUT/TARGET-hang.bin (one input over 30 s)
// and exits 1. Exit 0: no finding in the time; the summary line says how many inputs ran.
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <typeinfo>
#include <vector>

#include "core/error.h"
#include "tests/fuzz/targets.h"

namespace fs = std::filesystem;
using meshsim::fuzz::Target;

namespace {

// The largest topology a preset builds (2^19 GPUs) takes about 5 s on an idle 2-core machine and
// more under a parallel ctest: a hang is what outlasts that several times over.
constexpr unsigned kHangSeconds = 30;
constexpr std::size_t kMaxInput = 64 * 1024;

// The input being run, for the signal handlers (written with write(2) only).
std::string g_current;
char g_crash_path[4096];
char g_hang_path[4096];

void dump_and_die(const char* path, int sig) {
  const int fd = ::open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    std::size_t off = 0;
    while (off < g_current.size()) {
      const ssize_t n = ::write(fd, g_current.data() + off, g_current.size() - off);
      if (n <= 0) break;
      off += static_cast<std::size_t>(n);
    }
    ::close(fd);
  }
  const char msg[] = "meshsim_fuzz: finding, input written (see the path above)\n";
  (void)!::write(2, msg, sizeof msg - 1);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}
void on_crash(int sig) { dump_and_die(g_crash_path, sig); }
void on_hang(int) { dump_and_die(g_hang_path, SIGABRT); }

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str().substr(0, kMaxInput);
}

std::vector<fs::path> glob(const fs::path& root, const std::string& pattern) {
  // "dir/*.ext" only: what the targets' seed_globs use.
  const fs::path pat(pattern);
  const std::string ext = pat.extension().string();
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root / pat.parent_path(), ec))
    if (e.is_regular_file() && e.path().extension() == ext) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

class Mutator {
 public:
  Mutator(std::uint64_t seed, const Target& t) : rng_(seed), dict_(t.dictionary) {}

  std::string mutate(std::string s, const std::vector<std::string>& corpus) {
    const int rounds = 1 + static_cast<int>(pick(4));
    for (int i = 0; i < rounds; ++i) s = once(std::move(s), corpus);
    if (s.size() > kMaxInput) s.resize(kMaxInput);
    return s;
  }

 private:
  std::size_t pick(std::size_t n) { return n == 0 ? 0 : std::uniform_int_distribution<std::size_t>(0, n - 1)(rng_); }

  std::string once(std::string s, const std::vector<std::string>& corpus) {
    const std::size_t n = s.size();
    switch (pick(9)) {
      case 0:  // flip a bit
        if (n) s[pick(n)] ^= static_cast<char>(1u << pick(8));
        break;
      case 1: {  // an interesting byte
        static const char bytes[] = {'\0', '\n', ' ', ':', '-', '9', '0', '.', '{', '[', '\xff', '\t', '"'};
        if (n) s[pick(n)] = bytes[pick(sizeof bytes)];
        break;
      }
      case 2:  // delete a range
        if (n) {
          const std::size_t at = pick(n);
          s.erase(at, 1 + pick(std::min<std::size_t>(n - at, 32)));
        }
        break;
      case 3:  // duplicate a range
        if (n) {
          const std::size_t at = pick(n), len = 1 + pick(std::min<std::size_t>(n - at, 64));
          s.insert(pick(n + 1), s.substr(at, len));
        }
        break;
      case 4:
      case 5:  // a dictionary token
        if (!dict_.empty()) s.insert(pick(n + 1), dict_[pick(dict_.size())]);
        break;
      case 6: {  // replace a number by a token
        const std::size_t at = n ? s.find_first_of("0123456789", pick(n)) : std::string::npos;
        if (at != std::string::npos && !dict_.empty()) {
          std::size_t end = s.find_first_not_of("0123456789.e", at);
          if (end == std::string::npos) end = n;
          s.replace(at, end - at, dict_[pick(dict_.size())]);
        }
        break;
      }
      case 7: {  // swap two lines
        std::vector<std::string> lines;
        std::istringstream in(s);
        for (std::string l; std::getline(in, l);) lines.push_back(l);
        if (lines.size() > 1) std::swap(lines[pick(lines.size())], lines[pick(lines.size())]);
        s.clear();
        for (const auto& l : lines) s += l + "\n";
        break;
      }
      default: {  // splice another corpus entry
        const std::string& other = corpus[pick(corpus.size())];
        if (!other.empty()) {
          const std::size_t at = pick(other.size());
          s = s.substr(0, pick(n + 1)) + other.substr(at, pick(other.size() - at + 1));
        }
      }
    }
    return s;
  }

  std::mt19937_64 rng_;
  const std::vector<std::string>& dict_;
};

// Runs one input; the outcome's name (accepted, or the start of the refusal) feeds the
// corpus. An exception other than meshsim::Error is a finding: reported, input saved.
std::string run_one(const Target& t, const std::string& input) {
  g_current = input;
  ::alarm(kHangSeconds);
  std::string result;
  try {
    result = t.run(input);
  } catch (const std::exception& e) {
    ::alarm(0);
    std::ofstream(g_crash_path, std::ios::binary) << input;
    throw std::runtime_error(fmt::format("{}: an input escaped with {}: {} (input in {})", t.name, typeid(e).name(),
                                         e.what(), g_crash_path));
  }
  ::alarm(0);
  return result;
}

int usage() {
  std::string names;
  for (const Target& t : meshsim::fuzz::targets()) names += fmt::format("  {:14} {}\n", t.name, t.summary);
  fmt::print(stderr,
             "usage: meshsim_fuzz TARGET --seconds N [--seed S] [--source-dir DIR] [--out DIR] [--corpus FILE...]\n"
             "       meshsim_fuzz TARGET --replay FILE...\ntargets:\n{}",
             names);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  const Target* target = meshsim::fuzz::find_target(argv[1]);
  if (target == nullptr) {
    fmt::print(stderr, "meshsim_fuzz: unknown target '{}'\n", argv[1]);
    return usage();
  }
  double seconds = 10;
  std::uint64_t seed = 1;
  fs::path source = MESHSIM_SOURCE_DIR, out = ".";
  std::vector<fs::path> extra, replay;
  std::vector<fs::path>* list = nullptr;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
      return argv[++i];
    };
    try {
      if (a == "--seconds")
        seconds = std::stod(value()), list = nullptr;
      else if (a == "--seed")
        seed = std::stoull(value()), list = nullptr;
      else if (a == "--source-dir")
        source = value(), list = nullptr;
      else if (a == "--out")
        out = value(), list = nullptr;
      else if (a == "--corpus")
        list = &extra;
      else if (a == "--replay")
        list = &replay;
      else if (list != nullptr && a.rfind("--", 0) != 0)
        list->push_back(a);
      else
        return usage();
    } catch (const std::exception& e) {
      fmt::print(stderr, "meshsim_fuzz: {}: {}\n", a, e.what());
      return 2;
    }
  }
  std::snprintf(g_crash_path, sizeof g_crash_path, "%s/%s-crash.bin", out.c_str(), target->name.c_str());
  std::snprintf(g_hang_path, sizeof g_hang_path, "%s/%s-hang.bin", out.c_str(), target->name.c_str());
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) std::signal(sig, on_crash);
  std::signal(SIGALRM, on_hang);

  try {
    if (!replay.empty()) {
      for (const fs::path& p : replay) run_one(*target, read_file(p));
      fmt::print("meshsim_fuzz {}: {} input(s) replayed, no finding\n", target->name, replay.size());
      return 0;
    }
    std::vector<std::string> corpus = target->seeds;
    for (const std::string& g : target->seed_globs)
      for (const fs::path& p : glob(source, g)) corpus.push_back(read_file(p));
    for (const fs::path& p : extra) corpus.push_back(read_file(p));
    if (corpus.empty()) corpus.push_back("");
    std::set<std::string> outcomes;
    std::vector<std::string> valid;  // accepted inputs
    for (const std::string& c : corpus) {
      const std::string result = run_one(*target, c);
      outcomes.insert(result);
      if (result == "ok") valid.push_back(c);
    }
    if (valid.empty()) valid = corpus;
    Mutator mutator(seed, *target);
    const auto start = std::chrono::steady_clock::now();
    std::uint64_t runs = 0, accepted = 0;
    while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < seconds) {
      // Every other input grows from one the target accepted (the seeds at first): most
      // mutants of a refused input are refused at the same place.
      const std::string& base = runs % 2 == 0 ? valid[(runs / 2) % valid.size()] : corpus[runs % corpus.size()];
      const std::string input = mutator.mutate(base, corpus);
      const std::string result = run_one(*target, input);
      ++runs;
      if (result == "ok") {
        ++accepted;
        if (valid.size() < 1024) valid.push_back(input);
      }
      if (corpus.size() < 4096 && outcomes.insert(result).second) corpus.push_back(input);
    }
    fmt::print(
        "meshsim_fuzz {}: {} inputs in {:.0f} s ({} accepted, {} distinct outcomes; seed {}, corpus {}), no "
        "crash, escaped exception or hang\n",
        target->name, runs, seconds, accepted, outcomes.size(), seed, corpus.size());
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "meshsim_fuzz: finding: {}\n", e.what());
    return 1;
  }
}
