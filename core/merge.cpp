// Why each order below keeps the later of two states of one writer's history (so a replica
// always takes what its primary sends next), and what it keeps of two copies that diverged. "A
// store" is an algorithm writing its state: only an allowed request that is not a peek, except
// for the sliding log, which also drops expired entries on a denial. A give-back moves a state
// back; no order here takes it over the state before it (the replica keeps the more consumed
// copy, which errs towards denying). Unless said otherwise each proof holds for any rule (it may
// even change between requests), any cost >= 1 and any `now`, including equal and decreasing
// times. An order that strictly increases at every store that changes the state prefers the
// later of any two states of a history.
//
// Fixed window (a = window + 1, b = count). fixed_window() stores (w + 1, used + cost) with
// w + 1 = a and used = b when the request falls in the stored window or before it (the clock
// went back: it keeps counting in the later window), else w + 1 = now / period + 1 > a. So a
// store either keeps a and raises b by cost >= 1, or raises a: (a, b) strictly increases. Of two
// diverged copies it keeps the later window, and in one window the higher count.
//
// Sliding window (a = window + 1, b = cur | prev << 32). As above, a store either keeps a, with
// prev = hi32(b) unchanged and cur = lo32(b) raised by cost (at most limit < 2^32: no carry into
// prev), or raises a. So (a, cur + prev, cur, prev) strictly increases. Of two copies of one
// window, the used count at an instant e of its period P is cur + ceil(prev * (P - e) / P): a
// copy with no less of either is no less consumed at every instant, and between two copies
// where neither dominates, which is more consumed depends on e and P, which the record does not
// hold; the order takes the count at the window's start (cur + prev), its largest. Limit: a copy
// of the window before loses to any copy of the later window, though its count still weighs
// there as `prev`.
//
// Token bucket (a = last, b = used | frac << 32). refill() returns the stored (last, frac, used)
// unchanged (used == 0, now <= last, or no time past the refill position), or the full bucket
// (only when now > last), or, having credited gained >= 0 tokens, position = frac +
// gained * period and (last + position / limit, position % limit). With gained = 0 that is
// (last, frac) again when frac < limit (always, under the rule that stored it) and a later last
// otherwise; with gained >= 1, position > frac, so either the last grows or, when
// position < limit, it stays and frac grows. An allowed request then starts a full bucket at
// (now, 0), later than the old state (now > last, or the old state was the zeroed one, which
// every stored state, used >= 1, follows), and adds cost >= 1 to used. So (last, frac, used)
// strictly increases.
// It is full again at F = last + ceil((frac + used * period) / limit) (idle_at_ns()). Under one
// rule F never decreases at a store: a refill that leaves tokens owed moves last + frac / limit
// by gained * period / limit and takes gained from used, so F is unchanged (floor(position /
// limit) is a whole number and comes out of the ceiling); one that fills the bucket happens only
// at now >= F, and the store then writes F' = now + ceil(cost * period / limit) > now; adding
// cost to used raises F or keeps it. So, under one rule, (F, last, frac, used) strictly increases,
// and so with F rounded up by any non-decreasing function (the table's expiry). Two copies under
// one rule refill at one rate, so the one full again later holds fewer tokens at every instant
// before that: it is the more consumed one, exactly up to the rounding of F (the table's 2^19 ns;
// copies closer than that are told apart by the single writer's order). Limit: F is computed
// under the rule that stored each copy; after a rule change that refills faster, a replica keeps
// the copy of the old rule until it is full (F) by the old rule's rate, and a failover meanwhile
// decides on that copy.
//
// GCRA (TAT = tat_ns + frac / limit, a = low 64 bits of tat_ns, b = frac | tat_ns bits 64..95
// << 32). A store writes max(TAT, now) + cost * period > TAT, as (TAT' / limit, TAT' % limit).
// x -> (x / L, x % L) is strictly increasing (lexicographically) for a fixed L, and the TAT loaded
// under the storing rule's limit is exactly the stored pair; under another limit L, frac < L reads
// back the same pair, and frac >= L makes the load at least (tat_ns + 1) * L, so tat_ns grows.
// Either way (tat_ns, frac), i.e. (hi32(b), a, lo32(b)), strictly increases. A key is full again
// at its TAT and holds (TAT - t) / emission interval units at t before it, so the later TAT is
// the more consumed copy at every instant.
//
// Sliding log, single writer. A store judges at N = max(now, newest), drops the entries
// <= N - period (a prefix) and, if allowed, appends cost copies of N. So:
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
// Sliding log, live entries first. Let x come before y in one writer's history under a rule of
// period Q, and t = max(now, newest(x), newest(y)) with `now` at or after every N judged at in
// between (the receiver's clock is not behind the writer's). Each copy's idle floor is at most
// its newest + Q, so the period P read (the smaller of the two) is at most Q. An entry of x with
// e > t - P has e > N - Q for every such N <= t, so no store dropped it: it is in y, and live
// there by the same test. So y has at least as many live entries as x, and the tie goes to the
// single writer's order above: y is kept. Of two diverged copies, the one with more entries
// within the period at t is kept: an old copy of a key that used its limit beats a copy that a
// node which never held it started afresh, though that one's newest entry is later. Limits: a
// receiver whose clock is behind the writer's by d may count entries the writer dropped within
// d of their expiry, and keep its copy over one with fewer entries appended since (it errs
// towards denying until the next change of the key reaches it); after a rule change to a shorter
// period, the old copy's entries beyond it count until they expire.
#include "core/merge.h"

