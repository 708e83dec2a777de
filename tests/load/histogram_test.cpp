#include "tools/load/histogram.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>

namespace sluice::load {
namespace {

// |reported - exact| within the histogram's stated relative error.
bool within_error(std::uint64_t reported, double exact) {
  return std::abs(static_cast<double>(reported) - exact) <=
         exact * LatencyHistogram::kMaxRelativeError + 1e-9;
}

TEST_CASE("bucket geometry is contiguous and each bucket is narrow enough", "[histogram]") {
  std::uint64_t expected_lower = 0;
  for (std::size_t i = 0; i < LatencyHistogram::kBucketCount; ++i) {
    const std::uint64_t lower = LatencyHistogram::bucket_lower(i);
    const std::uint64_t width = LatencyHistogram::bucket_width(i);
    REQUIRE(lower == expected_lower);
    REQUIRE(LatencyHistogram::bucket_index(lower) == i);
    REQUIRE(LatencyHistogram::bucket_index(lower + width - 1) == i);
    // Width / lower bound <= 1 / kSubBuckets: the basis of the stated error.
    if (lower > 0) REQUIRE((width * LatencyHistogram::kSubBuckets <= lower || width == 1));
    expected_lower = lower + width;
  }
  REQUIRE(expected_lower > LatencyHistogram::kMaxValueUs);
}

TEST_CASE("an empty histogram reports zeros", "[histogram]") {
  LatencyHistogram h;
  CHECK(h.count() == 0);
  CHECK(h.min() == 0);
  CHECK(h.max() == 0);
  CHECK(h.mean() == 0.0);
  CHECK(h.value_at_percentile(50) == 0);
  CHECK(h.value_at_percentile(100) == 0);
}

TEST_CASE("a single value is every percentile, exactly", "[histogram]") {
  LatencyHistogram h;
  h.record(12'345);
  for (double p : {0.0, 50.0, 90.0, 99.0, 99.9, 100.0}) CHECK(h.value_at_percentile(p) == 12'345);
  CHECK(h.min() == 12'345);
  CHECK(h.max() == 12'345);
  CHECK(h.mean() == 12'345.0);
}

TEST_CASE("percentiles of 1..100000 are within the stated error", "[histogram]") {
  LatencyHistogram h;
  for (std::uint64_t v = 1; v <= 100'000; ++v) h.record(v);
  CHECK(h.count() == 100'000);
  CHECK(h.min() == 1);
  CHECK(h.max() == 100'000);
  CHECK(h.mean() == Approx(50'000.5));
  // Nearest rank: the p-th percentile of 1..N is ceil(p/100 * N).
  CHECK(within_error(h.value_at_percentile(50), 50'000));
  CHECK(within_error(h.value_at_percentile(90), 90'000));
  CHECK(within_error(h.value_at_percentile(99), 99'000));
  CHECK(within_error(h.value_at_percentile(99.9), 99'900));
  CHECK(h.value_at_percentile(100) == 100'000);
  CHECK(h.value_at_percentile(0) == 1);
}

TEST_CASE("small values are exact", "[histogram]") {
  LatencyHistogram h;
  for (std::uint64_t v = 0; v < 200; ++v) h.record(v);
  CHECK(h.value_at_percentile(50) == 99);  // rank 100 of 0..199
  CHECK(h.value_at_percentile(99) == 197);
}

TEST_CASE("percentiles of a skewed distribution are within the error", "[histogram]") {
  // 990 fast values and 10 slow ones: p99 is fast, p99.9 is slow.
  LatencyHistogram h;
  for (int i = 0; i < 990; ++i) h.record(150);
  for (int i = 0; i < 10; ++i) h.record(2'000'000);
  CHECK(within_error(h.value_at_percentile(99), 150));
  CHECK(within_error(h.value_at_percentile(99.9), 2'000'000));
}

TEST_CASE("values above 60 s are clamped to the top and counted", "[histogram]") {
  LatencyHistogram h;
  h.record(10);
  h.record(LatencyHistogram::kMaxValueUs);
  h.record(LatencyHistogram::kMaxValueUs + 1);
  h.record(UINT64_MAX);
  CHECK(h.count() == 4);
  CHECK(h.clamped_count() == 2);
  CHECK(h.max() == LatencyHistogram::kMaxValueUs);
  CHECK(h.value_at_percentile(100) == LatencyHistogram::kMaxValueUs);
  CHECK(
      within_error(h.value_at_percentile(75), static_cast<double>(LatencyHistogram::kMaxValueUs)));
}

TEST_CASE("merging equals recording into one histogram", "[histogram]") {
  LatencyHistogram a;
  LatencyHistogram b;
  LatencyHistogram both;
  for (std::uint64_t v = 1; v <= 50'000; v += 7) {
    a.record(v);
    both.record(v);
  }
  for (std::uint64_t v = 3; v <= 9'000'000; v += 9'973) {
    b.record(v);
    both.record(v);
  }
  b.record(LatencyHistogram::kMaxValueUs * 2);
  both.record(LatencyHistogram::kMaxValueUs * 2);
  a.merge(b);
  CHECK(a.count() == both.count());
  CHECK(a.clamped_count() == both.clamped_count());
  CHECK(a.min() == both.min());
  CHECK(a.max() == both.max());
  CHECK(a.mean() == both.mean());
  for (double p : {0.0, 10.0, 50.0, 90.0, 99.0, 99.9, 100.0}) {
    CHECK(a.value_at_percentile(p) == both.value_at_percentile(p));
  }
}

TEST_CASE("merging an empty histogram changes nothing", "[histogram]") {
  LatencyHistogram a;
  a.record(500);
  a.merge(LatencyHistogram());
  CHECK(a.count() == 1);
  CHECK(a.min() == 500);
  CHECK(a.max() == 500);
  LatencyHistogram empty;
  empty.merge(a);
  CHECK(empty.min() == 500);
}

TEST_CASE("percentile arguments below 0 or above 100 are clamped", "[histogram]") {
  LatencyHistogram h;
  h.record(5);
  h.record(50);
  CHECK(h.value_at_percentile(-3) == 5);
  CHECK(h.value_at_percentile(250) == 50);
  CHECK(h.value_at_percentile(std::nan("")) == 5);
}

}  // namespace
}  // namespace sluice::load
