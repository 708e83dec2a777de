// prefer_state() and prefer_log() against the real algorithms: random histories of one key (fixed
// seeds), and for any two states i <= j of a history, the order keeps j, from either side; and
// pairs of copies that diverged from one state, of which it keeps the more consumed.
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

// One state of a history, with its idle time under the rule in force when it was left behind.
struct Step {
  CounterState state;
  std::uint64_t idle_at_ns = 0;
};

// As the table keeps it: rounded up to 2^19 ns.
std::uint64_t rounded(std::uint64_t idle_at_ns) {
  constexpr std::uint64_t kUnit = std::uint64_t{1} << 19;
  return idle_at_ns >= ~std::uint64_t{0} - kUnit ? idle_at_ns
                                                 : (idle_at_ns + kUnit - 1) & ~(kUnit - 1);
}

// The state after every request of a random history, the zeroed state first. Peeks and denials
// leave equal states behind, which the order must handle too.
std::vector<Step> random_history(std::mt19937_64& rng, Algorithm algorithm, int steps,
                                 bool rule_changes) {
  Rule rule = random_rule(rng, algorithm);
  std::uint64_t now = start_time(rng);
  CounterState state;
  std::vector<Step> history{{state, 0}};
  for (int i = 0; i < steps; ++i) {
    if (rule_changes && rng() % 10 == 0) rule = random_rule(rng, algorithm);
    now = next_time(rng, rule, now);
    const Request request{.now_ns = now, .cost = random_cost(rng, rule), .peek = rng() % 6 == 0};
    decide(rule, state, request);
    history.push_back({state, idle_at_ns(rule, state)});
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

void note_coverage(Algorithm algorithm, const Step& sx, const Step& sy, Coverage& coverage) {
  const CounterState& x = sx.state;
  const CounterState& y = sy.state;
  if (x == y) return;
  switch (algorithm) {
    case Algorithm::kTokenBucket:
      // The time it is full again first, then last_ns.
      if (rounded(sx.idle_at_ns) == rounded(sy.idle_at_ns))
        ++(x.a != y.a ? coverage.second_field_decides : coverage.third_field_decides);
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

// For every i <= j: s_j is kept over s_i from either side, with the exact idle times and with
// the table's rounded ones; s_i == s_j keeps the one held. Adds the pairs it gets wrong to
// `wrong`, and describes the first one of all. With `allow_fuller_earlier`, a pair is not wrong
// when s_i is the one kept and is full again later than s_j by its own rule (a token bucket
// whose rule changed in between: merge.cpp, "Limit").
void count_misorders(Algorithm algorithm, const std::vector<Step>& history, int& wrong,
                     std::string& first, bool allow_fuller_earlier = false) {
  for (const bool round : {false, true}) {
    const auto copy = [round](const Step& s) {
      return StateCopy{s.state, round ? rounded(s.idle_at_ns) : s.idle_at_ns};
    };
    for (std::size_t i = 0; i < history.size(); ++i) {
      for (std::size_t j = i; j < history.size(); ++j) {
        const StateCopy earlier = copy(history[i]);
        const StateCopy later = copy(history[j]);
        const bool ok = !prefer_state(algorithm, earlier, later) &&
                        kept_state(algorithm, later, earlier).state == later.state &&
                        kept_state(algorithm, earlier, later).state == later.state;
        if (ok || (allow_fuller_earlier && earlier.idle_at_ns > later.idle_at_ns)) continue;
        if (wrong++ == 0) {
          first = "states " + std::to_string(i) + " and " + std::to_string(j) + ": (" +
                  std::to_string(earlier.state.a) + ", " + std::to_string(earlier.state.b) +
                  ") then (" + std::to_string(later.state.a) + ", " +
                  std::to_string(later.state.b) + ")";
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
  const bool rule_bound = algorithm == Algorithm::kTokenBucket && rule_changes;
  for (int h = 0; h < 300; ++h) {
    const std::vector<Step> history = random_history(rng, algorithm, 60, rule_changes);
    count_misorders(algorithm, history, wrong, first, rule_bound);
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

TEST_CASE("prefer_state keeps the later of any two states of a random history") {
  std::uint64_t seed = 0x6e657765;
  for (const Algorithm algorithm : kStateAlgorithms)
    check_random_histories(algorithm, ++seed, false);
}

TEST_CASE("prefer_state needs no rule: the order holds when a key's rule changes") {
  // The token bucket's holds but for the copy of an old rule that is full again later by it.
  std::uint64_t seed = 0x72756c65;
  for (const Algorithm algorithm : kStateAlgorithms)
    check_random_histories(algorithm, ++seed, true);
}

TEST_CASE("prefer_state keeps a state compared with itself, and never prefers the zeroed state") {
  std::mt19937_64 rng(7);
  for (const Algorithm algorithm : kStateAlgorithms) {
    for (int i = 0; i < 1000; ++i) {
      const StateCopy s{{rng(), rng()}, rng() % 4 == 0 ? 0 : rng()};
      const StateCopy fresh{};
      CHECK_FALSE(prefer_state(algorithm, s, s));
      CHECK_FALSE(prefer_state(algorithm, fresh, s));
      CHECK(kept_state(algorithm, fresh, s).state == s.state);
      CHECK(kept_state(algorithm, s, fresh).state == s.state);
    }
  }
}

TEST_CASE("token bucket: the copy full again later wins, then last_ns, frac and used") {
  const StateCopy touched_later{{200, detail::pack32(1, 0)}, 1'000};
  const StateCopy fuller_later{{100, detail::pack32(9, 0)}, 5'000};
  CHECK(prefer_state(Algorithm::kTokenBucket, fuller_later, touched_later));
  CHECK_FALSE(prefer_state(Algorithm::kTokenBucket, touched_later, fuller_later));
  // With the same idle time, frac (the high half of b) decides before used.
  const StateCopy more_frac{{100, detail::pack32(1, 7)}, 900};
  const StateCopy more_used{{100, detail::pack32(9, 6)}, 900};
  CHECK(kept_state(Algorithm::kTokenBucket, more_used, more_frac).state == more_frac.state);
  CHECK(kept_state(Algorithm::kTokenBucket, more_frac, more_used).state == more_frac.state);
}

TEST_CASE("gcra: the TAT's bits above 64 decide first, then tat_ns, then frac") {
  const StateCopy beyond{{0, detail::pack32(0, 1)}, 0};  // tat_ns = 2^64
  const StateCopy below{{~0ull, detail::pack32(5, 0)}, 0};
  CHECK(prefer_state(Algorithm::kGcra, beyond, below));
  CHECK_FALSE(prefer_state(Algorithm::kGcra, below, beyond));
  const StateCopy more_frac{{10, detail::pack32(3, 0)}, 0};
  CHECK(prefer_state(Algorithm::kGcra, more_frac, StateCopy{{10, detail::pack32(2, 0)}, 0}));
  CHECK(prefer_state(Algorithm::kGcra, StateCopy{{11, 0}, 0}, more_frac));
}

TEST_CASE("sliding window: in one window the larger count at its start wins, not the previous") {
  // Window 7: 5 before and none now, against 4 before and 10 now (b = cur | prev << 32).
  const StateCopy prev_heavy{{8, detail::pack32(0, 5)}, 0};
  const StateCopy busier{{8, detail::pack32(10, 4)}, 0};
  CHECK(prefer_state(Algorithm::kSlidingWindow, busier, prev_heavy));
  CHECK_FALSE(prefer_state(Algorithm::kSlidingWindow, prev_heavy, busier));
  // The same sum: the current count weighs for longer.
  CHECK(prefer_state(Algorithm::kSlidingWindow, StateCopy{{8, detail::pack32(6, 3)}, 0},
                     StateCopy{{8, detail::pack32(4, 5)}, 0}));
  // A later window wins whatever its counts.
  CHECK(prefer_state(Algorithm::kSlidingWindow, StateCopy{{9, detail::pack32(1, 0)}, 0}, busier));
}

// Two copies of one key that diverged from a common state under one rule, each decided by
// another node from `split` on; the copy kept has no more left than the other at a time after
// every request of both. Fixed window, token bucket and GCRA are exact (the token bucket to its
// idle time's nanosecond); the sliding window counter at the start of the later copy's window.
TEST_CASE("prefer_state keeps the more consumed of two diverged copies") {
  std::mt19937_64 rng(0x646976);
  int checked = 0;
  int kept_older_touch = 0;  // the copy kept was the one whose last store came first
  for (const Algorithm algorithm : kStateAlgorithms) {
    for (int h = 0; h < 2000; ++h) {
      const Rule rule = random_rule(rng, algorithm);
      std::uint64_t now = start_time(rng);
      CounterState common;
      for (int i = rng() % 6; i > 0; --i) {
        now = next_time(rng, rule, now);
        decide(rule, common, Request{.now_ns = now, .cost = random_cost(rng, rule)});
      }
      std::uint64_t end = now;
      std::uint64_t touched[2] = {now, now};
      StateCopy copies[2];
      for (int c = 0; c < 2; ++c) {
        CounterState state = common;
        std::uint64_t t = now;
        for (int i = rng() % 8; i > 0; --i) {
          t += rng() % (rule.period_ns() / 4 + 1);  // forward only: each node's clock
          if (decide(rule, state, Request{.now_ns = t, .cost = random_cost(rng, rule)}).allowed) {
            touched[c] = t;
          }
        }
        end = std::max(end, t);
        copies[c] = StateCopy{state, idle_at_ns(rule, state)};
      }
      const StateCopy& kept = kept_state(algorithm, copies[0], copies[1]);
      const StateCopy& other = &kept == &copies[0] ? copies[1] : copies[0];
      if (kept.state == other.state) continue;
      if (algorithm == Algorithm::kTokenBucket && kept.idle_at_ns == other.idle_at_ns) continue;
      const std::uint64_t at = end + 1;
      INFO(algorithm_name(algorithm) << " history " << h);
      if (algorithm == Algorithm::kSlidingWindow) {
        if (kept.state.a != other.state.a) continue;  // a later window: see the limit in merge.cpp
        // Never a copy with no more of either count; more consumed at every instant when it
        // has no less of both.
        const std::uint32_t kc = lo32(kept.state.b), kp = hi32(kept.state.b);
        const std::uint32_t oc = lo32(other.state.b), op = hi32(other.state.b);
        CHECK_FALSE((oc >= kc && op >= kp));
        if (!(kc >= oc && kp >= op)) continue;
      }
      const auto left = [&](CounterState s) {
        return decide(rule, s, Request{.now_ns = at, .cost = 1, .peek = true}).remaining;
      };
      CHECK(left(kept.state) <= left(other.state));
      ++checked;
      if (touched[&kept == &copies[0] ? 0 : 1] < touched[&kept == &copies[0] ? 1 : 0]) {
        ++kept_older_touch;
      }
    }
  }
  CHECK(checked > 1000);
  CHECK(kept_older_touch > 0);  // where "the later" would have picked the other one
}

// A sliding log's live entries, oldest first.
std::vector<std::uint64_t> entries_of(const test::OwnedLog& log) {
  std::vector<std::uint64_t> out;
  for (std::uint32_t i = 0; i < log.count; ++i) {
    out.push_back(log.ring[(log.head + i) % log.ring.size()]);
  }
  return out;
}

// The live entries of a log after each request of a random history under one rule, with the
// floor of its idle time (exact, or as the table rounds it) and the latest time any request was
// judged at so far (a receiver at or after it sees the later copy win).
struct LogStep {
  std::vector<std::uint64_t> entries;
  std::uint64_t idle_at_ns = 0;
  std::uint64_t judged_until = 0;
};

std::uint64_t table_floor(std::uint64_t idle_at_ns) {
  constexpr std::uint64_t kUnit = std::uint64_t{1} << 19;
  const std::uint64_t expiry = rounded(idle_at_ns);
  return expiry == 0 ? 0 : expiry - (kUnit - 1);
}

TEST_CASE("prefer_log keeps the later of any two logs of a random history") {
  std::mt19937_64 rng(0x6c6f67);
  int wrong = 0;
  std::string first;
  int emptied = 0;
  int trimmed_by_denial = 0;
  int count_decides = 0;
  for (int h = 0; h < 400; ++h) {
    const Rule rule = random_rule(rng, Algorithm::kSlidingLog);
    test::OwnedLog log(12);
    std::uint64_t now = start_time(rng);
    std::uint64_t judged = now;
    std::vector<LogStep> history{{{}, 0, now}};
    for (int i = 0; i < 60; ++i) {
      now = next_time(rng, rule, now);
      const LogStep& before = history.back();
      const Request request{.now_ns = now, .cost = random_cost(rng, rule), .peek = rng() % 6 == 0};
      judged = std::max({judged, now, before.entries.empty() ? 0 : before.entries.back()});
      const bool allowed = log.step(rule, request).allowed;
      std::vector<std::uint64_t> after = entries_of(log);
      if (!allowed && after.size() < before.entries.size()) ++trimmed_by_denial;
      if (!before.entries.empty() && after.empty()) {
        // Only once every entry has expired at the time the request was judged at.
        ++emptied;
        CHECK(before.entries.back() + rule.period_ns() <= std::max(now, before.entries.back()));
      }
      const std::uint64_t idle = log.idle_at(rule);
      history.push_back({std::move(after), idle, judged});
    }
    for (const bool table : {false, true}) {
      const auto copy = [table](const LogStep& s) {
        return LogCopy{s.entries, table ? table_floor(s.idle_at_ns) : s.idle_at_ns};
      };
      for (std::size_t i = 0; i < history.size(); ++i) {
        CHECK_FALSE(prefer_log(copy(history[i]), copy(history[i]), history[i].judged_until));
        for (std::size_t j = i + 1; j < history.size(); ++j) {
          // An emptied log cannot be told from a fresh one; it answers as the emptied one did.
          if (history[j].entries.empty() && !history[i].entries.empty()) continue;
          const bool equal = history[i].entries == history[j].entries;
          const std::uint64_t at = history[j].judged_until + rng() % 1000;
          if (prefer_log(copy(history[i]), copy(history[j]), at) ||
              prefer_log(copy(history[j]), copy(history[i]), at) == equal) {
            if (wrong++ == 0) {
              first = "history " + std::to_string(h) + ", logs " + std::to_string(i) + " and " +
                      std::to_string(j);
            }
          }
          if (!equal && history[i].entries.size() > history[j].entries.size()) ++count_decides;
        }
      }
    }
  }
  INFO("first misorder: " << first);
  CHECK(wrong == 0);
  CHECK(emptied > 0);
  CHECK(trimmed_by_denial > 0);
  CHECK(count_decides > 0);
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
  const std::uint64_t idle = 90 * kMs;
  CHECK(prefer_log(LogCopy{after, idle}, LogCopy{before, idle}, 60 * kMs));
  CHECK_FALSE(prefer_log(LogCopy{before, idle}, LogCopy{after, idle}, 60 * kMs));
}

TEST_CASE("prefer_log: an old copy that used its limit beats a fresh one with a later entry") {
  using Log = std::vector<std::uint64_t>;
  // Period 10 s (idle = newest + 10 s): the old copy's 4 entries still count at 7 s.
  const Log old_copy{1000 * kMs, 1100 * kMs, 1200 * kMs, 1300 * kMs};
  const Log fresh{7000 * kMs};
  const LogCopy o{old_copy, 11'300 * kMs};
  const LogCopy f{fresh, 17'000 * kMs};
  CHECK(prefer_log(o, f, 7000 * kMs));
  CHECK_FALSE(prefer_log(f, o, 7000 * kMs));
  // Once the old entries have expired the fresh copy is the one with entries.
  CHECK(prefer_log(f, o, 11'200 * kMs));
  // As many live entries: the later newest, then more at it, then fewer before it.
  CHECK(prefer_log(LogCopy{Log{10, 40}, 140}, LogCopy{Log{50}, 150}, 50));
  CHECK(prefer_log(LogCopy{Log{50}, 150}, LogCopy{Log{40}, 140}, 50));
  CHECK(prefer_log(LogCopy{Log{40, 40}, 140}, LogCopy{Log{10, 40}, 140}, 45));
  CHECK(prefer_log(LogCopy{Log{40}, 140}, LogCopy{Log{10, 40}, 140}, 120));
  CHECK(prefer_log(LogCopy{Log{1}, 2}, LogCopy{Log{}, 0}, 0));
  CHECK_FALSE(prefer_log(LogCopy{Log{}, 0}, LogCopy{Log{1}, 2}, 0));
  CHECK_FALSE(prefer_log(LogCopy{Log{}, 0}, LogCopy{Log{}, 0}, 0));
}

TEST_CASE("prefer_log reads a log in its ring as the same log laid out flat") {
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
    const std::uint64_t a_idle = rng() % 8;
    const std::uint64_t b_idle = rng() % 8;
    const std::uint64_t now = rng() % 6;
    INFO("case " << n);
    CHECK(prefer_log(LogCopy{a, a_idle}, in_ring, b_idle, now) ==
          prefer_log(LogCopy{a, a_idle}, LogCopy{b, b_idle}, now));
  }
}

}  // namespace
}  // namespace sluice