#include <algorithm>
#include <cstddef>

#include "core/algorithm_detail.h"

namespace sluice {
namespace {

using detail::hi32;
using detail::lo32;

// Lexicographic comparison of (x0, x1, x2, x3) with (y0, y1, y2, y3): x strictly greater.
constexpr bool later4(std::uint64_t x0, std::uint64_t x1, std::uint64_t x2, std::uint64_t x3,
                      std::uint64_t y0, std::uint64_t y1, std::uint64_t y2, std::uint64_t y3) {
  if (x0 != y0) return x0 > y0;
  if (x1 != y1) return x1 > y1;
  if (x2 != y2) return x2 > y2;
  return x3 > y3;
}

// What the order of logs looks at.
struct LogSummary {
  std::size_t size = 0;
  std::uint64_t newest = 0;
  std::size_t at_newest = 0;  // entries equal to the newest: the last ones, as the log is sorted
};

// `at(i)` is entry i, oldest first, for i < size: the first index whose entry is > `bound`, by
// bisection (on an unsorted log it still ends, with some index).
template <typename At>
std::size_t first_above(std::size_t size, std::uint64_t bound, At at) {
  std::size_t lo = 0;
  std::size_t hi = size;
  while (lo < hi) {
    const std::size_t mid = lo + (hi - lo) / 2;
    if (at(mid) > bound) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo;
}

template <typename At>
LogSummary summarize(std::size_t size, At at) {
  if (size == 0) return {};
  const std::uint64_t newest = at(size - 1);
  const std::size_t first_at_newest = newest == 0 ? 0 : first_above(size, newest - 1, at);
  return {size, newest, size - first_at_newest};
}

// The single writer's order of logs.
bool later_log(const LogSummary& x, const LogSummary& y) {
  if (x.size == 0 || y.size == 0) return x.size != 0 && y.size == 0;
  if (x.newest != y.newest) return x.newest > y.newest;
  if (x.at_newest != y.at_newest) return x.at_newest > y.at_newest;
  return x.size < y.size;
}

// A log laid out flat or in its ring, summarized, with a way to count its live entries.
template <typename At>
struct LogView {
  std::size_t size;
  At at;
  std::uint64_t idle_floor_ns;
  LogSummary summary() const { return summarize(size, at); }
  // The period the copy was stored under, or less.
  std::uint64_t period_floor(const LogSummary& s) const {
    return idle_floor_ns > s.newest ? idle_floor_ns - s.newest : 0;
  }
  // Entries e with e + period > t.
  std::size_t live_at(std::uint64_t t, std::uint64_t period) const {
    if (period > t) return size;
    return size - first_above(size, t - period, at);
  }
};

template <typename AtX, typename AtY>
bool prefer(const LogView<AtX>& x, const LogView<AtY>& y, std::uint64_t now_ns) {
  const LogSummary sx = x.summary();
  const LogSummary sy = y.summary();
  if (sx.size == 0 || sy.size == 0) return later_log(sx, sy);
  const std::uint64_t t = std::max({now_ns, sx.newest, sy.newest});
  const std::uint64_t period = std::min(x.period_floor(sx), y.period_floor(sy));
  const std::size_t live_x = x.live_at(t, period);
  const std::size_t live_y = y.live_at(t, period);
  if (live_x != live_y) return live_x > live_y;
  return later_log(sx, sy);
}

template <typename At>
LogView<At> view_of(std::size_t size, At at, std::uint64_t idle_floor_ns) {
  return LogView<At>{size, at, idle_floor_ns};
}

}  // namespace

bool prefer_state(Algorithm algorithm, const StateCopy& x, const StateCopy& y) {
  const CounterState& s = x.state;
  const CounterState& o = y.state;
  switch (algorithm) {
    case Algorithm::kSlidingWindow: {
      const std::uint64_t s_sum = std::uint64_t{lo32(s.b)} + hi32(s.b);
      const std::uint64_t o_sum = std::uint64_t{lo32(o.b)} + hi32(o.b);
      return later4(s.a, s_sum, lo32(s.b), hi32(s.b), o.a, o_sum, lo32(o.b), hi32(o.b));
    }
    case Algorithm::kTokenBucket:
      return later4(x.idle_at_ns, s.a, hi32(s.b), lo32(s.b), y.idle_at_ns, o.a, hi32(o.b),
                    lo32(o.b));
    case Algorithm::kGcra:
      return later4(hi32(s.b), s.a, lo32(s.b), 0, hi32(o.b), o.a, lo32(o.b), 0);
    case Algorithm::kFixedWindow:
    case Algorithm::kSlidingLog:
      break;
  }
  return later4(s.a, s.b, 0, 0, o.a, o.b, 0, 0);
}

const StateCopy& kept_state(Algorithm algorithm, const StateCopy& a, const StateCopy& b) {
  return prefer_state(algorithm, b, a) ? b : a;
}

bool prefer_log(const LogCopy& x, const LogCopy& y, std::uint64_t now_ns) {
  const auto flat = [](std::span<const std::uint64_t> log) {
    return [log](std::size_t i) { return log[i]; };
  };
  return prefer(view_of(x.entries.size(), flat(x.entries), x.idle_floor_ns),
                view_of(y.entries.size(), flat(y.entries), y.idle_floor_ns), now_ns);
}

bool prefer_log(const LogCopy& x, const SlidingLog& y, std::uint64_t y_idle_floor_ns,
                std::uint64_t now_ns) {
  // Indices made safe for any head and count, as sliding_log() reads them.
  const std::size_t ring = y.ring.size();
  const std::size_t head = ring == 0 ? 0 : y.head % ring;
  const std::size_t count = y.count < ring ? y.count : ring;
  const auto in_ring = [&y, ring, head](std::size_t i) {
    const std::size_t index = head + i;  // < 2 * ring
    return y.ring[index < ring ? index : index - ring];
  };
  const auto flat = [&x](std::size_t i) { return x.entries[i]; };
  return prefer(view_of(x.entries.size(), flat, x.idle_floor_ns),
                view_of(count, in_ring, y_idle_floor_ns), now_ns);
}

}  // namespace sluice
