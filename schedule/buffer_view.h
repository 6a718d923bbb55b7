// The teaching view of a step program (issue 37 item 1): what every rank's buffer holds after
// each round, symbolically: for every byte, whose inputs it holds (one rank's data, a partial
// sum of several ranks' inputs, or the complete result). Run on the program's own transfers
// and offsets, so it shows what the executors do, not a drawing made apart from them.
//
//   const auto prog = algorithm.build(spec);
//   const BufferView v = buffer_view(*prog, spec);   // spec.ranks <= kMaxViewRanks
//   std::cout << buffer_view_text(v, spec);          // a table per round, a row per rank
//
// Rounds: every rank starts its first step together; a step ends in the round after the one
// in which every message it receives was sent (messages are eager and carry the sender's
// buffer as its step began; between one pair of ranks they are matched in order), and the
// rank's next step starts in that same round. A synchronous algorithm (ring, recursive
// doubling) thus takes one round per step; a tree's ranks wait for their children.
// The buffer shown: all-reduce, reduce, broadcast, reduce-scatter and all-gather their one
// buffer, all-to-all and send/recv the receive buffer; p columns, slice i of the buffer each.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "schedule/collective.h"

namespace meshsim {

inline constexpr int kMaxViewRanks = 16;
inline constexpr int kMaxViewRounds = 64;

// What a slice of one rank's buffer holds: the ranks whose inputs it sums (or, in an
// all-gather, all-to-all or broadcast, whose data it is); mixed when the slice's bytes differ.
struct SliceState {
  std::uint32_t ranks = 0;  // bit r: rank r's input is in it; 0: nothing yet
  bool mixed = false;
};

struct BufferRound {
  int round = 0;                               // 0: before the first step
  int messages = 0;                            // messages that arrived in this round
  bool reduced = false;                        // some arrived message was reduced into its buffer
  bool copied = false;                         // some was copied
  std::vector<std::vector<SliceState>> ranks;  // [rank][slice]
};

struct BufferView {
  std::vector<BufferRound> rounds;
  // Every pair of ranks that exchanged a message: [sender] -> receivers, ascending.
  std::vector<std::vector<int>> talks_to;
  bool truncated = false;  // more rounds than kMaxViewRounds: the rest are not shown
  std::string not_shown;   // why there is no view (too many ranks, a program that stalls)
};

BufferView buffer_view(const StepProgram& prog, const CollectiveSpec& spec);

// A cell's text: "." (nothing), the ranks as ranges ("0-2,5", "3": one rank's data), "all" for
// the sum of every rank's input when `sums` (the collective reduces).
std::string ranks_text(std::uint32_t ranks, int p, bool sums);

// The view as text: who talks to whom (a ring drawn as one cycle), then a table per round
// (phase: reduce, copy or both), each cell "." (nothing), a rank ("3": rank 3's data), the
// ranks of a partial sum ("0-2,5") or "all" (every rank's input: a finished reduction), "~"
// for a slice holding different things in its parts.
std::string buffer_view_text(const BufferView& v, const CollectiveSpec& spec);

}  // namespace meshsim
