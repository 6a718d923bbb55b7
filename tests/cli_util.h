// Helpers for the end-to-end tests of the meshsim command: run the built binary (its
// absolute path comes from CMake), capture stdout, stderr and the exit code, and check
// the shape of user errors (exit 2, one stderr line naming the field and the fix).
//
//   const Result r = meshsim("simulate --json");
//   expect_user_error(meshsim("simulate bad.yaml"), "parallel.tp");
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace cli_testing {

namespace fs = std::filesystem;

// A TCP port on loopback that was free a moment ago (for rank 0's store in tests).
inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

struct Result {
  int code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// A directory of this test process's own, created on first use.
inline fs::path temp_dir() {
  static const fs::path dir = [] {
    fs::path d = fs::temp_directory_path() / ("meshsim_test_" + std::to_string(::getpid()));
    fs::create_directories(d);
    return d;
  }();
  return dir;
}

inline std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  return {std::istreambuf_iterator<char>(f), {}};
}

inline Result meshsim(const std::string& args) {
  static int counter = 0;
  const fs::path err = temp_dir() / ("stderr" + std::to_string(counter++));
  const std::string cmd = std::string(MESHSIM_BINARY) + " " + args + " 2>" + err.string();
  Result r;
  FILE* p = popen(cmd.c_str(), "r");
  std::array<char, 4096> buf{};
  std::size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.err = slurp(err);
  return r;
}

inline fs::path write_file(const std::string& name, const std::string& text) {
  const fs::path p = temp_dir() / name;
  std::ofstream(p) << text;
  return p;
}

inline int lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

inline std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> v;
  std::istringstream in(s);
  for (std::string line; std::getline(in, line);) v.push_back(line);
  return v;
}

// A user error: exit code 2, one line on stderr, naming `field` and (optionally) the fix.
inline void expect_user_error(const Result& r, const std::string& field, const std::string& fix = "") {
  EXPECT_EQ(r.code, 2) << r.err << r.out;
  EXPECT_EQ(lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("meshsim: error:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(field), std::string::npos) << "missing '" << field << "' in: " << r.err;
  if (!fix.empty()) {
    EXPECT_NE(r.err.find(fix), std::string::npos) << "missing '" << fix << "' in: " << r.err;
  }
}

}  // namespace cli_testing
