// Launcher environments: meshsim, torchrun, Slurm and Open MPI variables, and the errors
// for missing or inconsistent ones.
#include "backend/launch/launch_env.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "core/error.h"

namespace meshsim::launch {
namespace {

using Env = std::map<std::string, std::string>;

LaunchEnv parse_exactly(const Env& env) {
  return launch_env_from([&](const char* name) -> const char* {
    const auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

// The tests of the launcher variables add the token every real run needs (its own tests below).
LaunchEnv parse(Env env) {
  env.emplace("MESHSIM_TOKEN", "tok");
  return parse_exactly(env);
}

std::string error_of(const Env& env, bool with_token = true) {
  try {
    with_token ? parse(env) : parse_exactly(env);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(LaunchEnv, Meshsim) {
  const LaunchEnv e = parse({{"MESHSIM_RANK", "2"},
                             {"MESHSIM_WORLD_SIZE", "4"},
                             {"MESHSIM_MASTER_ADDR", "10.1.2.3"},
                             {"MESHSIM_MASTER_PORT", "29600"},
                             {"MESHSIM_TOKEN", "abc"},
                             // a torchrun environment around it loses: meshsim's own variables come first
                             {"RANK", "0"},
                             {"WORLD_SIZE", "8"}});
  EXPECT_EQ(e.source, "meshsim");
  EXPECT_EQ(e.rank, 2);
  EXPECT_EQ(e.world_size, 4);
  EXPECT_EQ(e.master_addr, "10.1.2.3");
  EXPECT_EQ(e.master_port, 29600);
  EXPECT_EQ(e.token, "abc");
  EXPECT_EQ(e.bind_addr, "127.0.0.1");  // no MESHSIM_BIND_ADDR: loopback
}

TEST(LaunchEnv, BindAddressIsReadForEveryLauncher) {
  EXPECT_EQ(parse({{"MESHSIM_RANK", "1"},
                   {"MESHSIM_WORLD_SIZE", "2"},
                   {"MESHSIM_MASTER_ADDR", "10.77.0.1"},
                   {"MESHSIM_MASTER_PORT", "29600"},
                   {"MESHSIM_BIND_ADDR", "10.77.0.2"}})
                .bind_addr,
            "10.77.0.2");
  EXPECT_EQ(parse({{"RANK", "0"},
                   {"WORLD_SIZE", "2"},
                   {"MASTER_ADDR", "node0"},
                   {"MASTER_PORT", "1234"},
                   {"MESHSIM_BIND_ADDR", "192.168.1.5"}})
                .bind_addr,
            "192.168.1.5");
  EXPECT_EQ(parse({{"RANK", "0"},
                   {"WORLD_SIZE", "2"},
                   {"MASTER_ADDR", "node0"},
                   {"MASTER_PORT", "1234"},
                   {"MESHSIM_BIND_ADDR", ""}})
                .bind_addr,
            "127.0.0.1");  // empty counts as unset
}

TEST(LaunchEnv, Torchrun) {
  const LaunchEnv e = parse(
      {{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"MASTER_ADDR", "node0"}, {"MASTER_PORT", "1234"}, {"LOCAL_RANK", "3"}});
  EXPECT_EQ(e.source, "torchrun");
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.master_addr, "node0");
  EXPECT_EQ(e.master_port, 1234);
  EXPECT_EQ(e.token, "tok");
  EXPECT_FALSE(e.insecure);
}

TEST(LaunchEnv, Slurm) {
  const LaunchEnv e = parse({{"SLURM_PROCID", "5"},
                             {"SLURM_NTASKS", "16"},
                             {"MASTER_ADDR", "gpu001"},
                             {"SLURM_NODELIST", "gpu[001-004]"},
                             {"MESHSIM_TOKEN", "t"}});
  EXPECT_EQ(e.source, "slurm");
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.world_size, 16);
  EXPECT_EQ(e.master_addr, "gpu001");
  EXPECT_EQ(e.master_port, kDefaultMasterPort);
  EXPECT_EQ(e.token, "t");
  // MESHSIM_MASTER_* win over MASTER_*.
  const LaunchEnv m = parse({{"SLURM_PROCID", "0"},
                             {"SLURM_NTASKS", "2"},
                             {"MASTER_ADDR", "a"},
                             {"MESHSIM_MASTER_ADDR", "b"},
                             {"MASTER_PORT", "1"},
                             {"MESHSIM_MASTER_PORT", "2"}});
  EXPECT_EQ(m.master_addr, "b");
  EXPECT_EQ(m.master_port, 2);
}

TEST(LaunchEnv, OpenMpi) {
  const LaunchEnv e = parse({{"OMPI_COMM_WORLD_RANK", "1"},
                             {"OMPI_COMM_WORLD_SIZE", "2"},
                             {"MESHSIM_MASTER_ADDR", "127.0.0.1"},
                             {"MASTER_PORT", "4000"}});
  EXPECT_EQ(e.source, "openmpi");
  EXPECT_EQ(e.rank, 1);
  EXPECT_EQ(e.world_size, 2);
  EXPECT_EQ(e.master_addr, "127.0.0.1");
  EXPECT_EQ(e.master_port, 4000);
}

TEST(LaunchEnv, MissingOrInconsistentVariablesNameTheVariableAndTheFix) {
  EXPECT_NE(error_of({}).find("meshsim launch"), std::string::npos) << error_of({});
  const std::string no_world = error_of({{"RANK", "0"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}});
  EXPECT_NE(no_world.find("WORLD_SIZE is not set"), std::string::npos) << no_world;
  EXPECT_NE(no_world.find("set WORLD_SIZE"), std::string::npos) << no_world;
  const std::string no_addr = error_of({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}});
  EXPECT_NE(no_addr.find("MASTER_ADDR is not set"), std::string::npos) << no_addr;
  EXPECT_NE(no_addr.find("MESHSIM_MASTER_ADDR"), std::string::npos) << no_addr;
  const std::string no_port =
      error_of({{"MESHSIM_RANK", "0"}, {"MESHSIM_WORLD_SIZE", "1"}, {"MESHSIM_MASTER_ADDR", "h"}});
  EXPECT_NE(no_port.find("MESHSIM_MASTER_PORT is not set"), std::string::npos) << no_port;
  const std::string big_rank =
      error_of({{"RANK", "4"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}});
  EXPECT_NE(big_rank.find("RANK=4 is not below WORLD_SIZE=4"), std::string::npos) << big_rank;
  const std::string bad_num = error_of({{"OMPI_COMM_WORLD_RANK", "x1"}, {"OMPI_COMM_WORLD_SIZE", "2"}});
  EXPECT_NE(bad_num.find("OMPI_COMM_WORLD_RANK='x1' is not an integer"), std::string::npos) << bad_num;
  const std::string bad_port =
      error_of({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}});
  EXPECT_NE(bad_port.find("MASTER_PORT=70000 is out of range"), std::string::npos) << bad_port;
  const std::string zero_world = error_of({{"MESHSIM_RANK", "0"}, {"MESHSIM_WORLD_SIZE", "0"}});
  EXPECT_NE(zero_world.find("MESHSIM_WORLD_SIZE=0"), std::string::npos) << zero_world;
  // 16M ranks took rank 0 6.3 GB and half a minute to refuse (issue 40): refused at once.
  const std::string huge_world = error_of({{"MESHSIM_RANK", "0"}, {"MESHSIM_WORLD_SIZE", "16777216"}});
  EXPECT_NE(huge_world.find("MESHSIM_WORLD_SIZE=16777216"), std::string::npos) << huge_world;
  EXPECT_NE(huge_world.find("65536"), std::string::npos) << huge_world;
}

// Every launcher needs MESHSIM_TOKEN: without one any process that reaches the port could
// join the job (docs/security.md). The error says how to make one, and how to waive it.
TEST(LaunchEnv, ATokenIsRequiredUnlessExplicitlyWaived) {
  const Env torchrun = {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}};
  for (const Env& env : {torchrun, Env{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"MASTER_ADDR", "h"}},
                         Env{{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}}}) {
    const std::string msg = error_of(env, /*with_token=*/false);
    EXPECT_NE(msg.find("MESHSIM_TOKEN is not set"), std::string::npos) << msg;
    EXPECT_NE(msg.find("same secret on every rank"), std::string::npos) << msg;
    EXPECT_NE(msg.find("export MESHSIM_TOKEN=$(openssl rand -hex 16)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("MESHSIM_TOKEN=insecure"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;  // one line
  }
  Env empty = torchrun;
  empty["MESHSIM_TOKEN"] = "";  // set but empty is no secret either
  EXPECT_NE(error_of(empty, false).find("MESHSIM_TOKEN is not set (torchrun launch, rank 1 of 2)"), std::string::npos)
      << error_of(empty, false);
  Env waived = torchrun;
  waived["MESHSIM_TOKEN"] = "insecure";
  const LaunchEnv w = parse_exactly(waived);
  EXPECT_TRUE(w.insecure);
  EXPECT_EQ(w.token, "insecure");  // every rank agrees on it, so the run works, unauthenticated
  Env secret = torchrun;
  secret["MESHSIM_TOKEN"] = "4f1c0ffee";
  EXPECT_FALSE(parse_exactly(secret).insecure);
  EXPECT_EQ(parse_exactly(secret).token, "4f1c0ffee");
}

// The liveness heartbeat (rendezvous.h): defaults, decimals, 0 turns the check off, and
// every bad value is one line naming the variable and what to set.
TEST(LaunchEnv, HeartbeatVariables) {
  const Env base = {
      {"MESHSIM_RANK", "0"}, {"MESHSIM_WORLD_SIZE", "2"}, {"MESHSIM_MASTER_ADDR", "h"}, {"MESHSIM_MASTER_PORT", "1"}};
  const LaunchEnv d = parse(base);
  EXPECT_EQ(d.heartbeat_interval, std::chrono::milliseconds(1000));
  EXPECT_EQ(d.heartbeat_timeout, std::chrono::milliseconds(5000));
  Env set = base;
  set["MESHSIM_HEARTBEAT_INTERVAL"] = "0.25";
  set["MESHSIM_HEARTBEAT_TIMEOUT"] = "2";
  EXPECT_EQ(parse(set).heartbeat_interval, std::chrono::milliseconds(250));
  EXPECT_EQ(parse(set).heartbeat_timeout, std::chrono::milliseconds(2000));
  Env off = base;
  off["MESHSIM_HEARTBEAT_TIMEOUT"] = "0";
  EXPECT_EQ(parse(off).heartbeat_timeout, std::chrono::milliseconds(0));
  const std::pair<const char*, const char*> bad[] = {
      {"MESHSIM_HEARTBEAT_TIMEOUT", "abc"}, {"MESHSIM_HEARTBEAT_TIMEOUT", "nan"}, {"MESHSIM_HEARTBEAT_TIMEOUT", "inf"},
      {"MESHSIM_HEARTBEAT_TIMEOUT", "-1"},  {"MESHSIM_HEARTBEAT_TIMEOUT", "5s"},  {"MESHSIM_HEARTBEAT_TIMEOUT", "1e9"},
      {"MESHSIM_HEARTBEAT_INTERVAL", "0"},  {"MESHSIM_HEARTBEAT_INTERVAL", "x"},  {"MESHSIM_HEARTBEAT_INTERVAL", "-2"}};
  for (const auto& [name, value] : bad) {
    Env env = base;
    env[name] = value;
    const std::string msg = error_of(env);
    EXPECT_EQ(msg.find(std::string(name) + "="), 0u) << msg;
    EXPECT_NE(msg.find(value), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::string("e.g. ") + name), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    // The launchers check them once, before starting any rank, with the same message.
    try {
      heartbeat_env_from([&](const char* n) -> const char* { return std::string(n) == name ? value : nullptr; });
      ADD_FAILURE() << name << "=" << value << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), msg);
    }
  }
  Env tight = base;
  tight["MESHSIM_HEARTBEAT_INTERVAL"] = "1";
  tight["MESHSIM_HEARTBEAT_TIMEOUT"] = "1.5";
  EXPECT_NE(error_of(tight).find("MESHSIM_HEARTBEAT_TIMEOUT=1.5 s is less than twice MESHSIM_HEARTBEAT_INTERVAL=1 s"),
            std::string::npos)
      << error_of(tight);
}

}  // namespace
}  // namespace meshsim::launch
