// The main side of the MPI plugin seam (plugin_loader.cpp): launcher detection, lookup
// order and the one-line errors of a plugin that cannot be loaded.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>

#include "backend/mpi/plugin.h"
#include "core/error.h"

namespace meshsim::mpi {
namespace {

// Sets (or unsets, for nullptr) an environment variable for one scope.
class Env {
 public:
  Env(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    if (value == nullptr)
      ::unsetenv(name);
    else
      ::setenv(name, value, 1);
  }
  ~Env() {
    if (had_)
      ::setenv(name_.c_str(), old_.c_str(), 1);
    else
      ::unsetenv(name_.c_str());
  }

 private:
  std::string name_, old_;
  bool had_ = false;
};

TEST(MpiLauncher, NoLauncherNoPlugin) {
  Env a("OMPI_COMM_WORLD_SIZE", nullptr), b("PMI_SIZE", nullptr), c("PMIX_RANK", nullptr);
  EXPECT_FALSE(launcher_env().active);
}

TEST(MpiLauncher, OpenMpiSlurmAndPmix) {
  Env b("PMI_SIZE", nullptr), c("PMIX_RANK", nullptr), r("PMI_RANK", nullptr);
  {
    Env a("OMPI_COMM_WORLD_SIZE", "4"), k("OMPI_COMM_WORLD_RANK", "3");
    const Launcher l = launcher_env();
    EXPECT_TRUE(l.active);
    EXPECT_EQ(l.rank, 3);
    EXPECT_EQ(l.variable, "OMPI_COMM_WORLD_SIZE=4");
    Env off("MESHSIM_MPI", "0");
    EXPECT_FALSE(launcher_env().active);
  }
  Env a("OMPI_COMM_WORLD_SIZE", nullptr), k("OMPI_COMM_WORLD_RANK", nullptr);
  {
    Env p("PMIX_RANK", "2");
    EXPECT_TRUE(launcher_env().active);
    EXPECT_EQ(launcher_env().rank, 2);
  }
  Env s("PMI_SIZE", "8"), pr("PMI_RANK", "5");
  EXPECT_TRUE(launcher_env().active);
  EXPECT_EQ(launcher_env().rank, 5);
}

TEST(MpiPlugin, LookupOrder) {
  EXPECT_EQ(mpi_plugin_candidates("/x/libp.so", "/opt/m/bin/meshsim"), std::vector<std::string>{"/x/libp.so"});
  EXPECT_EQ(mpi_plugin_candidates(nullptr, "/opt/m/bin/meshsim"),
            (std::vector<std::string>{"/opt/m/bin/libmeshsim_mpi.so", "/opt/m/lib/libmeshsim_mpi.so"}));
}

TEST(MpiPlugin, MissingFileIsOneLineWithTheFix) {
  try {
    load_mpi_plugin("/nonexistent/libmeshsim_mpi.so");
    FAIL() << "loaded a missing plugin";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("cannot load the MPI plugin /nonexistent/libmeshsim_mpi.so"), std::string::npos) << m;
    EXPECT_NE(m.find("apt-get install libopenmpi-dev openmpi-bin"), std::string::npos) << m;
    EXPECT_NE(m.find("MESHSIM_MPI_PLUGIN"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
}

TEST(MpiPlugin, NotAPluginIsRefused) {
  // A shared library without meshsim_mpi_plugin (libc is always there).
  try {
    load_mpi_plugin("libc.so.6");
    FAIL() << "loaded libc as a plugin";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a meshsim MPI plugin"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace meshsim::mpi
