#include "tools/load/accuracy_audit.h"

#include <algorithm>
#include <utility>

namespace sluice::load {
namespace {

enum class Check : std::uint8_t { kWindow, kBucket, kLog };

Check check_for(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::kTokenBucket:
    case Algorithm::kGcra:
      return Check::kBucket;
    case Algorithm::kSlidingLog:
      return Check::kLog;
    case Algorithm::kFixedWindow:
    case Algorithm::kSlidingWindow:
      break;
  }
  return Check::kWindow;
}

}  // namespace

AccuracyAudit::AccuracyAudit(const Rule& rule, std::uint64_t audited_keys)
    : rule_(rule),
      audited_keys_(audited_keys),
      period_ns_(std::max<std::uint64_t>(rule.period_ns(), 1)) {
  // The sizes docs and bytes_per_key() promise.
  static_assert(sizeof(WindowState) == 32 && sizeof(BucketState) == 48);
  static_assert(sizeof(LogState) == 40 && sizeof(LogEntry) == 16);
  switch (check_for(rule.algorithm)) {
    case Check::kWindow:
      windows_.resize(audited_keys);
      break;
    case Check::kBucket:
      buckets_.resize(audited_keys);
      break;
    case Check::kLog:
      log_capacity_ = rule.limit + 1;
      logs_.resize(audited_keys);
      log_entries_.resize(audited_keys * log_capacity_);
      break;
  }
}

std::size_t AccuracyAudit::bytes_per_key(const Rule& rule) {
  switch (check_for(rule.algorithm)) {
    case Check::kWindow:
      return sizeof(WindowState);
    case Check::kBucket:
      return sizeof(BucketState);
    case Check::kLog:
      return sizeof(LogState) + sizeof(LogEntry) * (static_cast<std::size_t>(rule.limit) + 1);
  }
  return 0;
}

void AccuracyAudit::record(std::uint64_t key, std::uint64_t earliest_ns, std::uint64_t latest_ns,
                           std::uint32_t cost) noexcept {
  if (key >= audited_keys_) {
    ++report_.ignored_events;
    return;
  }
  if (earliest_ns > latest_ns) std::swap(earliest_ns, latest_ns);
  ++report_.admitted_events;
  switch (check_for(rule_.algorithm)) {
    case Check::kWindow:
      record_window(key, earliest_ns, latest_ns, cost);
      break;
    case Check::kBucket:
      record_bucket(key, earliest_ns, latest_ns, cost);
      break;
    case Check::kLog:
      record_log(key, earliest_ns, latest_ns, cost);
      break;
  }
}

template <typename State>
void AccuracyAudit::order(State& state, std::uint64_t& latest) noexcept {
  if (!state.seen) {
    state.seen = true;
    ++report_.keys_checked;
  } else if (latest < state.latest_ns) {
    latest = state.latest_ns;
    ++report_.reordered_events;
  }
  state.latest_ns = latest;
}

void AccuracyAudit::check(std::uint64_t key, double admitted, double allowed) noexcept {
  if (admitted <= allowed) return;
  const double ratio = (admitted - allowed) / std::max(allowed, 1.0);
  if (ratio > report_.max_overshoot_ratio) {
    report_.max_overshoot_ratio = ratio;
    report_.worst_key = key;
    report_.worst_admitted_units = admitted;
    report_.worst_allowed_units = allowed;
  }
}

void AccuracyAudit::record_window(std::uint64_t key, std::uint64_t earliest, std::uint64_t latest,
                                  std::uint32_t cost) noexcept {
  WindowState& state = windows_[key];
  const bool first = !state.seen;
  order(state, latest);
  const std::uint64_t window = latest / period_ns_;
  if (earliest / period_ns_ != window) {
    ++report_.ambiguous_events;
    return;
  }
  // Placed requests come with non-decreasing latest times, so their windows never go back.
  if (first || window != state.window) {
    state.window = window;
    state.units = 0;
  }
  state.units += cost;
  check(key, static_cast<double>(state.units), static_cast<double>(rule_.limit));
}

void AccuracyAudit::record_bucket(std::uint64_t key, std::uint64_t earliest, std::uint64_t latest,
                                  std::uint32_t cost) noexcept {
  BucketState& state = buckets_[key];
  const bool first = !state.seen;
  const std::uint64_t previous = state.latest_ns;
  order(state, latest);
  state.uncertainty_ns = std::max(state.uncertainty_ns, latest - earliest);

  using u128 = unsigned __int128;
  const u128 limit = rule_.limit;
  const u128 period = period_ns_;
  const u128 drained = first ? 0 : limit * (latest - previous);
  if (first || state.backlog <= drained) {
    state.backlog = 0;
    state.start_ns = latest;
  } else {
    state.backlog -= drained;
  }
  state.backlog += static_cast<u128>(cost) * period;

  // Every request since start_ns was decided within [start_ns - uncertainty, latest], because
  // each one's earliest time is at most `uncertainty_ns` before its latest.
  const std::uint64_t elapsed = latest - state.start_ns;
  const u128 admitted = state.backlog + limit * elapsed;  // units since start_ns, * period
  const u128 allowed = static_cast<u128>(rule_.capacity()) * period +
                       limit * (static_cast<u128>(elapsed) + state.uncertainty_ns);
  if (admitted > allowed) {
    const double scale = static_cast<double>(period_ns_);
    check(key, static_cast<double>(admitted) / scale, static_cast<double>(allowed) / scale);
  }
}

void AccuracyAudit::record_log(std::uint64_t key, std::uint64_t earliest, std::uint64_t latest,
                               std::uint32_t cost) noexcept {
  LogState& state = logs_[key];
  order(state, latest);
  state.uncertainty_ns = std::max(state.uncertainty_ns, latest - earliest);
  LogEntry* ring = log_entries_.data() + key * log_capacity_;

  // An entry leaves once the span from it to `latest` (widened by the uncertainty) reaches a
  // period: later requests have later latest times and no smaller uncertainty, so it can never
  // share a sub-period span with them. When the ring is full, the oldest entry leaves too: the
  // ring then held limit + 1 units or more, and that excess was reported when it arrived.
  const auto pop = [&] {
    state.units -= ring[state.head].cost;
    state.head = (state.head + 1) % log_capacity_;
    --state.count;
  };
  while (state.count > 0 &&
         latest - ring[state.head].latest_ns + state.uncertainty_ns >= period_ns_) {
    pop();
  }
  if (state.count == log_capacity_) pop();
  ring[(state.head + state.count) % log_capacity_] = LogEntry{latest, cost};
  ++state.count;
  state.units += cost;
  check(key, static_cast<double>(state.units), static_cast<double>(rule_.limit));
}

}  // namespace sluice::load
