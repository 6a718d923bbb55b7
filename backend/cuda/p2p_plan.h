// Pipeline Send/Recv on NCCL without deadlock, and the host issue order of a role's ops.
//
// The simulator's pipeline sends are eager (a send never waits for its receive); an
// ncclSend blocks the GPU until the peer's ncclRecv runs, and NCCL does not promise that
// two operations of a rank progress at once. Issued in schedule order on one stream, 1F1B
// deadlocks: in the steady state stage 0 sends activation i+1 before it receives gradient
// i, while stage 1 sends gradient i before it receives activation i+1.
//
// So every rank issues its pipeline messages in one global message order, computed the
// same way on every rank from the whole schedule: a topological order of all roles' ops
// (edges: op.deps, the order of each non-pp stream, and send -> receive of each message),
// a message ranked by where its send lands. A Recv waits for nothing local
// (Emitter::recv), so moving it earlier on the pp stream only relaxes; a Send's inputs
// come from receives ranked below it. Then the unfinished message ranked lowest always has
// both ends at the front of their ranks' pp streams with their inputs ready, even if NCCL
// runs every operation one after another: no deadlock, and no ncclGroup needed.
//
//   1F1B, pp=2, 4 micro-batches (S/R tag):  stage 0  S0 S4 R1 S8 R5 S12 R9 R13
//                                           stage 1  R0 R4 S1 R8 S5 R12 S9 S13
//
// The host issues a role's ops in a topological order of its own ops (deps, each stream's
// order, the pp ops in message order), keeping schedule order where it can.
#pragma once

#include <vector>

#include "schedule/ir.h"

namespace meshsim::cuda {

// Per role of the schedule: its Send/Recv op indices in the order they are issued. Throws
// Error for a message without its other end (a tag sent but never received, or twice) or
// when the messages' dependencies form a cycle.
std::vector<std::vector<int>> plan_p2p_order(const Schedule& schedule);

// The host issue order of role `role`: every op index once, deps first, each stream's ops
// in order, the Send/Recv ops in `p2p_order`.
std::vector<int> issue_order(const Schedule& schedule, int role, const std::vector<int>& p2p_order);

}  // namespace meshsim::cuda
