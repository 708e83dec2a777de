// decide() and idle_at_ns() dispatch on the rule's algorithm.
#include "core/algorithms.h"

#include <algorithm>

#include "core/algorithm_detail.h"

namespace sluice {

Verdict decide(const Rule& rule, CounterState& state, const Request& request) {
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

std::vector<StateField> describe_state(Algorithm algorithm, const CounterState& state) {
  switch (algorithm) {
    case Algorithm::kFixedWindow:
      return detail::fixed_window_fields(state);
    case Algorithm::kSlidingWindow:
      return detail::sliding_window_fields(state);
    case Algorithm::kTokenBucket:
      return detail::token_bucket_fields(state);
    case Algorithm::kGcra:
      return detail::gcra_fields(state);
    case Algorithm::kSlidingLog:
      break;
  }
  return {};
}

LeaseGrant lease(const Rule& rule, CounterState& state, const Request& request) {
  if (detail::admits_nothing(rule) || rule.algorithm == Algorithm::kSlidingLog) {
    return LeaseGrant{detail::never_decision(rule), 0, 0};
  }
  LeaseGrant out = grant_lease(request, [&](const Request& r) { return decide(rule, state, r); });
  out.stamp = out.granted != 0 ? lease_stamp(rule, request.now_ns) : 0;
  return out;
}

LeaseGrant sliding_log_lease(const Rule& rule, SlidingLog& log, const Request& request) {
  if (detail::admits_nothing(rule)) return LeaseGrant{detail::never_decision(rule), 0, 0};
  return grant_lease(request, [&](const Request& r) { return sliding_log(rule, log, r); });
}

std::uint32_t lease_stamp(const Rule& rule, std::uint64_t now_ns) {
  switch (rule.algorithm) {
    case Algorithm::kFixedWindow:
    case Algorithm::kSlidingWindow:
      return rule.period_ms == 0 ? 0 : detail::lo32(now_ns / rule.period_ns() + 1);
    case Algorithm::kTokenBucket:
    case Algorithm::kGcra:
      return detail::lo32(now_ns / 1'000'000);
    case Algorithm::kSlidingLog:
      break;
  }
  return 0;
}

std::uint32_t give_back(const Rule& rule, CounterState& state, std::uint32_t units,
                        std::uint32_t stamp, std::uint64_t now_ns) {
  if (units == 0 || detail::admits_nothing(rule)) return 0;
  switch (rule.algorithm) {
    case Algorithm::kFixedWindow:
      return detail::fixed_window_credit(rule, state, units, stamp);
    case Algorithm::kSlidingWindow:
      return detail::sliding_window_credit(rule, state, units, stamp);
    case Algorithm::kTokenBucket:
    case Algorithm::kGcra: {
      // Time since the grant, from the start of the stamp's millisecond (at least the real
      // time: more time is less credit); a stamp ahead of now, or too old to tell, credits
      // nothing.
      const std::uint32_t age_ms = detail::lo32(now_ns / 1'000'000) - stamp;
      if (age_ms > (1u << 31)) return 0;
      const std::uint64_t since_ns = std::uint64_t{age_ms} * 1'000'000 + now_ns % 1'000'000;
      return rule.algorithm == Algorithm::kTokenBucket
                 ? detail::token_bucket_credit(rule, state, units, since_ns, now_ns)
                 : detail::gcra_credit(rule, state, units, since_ns, now_ns);
    }
    case Algorithm::kSlidingLog:
      break;  // never given back (algorithms.h)
  }
  return 0;
}

}  // namespace sluice
