// Errors as values for the code whose errors are messages for an operator (cluster/, etcd/): an
// Expected<T, E> holds either a T or the E that says why there is none. It is the part of
// C++23's std::expected that they need (g++ 12 has no std::expected in C++20 mode), spelled the
// same way so that it can be swapped for it later. E is a std::string unless said otherwise.
//
// The client library has an error type of its own, client::Result<T> with a client::Status: its
// errors carry an ErrorCode that a program branches on (retry, fail open, give up), and it is
// the public API's, shaped like Status (ok(), status(), code()). Expected is for errors that a
// program only passes on to a person.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace sluice {

// What a failed Expected is made from: `return Unexpected{message};`.
template <typename E>
struct Unexpected {
  E error;
};
template <typename E>
Unexpected(E) -> Unexpected<E>;

template <typename T, typename E = std::string>
class Expected {
 public:
  Expected(T value) : state_(std::in_place_index<0>, std::move(value)) {}  // NOLINT: implicit
  template <typename G>
  Expected(Unexpected<G> failure)  // NOLINT: implicit on purpose
      : state_(std::in_place_index<1>, E(std::move(failure.error))) {}

  bool has_value() const { return state_.index() == 0; }
  explicit operator bool() const { return has_value(); }

  // REQUIRES: has_value(). On a temporary, value() moves the T out and returns it (not a T&&
  // as std::expected does), so `for (auto& x : f().value())` does not dangle.
  const T& value() const& { return std::get<0>(state_); }
  T& value() & { return std::get<0>(state_); }
  T value() && { return std::get<0>(std::move(state_)); }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

  // REQUIRES: !has_value().
  const E& error() const { return std::get<1>(state_); }

 private:
  std::variant<T, E> state_;
};

}  // namespace sluice
