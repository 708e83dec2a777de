// newer_state() and newer_log() against the real algorithms: random histories of one key (fixed
// seeds), and for any two states i <= j of a history, the order picks j, from either side.
#include "core/merge.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/algorithm_detail.h"
#include "tests/core/algorithm_checks.h"

namespace sluice {
namespace {

using detail::hi32;
using detail::lo32;
using test::kMs;

// Usual rules, and two kinds at the edges: a year-long period with a burst near 2^32 (GCRA's TAT
// goes past 2^64 ns), and more units than nanoseconds per period (a token bucket's refill position
// moves by fractions of a nanosecond, so `frac` decides between states with the same `last`).
Rule random_rule(std::mt19937_64& rng, Algorithm algorithm) {
  Rule rule{.algorithm = algorithm};
  const bool log = algorithm == Algorithm::kSlidingLog;  // its ring (12) bounds the limit
  switch (log ? 0 : rng() % 8) {
    case 1:
      rule.limit = static_cast<std::uint32_t>(rng() % 3 + 1);
      rule.period_ms = kMaxPeriodMs - rng() % 1000;
      rule.burst =
          std::numeric_limits<std::uint32_t>::max() - static_cast<std::uint32_t>(rng() % 16);
      return rule;
    case 2:
      rule.period_ms = rng() % 3 + 1;
      rule.limit = static_cast<std::uint32_t>(rule.period_ns() + rng() % (1ull << 31));
      rule.burst = rng() % 2 == 0 ? 0 : static_cast<std::uint32_t>(rng() % (1ull << 32));
      return rule;
    default:
      rule.limit = static_cast<std::uint32_t>(rng() % 12 + 1);
      rule.period_ms = rng() % 3 == 0 ? rng() % 5 + 1 : rng() % 2000 + 1;
      rule.burst = log || rng() % 2 == 0 ? 0 : static_cast<std::uint32_t>(rng() % 20);
      return rule;
  }
}

// Equal times, tiny and window-sized steps, and now and then a clock that went back (a failover
// to a node slightly behind).
std::uint64_t next_time(std::mt19937_64& rng, const Rule& rule, std::uint64_t now) {
  const std::uint64_t period = rule.period_ns();
  switch (rng() % 8) {
    case 0:
      return now;
    case 1:
      return now + 1;
    case 2:
      return now + rng() % (period / rule.limit + 1);
    case 3:
      return now + period - rng() % 3;
    case 4:
      return now + rng() % (3 * period);
    case 5:
      return now - std::min(now, rng() % (period / 2 + 1));
    default:
      return now + rng() % (period / 10 + 1);
  }
}

// Up to one more than the capacity (denied for good), small costs most of the time.
std::uint32_t random_cost(std::mt19937_64& rng, const Rule& rule) {
  const std::uint64_t capacity = rule.capacity();
  const std::uint64_t cost = rng() % 2 == 0 ? rng() % 3 + 1 : rng() % (capacity + 1) + 1;
  return static_cast<std::uint32_t>(std::min<std::uint64_t>(cost, 0xffff'ffffu));
}

std::uint64_t start_time(std::mt19937_64& rng) {
  return rng() % 2 == 0 ? rng() % (10'000 * kMs) : (1ull << 62) + rng() % 999;
}

// The state after every request of a random history, the zeroed state first. Peeks and denials
// leave equal states behind, which the order must handle too.
std::vector<CounterState> random_history(std::mt19937_64& rng, Algorithm algorithm, int steps,
                                         bool rule_changes) {
  Rule rule = random_rule(rng, algorithm);
  std::uint64_t now = start_time(rng);
  CounterState state;
  std::vector<CounterState> history{state};
  for (int i = 0; i < steps; ++i) {
    if (rule_changes && rng() % 10 == 0) rule = random_rule(rng, algorithm);
    now = next_time(rng, rule, now);
    const Request request{.now_ns = now, .cost = random_cost(rng, rule), .peek = rng() % 6 == 0};
    decide(rule, state, request);
    history.push_back(state);
  }
  return history;
}

// What the histories exercised: pairs of consecutive different states that the first field of
// the order does not tell apart, so the later fields decide.
struct Coverage {
  int second_field_decides = 0;
  int third_field_decides = 0;
  int gcra_past_2_64_ns = 0;
};

void note_coverage(Algorithm algorithm, const CounterState& x, const CounterState& y,
                   Coverage& coverage) {
  if (x == y) return;
  switch (algorithm) {
    case Algorithm::kTokenBucket:
      if (x.a == y.a)
        ++(hi32(x.b) != hi32(y.b) ? coverage.second_field_decides : coverage.third_field_decides);
      break;
    case Algorithm::kGcra:
      if (hi32(y.b) != 0) ++coverage.gcra_past_2_64_ns;
      if (hi32(x.b) == hi32(y.b)) {
        ++(x.a != y.a ? coverage.second_field_decides : coverage.third_field_decides);
      }
      break;
    default:
      if (x.a == y.a) ++coverage.second_field_decides;
      break;
  }
}

// For every i <= j: newer_state picks s_j from either side; s_i == s_j gives it back. Adds the
// pairs it gets wrong to `wrong`, and describes the first one of all.
void count_misorders(Algorithm algorithm, const std::vector<CounterState>& history, int& wrong,
                     std::string& first) {
  for (std::size_t i = 0; i < history.size(); ++i) {
    for (std::size_t j = i; j < history.size(); ++j) {
      const CounterState& later = history[j];
      if (!(newer_state(algorithm, history[i], later) == later) ||
          !(newer_state(algorithm, later, history[i]) == later)) {
        if (wrong++ == 0) {
          first = "states " + std::to_string(i) + " and " + std::to_string(j) + ": (" +
                  std::to_string(history[i].a) + ", " + std::to_string(history[i].b) + ") then (" +
                  std::to_string(later.a) + ", " + std::to_string(later.b) + ")";
        }
      }
    }
  }
}

void check_random_histories(Algorithm algorithm, std::uint64_t seed, bool rule_changes) {
  std::mt19937_64 rng(seed);
  Coverage coverage;
  int wrong = 0;
  std::string first;
  for (int h = 0; h < 300; ++h) {
    const std::vector<CounterState> history = random_history(rng, algorithm, 60, rule_changes);
    count_misorders(algorithm, history, wrong, first);
    for (std::size_t i = 1; i < history.size(); ++i) {
      note_coverage(algorithm, history[i - 1], history[i], coverage);
    }
  }
  INFO(algorithm_name(algorithm) << (rule_changes ? " with rule changes" : ""));
  INFO("first misorder: " << first);
  CHECK(wrong == 0);
  CHECK(coverage.second_field_decides > 0);
  if (algorithm == Algorithm::kTokenBucket || algorithm == Algorithm::kGcra) {
    CHECK(coverage.third_field_decides > 0);
  }
  if (algorithm == Algorithm::kGcra) CHECK(coverage.gcra_past_2_64_ns > 0);
}

constexpr Algorithm kStateAlgorithms[] = {Algorithm::kFixedWindow, Algorithm::kSlidingWindow,
                                          Algorithm::kTokenBucket, Algorithm::kGcra};

TEST_CASE("newer_state picks the later of any two states of a random history") {
  std::uint64_t seed = 0x6e657765;
  for (const Algorithm algorithm : kStateAlgorithms)
    check_random_histories(algorithm, ++seed, false);
}

TEST_CASE("newer_state needs no rule: the order holds when a key's rule changes") {
  std::uint64_t seed = 0x72756c65;
  for (const Algorithm algorithm : kStateAlgorithms)
    check_random_histories(algorithm, ++seed, true);
}

TEST_CASE("newer_state returns a state compared with itself, and the zeroed state is the oldest") {
  std::mt19937_64 rng(7);
  for (const Algorithm algorithm : kStateAlgorithms) {
    for (int i = 0; i < 1000; ++i) {
      const CounterState s{rng(), rng()};
      CHECK(newer_state(algorithm, s, s) == s);
      CHECK(newer_state(algorithm, CounterState{}, s) == s);
      CHECK(newer_state(algorithm, s, CounterState{}) == s);
    }
  }
}

TEST_CASE("token bucket: with the same last_ns, frac decides before used") {
  // frac is the high half of b, used the low half: a plain (a, b) order would agree here, but
  // not if used were compared first.
  const CounterState more_frac{100, detail::pack32(1, 7)};
  const CounterState more_used{100, detail::pack32(9, 6)};
  CHECK(newer_state(Algorithm::kTokenBucket, more_frac, more_used) == more_frac);
  CHECK(newer_state(Algorithm::kTokenBucket, more_used, more_frac) == more_frac);
  CHECK(newer_state(Algorithm::kTokenBucket, more_used, CounterState{101, 0}) ==
        (CounterState{101, 0}));
}

TEST_CASE("gcra: the TAT's bits above 64 decide first, then tat_ns, then frac") {
  const CounterState beyond{0, detail::pack32(0, 1)};  // tat_ns = 2^64
  const CounterState below{~0ull, detail::pack32(5, 0)};
  CHECK(newer_state(Algorithm::kGcra, below, beyond) == beyond);
  CHECK(newer_state(Algorithm::kGcra, beyond, below) == beyond);
  const CounterState more_frac{10, detail::pack32(3, 0)};
  CHECK(newer_state(Algorithm::kGcra, more_frac, CounterState{10, detail::pack32(2, 0)}) ==
        more_frac);
  CHECK(newer_state(Algorithm::kGcra, CounterState{11, 0}, more_frac) == (CounterState{11, 0}));
}

// A sliding log's live entries, oldest first.
std::vector<std::uint64_t> entries_of(const test::OwnedLog& log) {
  std::vector<std::uint64_t> out;
  for (std::uint32_t i = 0; i < log.count; ++i) {
    out.push_back(log.ring[(log.head + i) % log.ring.size()]);
  }
  return out;
}

TEST_CASE("newer_log picks the later of any two logs of a random history") {
  std::mt19937_64 rng(0x6c6f67);
  int wrong = 0;
  std::string first;
  int emptied = 0;
  int trimmed_by_denial = 0;
  for (int h = 0; h < 400; ++h) {
    const bool rule_changes = h % 2 == 1;
    Rule rule = random_rule(rng, Algorithm::kSlidingLog);
    test::OwnedLog log(12);
    std::uint64_t now = start_time(rng);
    std::vector<std::vector<std::uint64_t>> history{{}};
    for (int i = 0; i < 60; ++i) {
      if (rule_changes && rng() % 10 == 0) rule = random_rule(rng, Algorithm::kSlidingLog);
      now = next_time(rng, rule, now);
      const std::vector<std::uint64_t>& before = history.back();
      const Request request{.now_ns = now, .cost = random_cost(rng, rule), .peek = rng() % 6 == 0};
      const bool allowed = log.step(rule, request).allowed;
      std::vector<std::uint64_t> after = entries_of(log);
      if (!allowed && after.size() < before.size()) ++trimmed_by_denial;
      if (!before.empty() && after.empty()) {
        // Only once every entry has expired at the time the request was judged at.
        ++emptied;
        CHECK(before.back() + rule.period_ns() <= std::max(now, before.back()));
      }
      history.push_back(std::move(after));
    }
    for (std::size_t i = 0; i < history.size(); ++i) {
      CHECK_FALSE(newer_log(history[i], history[i]));
      for (std::size_t j = i + 1; j < history.size(); ++j) {
        // An emptied log cannot be told from a fresh one; it answers as the emptied one did.
        if (history[j].empty() && !history[i].empty()) continue;
        const bool equal = history[i] == history[j];
        if (newer_log(history[i], history[j]) || newer_log(history[j], history[i]) == equal) {
          if (wrong++ == 0) {
            first = "history " + std::to_string(h) + ", logs " + std::to_string(i) + " and " +
                    std::to_string(j);
          }
        }
      }
    }
  }
  INFO("first misorder: " << first);
  CHECK(wrong == 0);
  CHECK(emptied > 0);
  CHECK(trimmed_by_denial > 0);
}

TEST_CASE("a sliding log trimmed by a denial is later than before, though it holds fewer entries") {
  const Rule rule{Algorithm::kSlidingLog, 2, 50, 0};
  test::OwnedLog log(8);
  log.step(rule, Request{.now_ns = 0});
  log.step(rule, Request{.now_ns = 40 * kMs});
  const std::vector<std::uint64_t> before = entries_of(log);
  REQUIRE(before == std::vector<std::uint64_t>{0, 40 * kMs});
  // Costs 2 while one unit is taken: denied, and the entry at 0 has expired at 60 ms.
  REQUIRE_FALSE(log.step(rule, Request{.now_ns = 60 * kMs, .cost = 2}).allowed);
  const std::vector<std::uint64_t> after = entries_of(log);
  REQUIRE(after == std::vector<std::uint64_t>{40 * kMs});
  CHECK(newer_log(after, before));
  CHECK_FALSE(newer_log(before, after));
}

TEST_CASE(
    "newer_log: a later newest entry wins, then more entries at the newest, empty is oldest") {
  using Log = std::vector<std::uint64_t>;
  CHECK(newer_log(Log{50}, Log{10, 20, 40, 40}));
  CHECK(newer_log(Log{10, 40, 40}, Log{10, 40}));
  CHECK(newer_log(Log{40, 40}, Log{10, 40}));
  CHECK(newer_log(Log{40}, Log{10, 40}));
  CHECK(newer_log(Log{1}, Log{}));
  CHECK_FALSE(newer_log(Log{}, Log{1}));
  CHECK_FALSE(newer_log(Log{}, Log{}));
}

TEST_CASE("newer_log reads a log in its ring as the same log laid out flat") {
  std::mt19937_64 rng(11);
  for (int n = 0; n < 2000; ++n) {
    std::vector<std::uint64_t> a(rng() % 6);
    std::vector<std::uint64_t> b(rng() % 6);
    for (auto& t : a) t = rng() % 4;
    for (auto& t : b) t = rng() % 4;
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    std::vector<std::uint64_t> ring(8, 99);
    const auto head = static_cast<std::uint32_t>(rng() % ring.size());
    for (std::size_t i = 0; i < b.size(); ++i) ring[(head + i) % ring.size()] = b[i];
    const SlidingLog in_ring{ring, head, static_cast<std::uint32_t>(b.size())};
    INFO("case " << n);
    CHECK(newer_log(a, in_ring) == newer_log(a, b));
  }
}

}  // namespace
}  // namespace sluice
