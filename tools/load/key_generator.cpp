#include "tools/load/key_generator.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>

namespace sluice::load {
namespace {

// log1p(t)/t and expm1(t)/t, continuous at t = 0, where the plain quotients lose all precision
// (exponent S close to 1).
double log1p_over(double t) {
  if (std::abs(t) > 1e-8) return std::log1p(t) / t;
  return 1.0 - t * (0.5 - t / 3.0);
}

double expm1_over(double t) {
  if (std::abs(t) > 1e-8) return std::expm1(t) / t;
  return 1.0 + t * (0.5 + t / 6.0);
}

std::optional<double> parse_number(std::string_view text) {
  double value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end || !std::isfinite(value)) {
    return std::nullopt;
  }
  return value;
}

std::optional<DistributionSpec> fail(std::string* error, std::string message) {
  if (error != nullptr) *error = std::move(message);
  return std::nullopt;
}

std::size_t decimal_digits(std::uint64_t value) {
  std::size_t digits = 1;
  for (; value >= 10; value /= 10) ++digits;
  return digits;
}

}  // namespace

std::optional<DistributionSpec> parse_distribution(std::string_view text, std::string* error) {
  if (text == "uniform") return DistributionSpec{DistributionSpec::Kind::kUniform, 0};
  if (text == "seq") return DistributionSpec{DistributionSpec::Kind::kSequential, 0};
  const auto colon = text.find(':');
  const std::string_view name = text.substr(0, colon);
  const std::string_view argument =
      colon == std::string_view::npos ? std::string_view() : text.substr(colon + 1);
  if (name == "zipf") {
    const auto s = parse_number(argument);
    if (!s || *s <= 0) {
      return fail(error, "--dist zipf:S needs an exponent S > 0, e.g. zipf:0.99; got '" +
                             std::string(text) + "'");
    }
    return DistributionSpec{DistributionSpec::Kind::kZipf, *s};
  }
  if (name == "hot") {
    const auto p = parse_number(argument);
    if (!p || *p < 0 || *p > 100) {
      return fail(error, "--dist hot:P needs a percentage 0 <= P <= 100, e.g. hot:20; got '" +
                             std::string(text) + "'");
    }
    return DistributionSpec{DistributionSpec::Kind::kHot, *p};
  }
  return fail(error,
              "--dist must be uniform, zipf:S, hot:P or seq; got '" + std::string(text) + "'");
}

std::string describe(const DistributionSpec& spec) {
  char number[32];
  auto [end, ec] = std::to_chars(number, number + sizeof number, spec.parameter);
  const std::string parameter = ec == std::errc() ? std::string(number, end) : "?";
  switch (spec.kind) {
    case DistributionSpec::Kind::kUniform:
      return "uniform";
    case DistributionSpec::Kind::kSequential:
      return "seq";
    case DistributionSpec::Kind::kZipf:
      return "zipf:" + parameter;
    case DistributionSpec::Kind::kHot:
      return "hot:" + parameter;
  }
  return "?";
}

// Rejection-inversion. The hat is the continuous density h(x) = x^-s on [0.5, n + 0.5]; a draw
// x from it (by inverting its integral H) proposes rank k = round(x). Because h is convex, the
// hat's area over [k - 0.5, k + 0.5] is at least h(k), so accepting exactly when
// H(x) >= H(k + 0.5) - h(k) leaves each rank with probability proportional to h(k). Rank 1's
// strip is exactly h(1) wide (u_low_ starts there), so it is never rejected.
ZipfSampler::ZipfSampler(std::uint64_t n, double exponent)
    : n_(n), exponent_(exponent), u_low_(0), u_high_(0), squeeze_(0) {
  u_low_ = h_integral(1.5) - 1.0;
  u_high_ = h_integral(static_cast<double>(n_) + 0.5);
  // For every k >= 2 the acceptance bound lies at least this far below k (the bound's offset
  // grows with k), so a proposal within it is accepted without evaluating h.
  squeeze_ = 2.0 - h_integral_inverse(h_integral(2.5) - h(2.0));
}

