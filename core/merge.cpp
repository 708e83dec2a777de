// Why each order below is the order of a single writer's history. "A store" is an algorithm
// writing its state: only an allowed request that is not a peek, except for the sliding log,
// which also drops expired entries on a denial. Each proof holds for any rule (it may even change
// between requests), any cost >= 1 and any `now`, including equal and decreasing times.
//
// Fixed window (a = window + 1, b = count). fixed_window() stores (w + 1, used + cost) with
// w + 1 = a and used = b when the request falls in the stored window or before it (the clock
// went back: it keeps counting in the later window), else w + 1 = now / period + 1 > a. So a
// store either keeps a and raises b by cost >= 1, or raises a: (a, b) strictly increases.
//
// Sliding window (a = window + 1, b = cur | prev << 32). As above, a store either keeps a, with
// cur = lo32(b) and prev = hi32(b), and writes cur + cost (at most limit < 2^32: no carry into
// prev), so b grows; or it raises a. (a, b) strictly increases.
//
// Token bucket (a = last, b = used | frac << 32). refill() returns the stored (last, frac, used)
// unchanged (used == 0, now <= last, or no time past the refill position), or the full bucket
// (only when now > last), or, having credited gained >= 0 tokens, position = frac +
// gained * period and (last + position / limit, position % limit). With gained = 0 that is
// (last, frac) again when frac < limit (always, under the rule that stored it) and a later last
// otherwise; with gained >= 1, position > frac, so either the last grows or, when
// position < limit, it stays and frac grows. An allowed request then starts a full bucket at
// (now, 0), later than the old state (now > last, or the old state was the zeroed one, which
// every stored state, used >= 1, follows), and adds cost >= 1 to used. So (last, frac) strictly
// increases, or stays while used strictly increases: (last, frac, used) strictly increases.
//
// GCRA (TAT = tat_ns + frac / limit, a = low 64 bits of tat_ns, b = frac | tat_ns bits 64..95
// << 32). A store writes max(TAT, now) + cost * period > TAT, as (TAT' / limit, TAT' % limit).
// x -> (x / L, x % L) is strictly increasing (lexicographically) for a fixed L, and the TAT loaded
// under the storing rule's limit is exactly the stored pair; under another limit L, frac < L reads
// back the same pair, and frac >= L makes the load at least (tat_ns + 1) * L, so tat_ns grows.
// Either way (tat_ns, frac), i.e. (hi32(b), a, lo32(b)), strictly increases.
//
// Sliding log. A store judges at N = max(now, newest), drops the entries <= N - period (a
// prefix) and, if allowed, appends cost copies of N. So:
//  - allowed with N > newest: the newest timestamp grows;
//  - allowed with N == newest: the entries equal to the newest are not dropped (that needs
//    newest <= newest - period), and cost more are appended: their number grows. (Under one
//    rule nothing is dropped at all, since the previous store dropped all <= N' - period for
//    an N' >= its newest.)
//  - denied: a prefix is dropped. Entries equal to the newest go only with all the others
//    (they are the last ones), so either the newest and its entries stay and fewer older ones
//    remain, or the log empties: possible only when every entry had expired at N (a request
//    costing more than the limit), from when the old log answered as the empty one does.
// So (newest, entries at the newest, minus entries before it) strictly increases at every store
// that leaves the log non-empty. An export (the live entries at the exporter's now) is what a
// denial at that now would store, so it is ordered as a state of the same history.
#include "core/merge.h"

#include <cstddef>

#include "core/algorithm_detail.h"

namespace sluice {
namespace {

using detail::hi32;
using detail::lo32;

// Lexicographic comparison of (x0, x1, x2) with (y0, y1, y2).
constexpr bool later3(std::uint64_t x0, std::uint64_t x1, std::uint64_t x2, std::uint64_t y0,
                      std::uint64_t y1, std::uint64_t y2) {
  if (x0 != y0) return x0 > y0;
  if (x1 != y1) return x1 > y1;
  return x2 > y2;
}

// Whether `x` is strictly later than `y`.
bool later_state(Algorithm algorithm, const CounterState& x, const CounterState& y) {
  switch (algorithm) {
    case Algorithm::kTokenBucket:
      return later3(x.a, hi32(x.b), lo32(x.b), y.a, hi32(y.b), lo32(y.b));
    case Algorithm::kGcra:
      return later3(hi32(x.b), x.a, lo32(x.b), hi32(y.b), y.a, lo32(y.b));
    case Algorithm::kFixedWindow:
    case Algorithm::kSlidingWindow:
    case Algorithm::kSlidingLog:
      break;
  }
  return later3(x.a, x.b, 0, y.a, y.b, 0);
}

// What the order of logs looks at.
struct LogSummary {
  std::size_t size = 0;
  std::uint64_t newest = 0;
  std::size_t at_newest = 0;  // entries equal to the newest: the last ones, as the log is sorted
};

// `at(i)` is entry i, oldest first, for i < size. Bisects for the first entry equal to the
// newest; on an unsorted log it still ends, with some count.
template <typename At>
LogSummary summarize(std::size_t size, At at) {
  if (size == 0) return {};
  const std::uint64_t newest = at(size - 1);
  std::size_t lo = 0;
  std::size_t hi = size - 1;  // at(hi) == newest
  while (lo < hi) {
    const std::size_t mid = lo + (hi - lo) / 2;
    if (at(mid) < newest) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return {size, newest, size - lo};
}

bool later_log(const LogSummary& x, const LogSummary& y) {
  if (x.size == 0 || y.size == 0) return x.size != 0 && y.size == 0;
  if (x.newest != y.newest) return x.newest > y.newest;
  if (x.at_newest != y.at_newest) return x.at_newest > y.at_newest;
  return x.size < y.size;
}

LogSummary summarize(std::span<const std::uint64_t> log) {
  return summarize(log.size(), [log](std::size_t i) { return log[i]; });
}

}  // namespace

CounterState newer_state(Algorithm algorithm, const CounterState& a, const CounterState& b) {
  return later_state(algorithm, b, a) ? b : a;
}

bool newer_log(std::span<const std::uint64_t> a, std::span<const std::uint64_t> b) {
  return later_log(summarize(a), summarize(b));
}

bool newer_log(std::span<const std::uint64_t> a, const SlidingLog& b) {
  // Indices made safe for any head and count, as sliding_log() reads them.
  const std::size_t ring = b.ring.size();
  const std::size_t head = ring == 0 ? 0 : b.head % ring;
  const std::size_t count = b.count < ring ? b.count : ring;
  const LogSummary y = summarize(count, [&b, ring, head](std::size_t i) {
    const std::size_t index = head + i;  // < 2 * ring
    return b.ring[index < ring ? index : index - ring];
  });
  return later_log(summarize(a), y);
}

}  // namespace sluice
