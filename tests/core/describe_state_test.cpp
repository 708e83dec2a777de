// describe_state() reads each algorithm's state as docs/ALGORITHMS.md lays it out: checked
// against states the algorithms themselves wrote, not against hand-packed words.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "core/algorithms.h"

namespace sluice {
namespace {

constexpr std::uint64_t kSec = 1'000'000'000;

std::string fields_text(Algorithm algorithm, const CounterState& state) {
  std::string out;
  for (const StateField& field : describe_state(algorithm, state)) {
    out += std::string(field.name) + "=" + std::to_string(field.value) +
           (field.is_time ? "(time) " : " ");
  }
  return out;
}

TEST_CASE("describe_state names a fixed window's window and count", "[describe_state]") {
  const Rule rule{.algorithm = Algorithm::kFixedWindow, .limit = 10, .period_ms = 1000};
  CounterState state;
  CHECK(fields_text(Algorithm::kFixedWindow, state) == "window=0 count=0 ");
  fixed_window(rule, state, Request{.now_ns = 42 * kSec + 5, .cost = 3});
  fixed_window(rule, state, Request{.now_ns = 42 * kSec + 9, .cost = 2});
  CHECK(fields_text(Algorithm::kFixedWindow, state) == "window=42 count=5 ");
}

TEST_CASE("describe_state names a sliding window's window and both counts", "[describe_state]") {
  const Rule rule{.algorithm = Algorithm::kSlidingWindow, .limit = 10, .period_ms = 1000};
  CounterState state;
  sliding_window(rule, state, Request{.now_ns = 7 * kSec, .cost = 4});
  sliding_window(rule, state, Request{.now_ns = 8 * kSec + kSec / 2, .cost = 1});
  CHECK(fields_text(Algorithm::kSlidingWindow, state) == "window=8 current=1 previous=4 ");
}

TEST_CASE("describe_state names a token bucket's missing tokens and refill position",
          "[describe_state]") {
  const Rule rule{.algorithm = Algorithm::kTokenBucket, .limit = 2, .period_ms = 1000, .burst = 4};
  CounterState state;
  token_bucket(rule, state, Request{.now_ns = 10 * kSec, .cost = 3});
  CHECK(fields_text(Algorithm::kTokenBucket, state) ==
        "used=3 refill_position=" + std::to_string(10 * kSec) + "(time) ");
  // One token earned at 10.5 s moves the position there.
  token_bucket(rule, state, Request{.now_ns = 10 * kSec + kSec * 3 / 4, .cost = 1});
  CHECK(fields_text(Algorithm::kTokenBucket, state) ==
        "used=3 refill_position=" + std::to_string(10 * kSec + kSec / 2) + "(time) ");
}

TEST_CASE("describe_state names GCRA's theoretical arrival time", "[describe_state]") {
  const Rule rule{.algorithm = Algorithm::kGcra, .limit = 10, .period_ms = 1000};
  CounterState state;
  gcra(rule, state, Request{.now_ns = 5 * kSec, .cost = 2});
  // Two units of 100 ms each past now.
  CHECK(fields_text(Algorithm::kGcra, state) ==
        "tat=" + std::to_string(5 * kSec + 2 * kSec / 10) + "(time) ");
  // A TAT past 2^64 ns (bits 64..95 set) shows as the largest time.
  CHECK(fields_text(Algorithm::kGcra, CounterState{.a = 1, .b = std::uint64_t{1} << 32}) ==
        "tat=18446744073709551615(time) ");
}

TEST_CASE("describe_state has no fields for the sliding log", "[describe_state]") {
  CHECK(describe_state(Algorithm::kSlidingLog, CounterState{.a = 1, .b = 2}).empty());
}

}  // namespace
}  // namespace sluice
