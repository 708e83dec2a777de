// decide() and idle_at_ns() dispatch on the rule's algorithm.
#include "core/algorithms.h"

#include "core/algorithm_detail.h"

namespace sluice {

Decision decide(const Rule& rule, CounterState& state, const Request& request) {
  switch (rule.algorithm) {
    case Algorithm::kFixedWindow:
      return fixed_window(rule, state, request);
    case Algorithm::kSlidingWindow:
      return sliding_window(rule, state, request);
    case Algorithm::kTokenBucket:
      return token_bucket(rule, state, request);
    case Algorithm::kGcra:
      return gcra(rule, state, request);
    case Algorithm::kSlidingLog:
      break;  // needs a SlidingLog, not a CounterState
  }
  return detail::never_decision(rule);
}

std::uint64_t idle_at_ns(const Rule& rule, const CounterState& state) {
  // Under a rule that admits nothing the state is never read, so it may go at once.
  if (state == CounterState{} || detail::admits_nothing(rule)) return 0;
  switch (rule.algorithm) {
    case Algorithm::kFixedWindow:
      return detail::fixed_window_idle_at_ns(rule, state);
    case Algorithm::kSlidingWindow:
      return detail::sliding_window_idle_at_ns(rule, state);
    case Algorithm::kTokenBucket:
      return detail::token_bucket_idle_at_ns(rule, state);
    case Algorithm::kGcra:
      return detail::gcra_idle_at_ns(rule, state);
    case Algorithm::kSlidingLog:
      break;  // see sliding_log_idle_at_ns()
  }
  return 0;
}

}  // namespace sluice
