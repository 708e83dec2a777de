// Which key each request uses: `--keys K` distinct keys drawn from a distribution, and the text
// of key number i.
//
// Distributions (--dist):
//  - "uniform": every index in [0, K) equally likely.
//  - "zipf:S" (S > 0): index i has probability (i+1)^-S / H(K,S), H(K,S) = sum_{k=1..K} k^-S,
//    so index 0 is the hottest. Sampled by rejection-inversion (Hormann & Derflinger, 1996):
//    O(1) memory whatever K (no table, so K = 10M costs nothing); a few exp/log per sample,
//    and a rejected draw is rare.
//  - "hot:P" (0 <= P <= 100): index 0 gets P percent of the draws, the rest are uniform over
//    [1, K). With K = 1 every draw is index 0.
//  - "seq": 0, 1, ..., K-1, 0, ... in order (every key touched once in K draws: for memory
//    measurements; each thread of a run walks the same sequence, so use one thread).
// The sequence is a pure function of (distribution, K, seed): runs are reproducible.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "tools/load/random.h"

namespace sluice::load {

struct DistributionSpec {
  enum class Kind : std::uint8_t { kUniform, kZipf, kHot, kSequential };
  Kind kind = Kind::kUniform;
  double parameter = 0;  // S for zipf, P (percent) for hot, unused for uniform
  friend bool operator==(const DistributionSpec&, const DistributionSpec&) = default;
};

// Parses "uniform", "zipf:1.1", "hot:20". On failure returns nullopt and, when `error` is not
// null, sets it to a one-line explanation fit for the command line.
std::optional<DistributionSpec> parse_distribution(std::string_view text,
                                                   std::string* error = nullptr);

// "uniform", "zipf:1.1", "hot:20": the inverse of parse_distribution, for reports.
std::string describe(const DistributionSpec& spec);

// Zipf sampler over ranks [1, n] by rejection-inversion; a value type of a few doubles.
class ZipfSampler {
 public:
  // REQUIRES: n >= 1, exponent > 0 and finite.
  ZipfSampler(std::uint64_t n, double exponent);
  // A rank in [1, n]; rank r has probability r^-s / H(n, s).
  std::uint64_t sample(Xoshiro256& rng) const noexcept;

 private:
  double h(double x) const noexcept;                   // x^-s
  double h_integral(double x) const noexcept;          // integral of h from 1 to x
  double h_integral_inverse(double u) const noexcept;  // the x with h_integral(x) == u

  std::uint64_t n_;
  double exponent_;
  double u_low_;    // h_integral(1.5) - 1: below it, draws map to rank 1 and always succeed
  double u_high_;   // h_integral(n + 0.5)
  double squeeze_;  // accept at once when rank - x <= squeeze_
};

class KeyGenerator {
 public:
  // REQUIRES: key_count >= 1, `spec` as parse_distribution() returns it.
  KeyGenerator(const DistributionSpec& spec, std::uint64_t key_count, std::uint64_t seed);

  // The next key index, in [0, key_count). O(1), allocation-free.
  std::uint64_t next() noexcept;
  std::uint64_t key_count() const noexcept { return key_count_; }

 private:
  DistributionSpec spec_;
  std::uint64_t key_count_;
  Xoshiro256 rng_;
  ZipfSampler zipf_;
  std::uint64_t next_sequential_ = 0;
  std::uint64_t hot_threshold_ = 0;  // hot when a 64-bit draw is below this
  bool always_hot_ = false;
};

// Key text: a fixed prefix and the index in decimal, zero-padded to the width of the largest
// index, so every key of a run has the same length ("k:0000042" for K = 10M).
class KeyFormatter {
 public:
  KeyFormatter(std::string prefix, std::uint64_t key_count);

  // The longest text format() writes; a buffer of this size always suffices.
  std::size_t max_length() const noexcept { return prefix_.size() + width_; }
  // Writes key `index` into `out` and returns a view of it (pointing into `out`).
  // REQUIRES: out.size() >= max_length(), index < key_count.
  std::string_view format(std::uint64_t index, std::span<char> out) const noexcept;

 private:
  std::string prefix_;
  std::size_t width_;
};

}  // namespace sluice::load
