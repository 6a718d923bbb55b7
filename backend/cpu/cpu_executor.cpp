// CpuExecutor: collective workloads over real sockets. See the header.
#include "backend/cpu/cpu_executor.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "backend/cpu/collective_exec.h"
#include "core/error.h"
#include "core/hash.h"
#include "schedule/reference_executor.h"

namespace meshsim::cpu {

void StoreDirectory::publish(int rank, const std::string& host_port) {
  store_.set(prefix_ + std::to_string(rank), host_port);
}

std::string StoreDirectory::lookup(int rank, std::chrono::milliseconds timeout) {
  return store_.get(prefix_ + std::to_string(rank), timeout, rank);  // a timeout names the rank
}

std::vector<float> seeded_input(const CollectiveSpec& spec, int rank, std::uint64_t seed, int op) {
  std::vector<float> v(static_cast<std::size_t>(rank_buffers(spec, rank).send / 4));
  const std::uint64_t base =
      splitmix64(seed ^ splitmix64(static_cast<std::uint64_t>(rank) * 1000003ULL + static_cast<std::uint64_t>(op)));
  for (std::size_t i = 0; i < v.size(); ++i)  // small integers in [-8, 8): sums stay exact in float32
    v[i] = static_cast<float>(static_cast<int>(splitmix64(base + i) % 16) - 8);
  return v;
}

CpuExecutor::CpuExecutor(Transport& transport, const AlgorithmRegistry& registry, CpuExecutorOptions options)
    : t_(transport), registry_(registry), opt_(options) {}

Trace CpuExecutor::execute(const Schedule& schedule) {
  if (schedule.roles.size() != 1)
    throw Error(
        "backend cpu: this schedule has " + std::to_string(schedule.roles.size()) +
        " roles (a training schedule); the cpu backend runs collective workloads so far (workload: in the scenario)");
  const Role& role = schedule.roles.front();
  const int world = t_.world(), rank = t_.rank();
  Trace trace;
  trace.source = "cpu";
  checks_.clear();
  // A common start: every rank sends a token to every other before the clock starts, and
  // again before every op, so a rank still checking the previous op's numerics does not
  // stretch the next op's measured time (each op is timed from a common start).
  auto barrier = [&] {
    std::vector<char> out(static_cast<std::size_t>(world), 1), in(static_cast<std::size_t>(world), 0);
    std::vector<SendOp> sends;
    std::vector<RecvOpDesc> recvs;
    for (int p = 0; p < world; ++p)
      if (p != rank) {
        sends.push_back({p, &out[static_cast<std::size_t>(p)], 1});
        recvs.push_back({p, &in[static_cast<std::size_t>(p)], 1, RecvMode::Copy});
      }
    t_.exchange(sends, recvs, "start barrier");
  };
  barrier();
  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < role.ops.size(); ++i) {
    const Op& op = role.ops[i];
    if (op.kind != OpKind::Collective)
      throw Error("backend cpu: op " + std::to_string(i) + " ('" + op.name +
                  "') is not a collective; the cpu backend runs collective workloads so far");
    // This rank's group for the op's axis, and which group it is (seeds the inputs).
    std::vector<int> group;
    std::size_t group_index = 0;
    if (op.axis == MeshAxis::rank()) {
      for (int r = 0; r < world; ++r) group.push_back(r);
    } else {
      const auto it = opt_.groups.find(op.axis);
      if (it == opt_.groups.end())
        throw Error("backend cpu: op '" + op.name + "' runs along mesh axis '" + op.axis.str() +
                    "' but the executor was given no groups for it");
      for (std::size_t g = 0; g < it->second.size() && group.empty(); ++g)
        if (std::find(it->second[g].begin(), it->second[g].end(), rank) != it->second[g].end()) {
          group = it->second[g];
          group_index = g;
        }
      if (group.empty())
        throw Error("backend cpu: rank " + std::to_string(rank) + " is in no group along '" + op.axis.str() +
                    "'; the workload mesh must place every running rank");
    }
    const int members = static_cast<int>(group.size());
    if (op.group_size != members)
      throw Error("backend cpu: op '" + op.name + "' is planned for " + std::to_string(op.group_size) + " ranks but " +
                  std::to_string(members) + " are running" +
                  (op.axis == MeshAxis::rank() ? "; launch with -n " + std::to_string(op.group_size) : std::string()));
    const int local = static_cast<int>(std::find(group.begin(), group.end(), rank) - group.begin());
    const std::uint64_t seed = opt_.seed + group_index;
    const CollectiveSpec spec = collective_spec(op, members, 4);
    const Algorithm* alg = op.algorithm.empty() ? nullptr : registry_.find(op.algorithm, op.coll);
    if (alg == nullptr)
      throw Error("backend cpu: op '" + op.name + "' names no algorithm ('" + op.algorithm +
                  "'); the caller resolves auto before running");
    const auto program = alg->build(spec);
    std::vector<float> buffer = seeded_input(spec, local, seed, static_cast<int>(i));
    if (i > 0) barrier();
    const auto begin = std::chrono::steady_clock::now();
    run_collective_cpu(t_, *program, spec, buffer, group);
    const auto end = std::chrono::steady_clock::now();
    auto ps = [&](std::chrono::steady_clock::time_point t) {
      return Time::from_ps(std::chrono::duration_cast<std::chrono::nanoseconds>(t - t0).count() * 1000);
    };
    trace.events.push_back({0, static_cast<int>(i), rank, ps(begin), ps(end)});
    NumericsCheck c;
    c.op = static_cast<int>(i);
    if (spec.bytes * members <= opt_.check_limit_bytes) {
      std::vector<std::vector<float>> inputs;
      for (int r = 0; r < members; ++r) inputs.push_back(seeded_input(spec, r, seed, static_cast<int>(i)));
      const auto expected = run_reference(*program, spec, std::move(inputs))[static_cast<std::size_t>(local)];
      c.checked = true;
      if (expected.size() != buffer.size()) {
        c.max_abs_error = INFINITY;
      } else {
        for (std::size_t k = 0; k < buffer.size(); ++k)
          c.max_abs_error = std::max(c.max_abs_error, static_cast<double>(std::fabs(expected[k] - buffer[k])));
      }
    }
    checks_.push_back(c);
  }
  return trace;
}

}  // namespace meshsim::cpu