double ZipfSampler::h(double x) const noexcept { return std::exp(-exponent_ * std::log(x)); }

double ZipfSampler::h_integral(double x) const noexcept {
  const double log_x = std::log(x);
  return expm1_over((1.0 - exponent_) * log_x) * log_x;
}

double ZipfSampler::h_integral_inverse(double u) const noexcept {
  // Rounding can push (1 - s) * u just below -1 near the end of the domain for s > 1.
  const double t = std::max(u * (1.0 - exponent_), -1.0);
  return std::exp(log1p_over(t) * u);
}

std::uint64_t ZipfSampler::sample(Xoshiro256& rng) const noexcept {
  std::uint64_t k = 1;
  // Each round accepts with probability well above 1/2, so 64 rounds all failing does not
  // happen; the cap only keeps the loop bounded (the last proposal is then returned).
  for (int round = 0; round < 64; ++round) {
    const double u = u_high_ + rng.next_double() * (u_low_ - u_high_);
    const double x = h_integral_inverse(u);
    const double rounded = std::floor(x + 0.5);
    k = rounded < 1.0                        ? 1
        : rounded >= static_cast<double>(n_) ? n_
                                             : static_cast<std::uint64_t>(rounded);
    const auto kd = static_cast<double>(k);
    if (kd - x <= squeeze_ || u >= h_integral(kd + 0.5) - h(kd)) break;
  }
  return k;
}

KeyGenerator::KeyGenerator(const DistributionSpec& spec, std::uint64_t key_count,
                           std::uint64_t seed)
    : spec_(spec),
      key_count_(key_count),
      rng_(seed),
      zipf_(key_count, spec.kind == DistributionSpec::Kind::kZipf ? spec.parameter : 1.0) {
  if (spec_.kind == DistributionSpec::Kind::kHot) {
    // P% of 2^64, as an integer threshold so the hot test is one comparison.
    const double threshold = spec_.parameter / 100.0 * 0x1.0p64;
    always_hot_ = threshold >= 0x1.0p64 || key_count_ == 1;
    hot_threshold_ = always_hot_ ? 0 : static_cast<std::uint64_t>(threshold);
  }
}

std::uint64_t KeyGenerator::next() noexcept {
  switch (spec_.kind) {
    case DistributionSpec::Kind::kUniform:
      return rng_.next_below(key_count_);
    case DistributionSpec::Kind::kZipf:
      return zipf_.sample(rng_) - 1;
    case DistributionSpec::Kind::kHot:
      if (always_hot_ || rng_.next() < hot_threshold_) return 0;
      return 1 + rng_.next_below(key_count_ - 1);
    case DistributionSpec::Kind::kSequential: {
      const std::uint64_t index = next_sequential_;
      next_sequential_ = index + 1 == key_count_ ? 0 : index + 1;
      return index;
    }
  }
  return 0;
}

KeyFormatter::KeyFormatter(std::string prefix, std::uint64_t key_count)
    : prefix_(std::move(prefix)), width_(decimal_digits(key_count > 0 ? key_count - 1 : 0)) {}

std::string_view KeyFormatter::format(std::uint64_t index, std::span<char> out) const noexcept {
  std::memcpy(out.data(), prefix_.data(), prefix_.size());
  char* digits = out.data() + prefix_.size();
  // Right-aligned decimal, then zero-fill on the left; an index wider than width_ (outside the
  // contract) is cut to its low digits rather than overrunning `out`.
  std::uint64_t rest = index;
  for (std::size_t i = width_; i > 0; --i) {
    digits[i - 1] = static_cast<char>('0' + rest % 10);
    rest /= 10;
  }
  return {out.data(), max_length()};
}

}  // namespace sluice::load
