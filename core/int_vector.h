// A std::vector indexed by int. Ranks, stages, roles, ops, streams and GPUs are ints
// throughout meshsim (a schedule's global op ids, a topology's device ids); IntVector takes
// them as they are, so a subscript needs no static_cast<std::size_t>, and ssize() gives the
// length as an int for the loops over them.
//
//   IntVector<Time> start(n);      // n = number of ops
//   start[g] = now;                // g: an int op id
//   for (int g = 0; g < start.ssize(); ++g) ...
//
// A negative index is a bug: asserted in debug builds (NDEBUG off), like std::vector's own.
#pragma once

#include <cassert>
#include <cstddef>
#include <vector>

namespace meshsim {

template <class T>
class IntVector : public std::vector<T> {
 public:
  using std::vector<T>::vector;
  IntVector() = default;
  explicit IntVector(std::vector<T> v) : std::vector<T>(std::move(v)) {}

  T& operator[](int i) {
    assert(i >= 0 && i < ssize());
    return std::vector<T>::operator[](static_cast<std::size_t>(i));
  }
  const T& operator[](int i) const {
    assert(i >= 0 && i < ssize());
    return std::vector<T>::operator[](static_cast<std::size_t>(i));
  }
  int ssize() const { return static_cast<int>(std::vector<T>::size()); }
};

}  // namespace meshsim
