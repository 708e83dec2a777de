// Sliding log. One timestamp per admitted unit, oldest first, in a caller-owned ring.
// An entry stamped t counts during [t, t + period): it has expired once now - t >= period.
// Stamps never decrease: a request whose `now` is behind the newest entry is stamped (and
// judged) at the newest entry's time, so the ring stays sorted and can be binary-searched.
#include <algorithm>

#include "core/algorithm_detail.h"
#include "core/algorithms.h"

namespace sluice {
namespace {

using detail::u128;

// Read-only view of a log with its indices made safe for any (even corrupt) head and count.
class Entries {
 public:
  explicit Entries(const SlidingLog& log)
      : ring_(log.ring),
        head_(ring_.empty() ? 0 : log.head % ring_.size()),
        count_(std::min<std::size_t>(log.count, ring_.size())) {}

  std::size_t size() const { return count_; }
  std::size_t capacity() const { return ring_.size(); }
  // REQUIRES: i < size().
  std::uint64_t at(std::size_t i) const {
    const std::size_t index = head_ + i;  // < 2 * capacity, as head_ and i are below it
    return ring_[index < ring_.size() ? index : index - ring_.size()];
  }
  std::uint64_t newest() const { return at(count_ - 1); }

  // How many of the oldest entries have expired at `now`. Entries are sorted and the expired
  // ones are usually few, so search outwards from the oldest, then bisect the last step.
  std::size_t expired_at(std::uint64_t now, std::uint64_t period) const {
    if (now < period || count_ == 0) return 0;
    const std::uint64_t cutoff = now - period;  // expired iff stamp <= cutoff
    std::size_t lo = 0;                         // every entry before lo has expired
    std::size_t hi = 1;                         // the next probe is at(hi - 1)
    while (at(hi - 1) <= cutoff) {
      lo = hi;
      if (hi == count_) return count_;
      hi = std::min(2 * hi, count_);
    }
    --hi;  // at(hi) is live
    while (lo < hi) {
      const std::size_t mid = lo + (hi - lo) / 2;
      if (at(mid) <= cutoff) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    return lo;
  }

 private:
  std::span<std::uint64_t> ring_;
  std::size_t head_;
  std::size_t count_;
};

// The time a request is judged and stamped at: its own, or the newest entry's if that is later.
std::uint64_t judged_at(const Entries& entries, std::uint64_t request_ns) {
  return entries.size() != 0 ? std::max(request_ns, entries.newest()) : request_ns;
}

// The decision for `entries` in a ring of `ring_capacity` entries, `expired` of them expired at
// `now` (judged_at()). Writes nothing.
Verdict judge(const Rule& rule, const Entries& entries, std::uint64_t ring_capacity,
              std::uint64_t now, std::size_t expired, const Request& request) {
  const std::uint64_t period = rule.period_ns();
  const std::uint64_t limit = rule.limit;
  const std::uint64_t cost = request.cost;
  // A ring smaller than the limit breaks the caller's contract; never write past it.
  const std::uint64_t capacity = std::min<std::uint64_t>(limit, ring_capacity);
  const std::uint64_t live = entries.size() - expired;

  const bool fits = cost <= capacity;
  const bool allowed = fits && live <= capacity - cost;
  Verdict d;
  d.allowed = allowed;
  d.limit = rule.capacity();
  d.remaining = detail::saturating_sub(limit, allowed ? live + cost : live);
  if (allowed) {
    d.reset_after_ns = detail::wait_ns(u128{now} + period, request.now_ns);
    d.retry_after_ns = 0;
  } else {
    d.reset_after_ns =
        live != 0 ? detail::wait_ns(u128{entries.newest()} + period, request.now_ns) : 0;
    // The oldest `live + cost - capacity` live entries must expire first.
    d.retry_after_ns =
        fits ? detail::wait_ns(u128{entries.at(expired + (live + cost - capacity) - 1)} + period,
                               request.now_ns)
             : kNever;
  }
  return d;
}

}  // namespace

Verdict sliding_log(const Rule& rule, SlidingLog& log, const Request& request) {
  if (detail::admits_nothing(rule)) return detail::never_decision(rule);
  const Entries entries(log);
  const std::uint64_t now = judged_at(entries, request.now_ns);
  const std::size_t expired = entries.expired_at(now, rule.period_ns());
  const Verdict d = judge(rule, entries, entries.capacity(), now, expired, request);

  if (!request.peek && entries.capacity() != 0) {
    const std::size_t size = entries.capacity();
    const std::size_t head = (log.head % size + expired) % size;
    std::size_t count = entries.size() - expired;
    if (d.allowed) {
      for (std::uint64_t i = 0; i < request.cost; ++i) log.ring[(head + count + i) % size] = now;
      count += request.cost;
    }
    log.head = static_cast<std::uint32_t>(head);
    log.count = static_cast<std::uint32_t>(count);
  }
  return d;
}

Verdict sliding_log_answer(const Rule& rule, const SlidingLog& log, const Request& request) {
  if (detail::admits_nothing(rule)) return detail::never_decision(rule);
  const Entries entries(log);
  const std::uint64_t now = judged_at(entries, request.now_ns);
  return judge(rule, entries, rule.limit, now, entries.expired_at(now, rule.period_ns()), request);
}

std::uint64_t sliding_log_idle_at_ns(const Rule& rule, const SlidingLog& log) {
  const Entries entries(log);
  if (entries.size() == 0 || detail::admits_nothing(rule)) return 0;
  return detail::saturate_ns(u128{entries.newest()} + rule.period_ns());
}

}  // namespace sluice
