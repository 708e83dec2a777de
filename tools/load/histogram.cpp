#include "tools/load/histogram.h"

#include <algorithm>
#include <cmath>

namespace sluice::load {

void LatencyHistogram::record(std::uint64_t value_us) noexcept {
  if (value_us > kMaxValueUs) {
    value_us = kMaxValueUs;
    ++clamped_;
  }
  ++buckets_[bucket_index(value_us)];
  ++count_;
  sum_ += value_us;
  min_ = std::min(min_, value_us);
  max_ = std::max(max_, value_us);
}

void LatencyHistogram::merge(const LatencyHistogram& other) noexcept {
  for (std::size_t i = 0; i < kBucketCount; ++i) buckets_[i] += other.buckets_[i];
  count_ += other.count_;
  clamped_ += other.clamped_;
  sum_ += other.sum_;
  min_ = std::min(min_, other.min_);
  max_ = std::max(max_, other.max_);
}

void LatencyHistogram::reset() noexcept { *this = LatencyHistogram(); }

double LatencyHistogram::mean() const noexcept {
  return count_ == 0 ? 0.0 : static_cast<double>(sum_) / static_cast<double>(count_);
}

std::uint64_t LatencyHistogram::value_at_percentile(double p) const noexcept {
  if (count_ == 0) return 0;
  if (!(p > 0)) p = 0;  // also catches NaN
  if (p > 100) p = 100;
  // The tiny downward nudge keeps p * count that should be an integer (99.9% of 1000) from
  // rounding up to the next rank through floating-point error.
  const double exact_rank = p / 100.0 * static_cast<double>(count_);
  auto rank = static_cast<std::uint64_t>(std::ceil(exact_rank * (1.0 - 1e-12)));
  rank = std::clamp<std::uint64_t>(rank, 1, count_);
  if (rank == 1) return min_;
  if (rank == count_) return max_;

  std::uint64_t seen = 0;
  for (std::size_t i = 0; i < kBucketCount; ++i) {
    seen += buckets_[i];
    if (seen >= rank) {
      const std::uint64_t midpoint = bucket_lower(i) + (bucket_width(i) - 1) / 2;
      return std::clamp(midpoint, min_, max_);
    }
  }
  return max_;  // unreachable: the buckets sum to count_
}

}  // namespace sluice::load
