// Test helper: a GPT-style model of the given size (ffn = 4h, no GQA, plain attention),
// the shape docs/math.md's GPT closed forms are written for. For tests only.
#pragma once

#include "schedule/model.h"

namespace meshsim::testing {

inline ModelSpec gpt_model(int layers, int hidden, int heads, int seq, int vocab = 51200) {
  ModelSpec m;
  m.name = "gpt-test";
  m.layers = layers;
  m.hidden = hidden;
  m.heads = heads;
  m.kv_heads = heads;
  m.ffn_hidden = 4 * hidden;
  m.seq = seq;
  m.vocab = vocab;
  return m;
}

}  // namespace meshsim::testing
