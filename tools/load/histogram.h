// A latency histogram with constant memory, in the manner of HdrHistogram: log-linear buckets.
//
// Values are microseconds in [0, kMaxValueUs] (60 s). Each power of two [2^k, 2^(k+1)) is cut
// into kSubBuckets equal sub-buckets; values below 2 * kSubBuckets get a bucket each (exact).
// A bucket is therefore at most 1/kSubBuckets of its lower bound wide, and a reported value
// (the bucket's midpoint, clamped to [min, max]) is within 1/(2 * kSubBuckets) = 1/256 (0.39%)
// of the true value. Larger values are recorded as kMaxValueUs and counted in clamped_count().
//
// record() is O(1), allocation-free and noexcept. Not thread-safe: give each thread its own
// histogram and merge() them.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>

namespace sluice::load {

class LatencyHistogram {
 public:
  static constexpr std::uint64_t kMaxValueUs = 60'000'000;
  static constexpr int kSubBucketBits = 7;
  static constexpr std::uint64_t kSubBuckets = std::uint64_t{1} << kSubBucketBits;
  // The highest power of two that kMaxValueUs reaches, and so the number of buckets.
  static constexpr int kTopExponent = std::bit_width(kMaxValueUs) - 1;
  static constexpr std::size_t kBucketCount = (kTopExponent - kSubBucketBits + 2) * kSubBuckets;
  // Bound on |reported - true| / true for any percentile.
  static constexpr double kMaxRelativeError = 1.0 / (2 * kSubBuckets);

  void record(std::uint64_t value_us) noexcept;
  // Adds every value recorded in `other`, as if they had been recorded here.
  void merge(const LatencyHistogram& other) noexcept;
  void reset() noexcept;

  std::uint64_t count() const noexcept { return count_; }
  // How many values were above kMaxValueUs (recorded as kMaxValueUs).
  std::uint64_t clamped_count() const noexcept { return clamped_; }
  // Exact (after clamping); 0 when empty.
  std::uint64_t min() const noexcept { return count_ == 0 ? 0 : min_; }
  std::uint64_t max() const noexcept { return max_; }
  double mean() const noexcept;

  // The nearest-rank percentile: the smallest recorded value v such that at least
  // ceil(p/100 * count) values are <= v, within kMaxRelativeError. p is clamped to [0, 100];
  // p = 0 gives min() and p = 100 gives max(), exactly. 0 when empty.
  std::uint64_t value_at_percentile(double p) const noexcept;

  // Bucket geometry, exposed for tests.
  static constexpr std::size_t bucket_index(std::uint64_t value_us) noexcept {
    if (value_us < 2 * kSubBuckets) return static_cast<std::size_t>(value_us);
    const int exponent = std::bit_width(value_us) - 1;
    const int shift = exponent - kSubBucketBits;
    return static_cast<std::size_t>((shift + 1) * kSubBuckets +
                                    ((value_us >> shift) - kSubBuckets));
  }
  static constexpr std::uint64_t bucket_lower(std::size_t index) noexcept {
    if (index < 2 * kSubBuckets) return index;
    const auto shift = static_cast<int>(index / kSubBuckets) - 1;
    return (kSubBuckets + index % kSubBuckets) << shift;
  }
  static constexpr std::uint64_t bucket_width(std::size_t index) noexcept {
    if (index < 2 * kSubBuckets) return 1;
    return std::uint64_t{1} << (index / kSubBuckets - 1);
  }

 private:
  std::array<std::uint64_t, kBucketCount> buckets_{};
  std::uint64_t count_ = 0;
  std::uint64_t clamped_ = 0;
  std::uint64_t sum_ = 0;  // of clamped values: overflows only after ~3e11 values of 60 s
  std::uint64_t min_ = kMaxValueUs;
  std::uint64_t max_ = 0;
};

static_assert(LatencyHistogram::bucket_index(LatencyHistogram::kMaxValueUs) <
              LatencyHistogram::kBucketCount);

}  // namespace sluice::load
