#include "tools/load/key_generator.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

namespace sluice::load {
namespace {

using Kind = DistributionSpec::Kind;

double harmonic(std::uint64_t n, double s) {
  double sum = 0;
  for (std::uint64_t k = n; k >= 1; --k) sum += std::pow(static_cast<double>(k), -s);
  return sum;
}

// Draws `samples` indices and counts each; fails on any index outside [0, keys).
std::vector<std::uint64_t> histogram_of(KeyGenerator& gen, std::uint64_t samples) {
  std::vector<std::uint64_t> counts(gen.key_count());
  std::uint64_t out_of_range = 0;
  for (std::uint64_t i = 0; i < samples; ++i) {
    const std::uint64_t index = gen.next();
    if (index < gen.key_count()) {
      ++counts[index];
    } else {
      ++out_of_range;
    }
  }
  REQUIRE(out_of_range == 0);
  return counts;
}

TEST_CASE("distributions parse, with clear errors", "[keys]") {
  CHECK(parse_distribution("uniform") == DistributionSpec{Kind::kUniform, 0});
  CHECK(parse_distribution("zipf:1.1") == DistributionSpec{Kind::kZipf, 1.1});
  CHECK(parse_distribution("zipf:0.99") == DistributionSpec{Kind::kZipf, 0.99});
  CHECK(parse_distribution("hot:20") == DistributionSpec{Kind::kHot, 20});
  CHECK(parse_distribution("hot:0") == DistributionSpec{Kind::kHot, 0});
  CHECK(parse_distribution("hot:100") == DistributionSpec{Kind::kHot, 100});

  for (const char* bad :
       {"", "Uniform", "zipf", "zipf:", "zipf:0", "zipf:-1", "zipf:1.1x", "zipf:inf", "zipf:nan",
        "hot:", "hot:101", "hot:-1", "hot:20%", "gauss:1", "uniform:3"}) {
    std::string error;
    INFO(bad);
    CHECK_FALSE(parse_distribution(bad, &error));
    CHECK_FALSE(error.empty());
  }
  std::string error;
  parse_distribution("zipf:0", &error);
  CHECK(error.find("S > 0") != std::string::npos);
  CHECK(describe(*parse_distribution("zipf:1.2")) == "zipf:1.2");
  CHECK(describe(*parse_distribution("hot:20")) == "hot:20");
  CHECK(describe(*parse_distribution("uniform")) == "uniform");
}

TEST_CASE("the same seed gives the same keys, another seed other keys", "[keys]") {
  for (const char* dist : {"uniform", "zipf:1.1", "hot:20"}) {
    KeyGenerator a(*parse_distribution(dist), 1'000'000, 42);
    KeyGenerator b(*parse_distribution(dist), 1'000'000, 42);
    KeyGenerator c(*parse_distribution(dist), 1'000'000, 43);
    int same_as_same_seed = 0;
    int same_as_other_seed = 0;
    for (int i = 0; i < 1000; ++i) {
      const auto x = a.next();
      same_as_same_seed += x == b.next();
      same_as_other_seed += x == c.next();
    }
    CHECK(same_as_same_seed == 1000);
    CHECK(same_as_other_seed < 500);
  }
  CHECK(derive_seed(1, 0) != derive_seed(1, 1));
  CHECK(derive_seed(1, 0) != derive_seed(2, 0));
}

TEST_CASE("uniform keys cover keys 0 to K-1 evenly", "[keys]") {
  constexpr std::uint64_t kKeys = 100;
  constexpr std::uint64_t kSamples = 1'000'000;
  KeyGenerator gen(*parse_distribution("uniform"), kKeys, 7);
  const auto counts = histogram_of(gen, kSamples);
  const double expected = static_cast<double>(kSamples) / kKeys;
  double chi_square = 0;
  for (const auto c : counts) {
    chi_square +=
        (static_cast<double>(c) - expected) * (static_cast<double>(c) - expected) / expected;
  }
  // 99 degrees of freedom: mean 99, standard deviation 14; 170 is five deviations out.
  CHECK(chi_square < 170);
}

TEST_CASE("one key: every draw is index 0", "[keys]") {
  for (const char* dist : {"uniform", "zipf:1.2", "hot:30"}) {
    KeyGenerator gen(*parse_distribution(dist), 1, 5);
    for (int i = 0; i < 100; ++i) REQUIRE(gen.next() == 0);
  }
}

TEST_CASE("zipf rank frequencies match 1/H(K,S) and 1/(2^S H)", "[keys]") {
  constexpr std::uint64_t kKeys = 1000;
  constexpr std::uint64_t kSamples = 400'000;
  for (const double s : {0.5, 0.99, 1.0, 1.2, 2.0}) {
    INFO("S = " << s);
    KeyGenerator gen(DistributionSpec{Kind::kZipf, s}, kKeys, 11);
    const auto counts = histogram_of(gen, kSamples);
    const double h = harmonic(kKeys, s);
    const double n = kSamples;
    // Rank r (index r - 1) has probability r^-S / H. Allow five standard deviations.
    for (std::uint64_t rank : {1, 2, 3, 10, 100}) {
      const double p = std::pow(static_cast<double>(rank), -s) / h;
      const double sigma = std::sqrt(p * (1 - p) / n);
      INFO("rank " << rank);
      CHECK(std::abs(static_cast<double>(counts[rank - 1]) / n - p) < 5 * sigma);
    }
    // Whole distribution: chi-square over ranks grouped so that each group expects >= 1000.
    double chi_square = 0;
    int groups = 0;
    double expected = 0;
    double observed = 0;
    for (std::uint64_t rank = 1; rank <= kKeys; ++rank) {
      expected += n * std::pow(static_cast<double>(rank), -s) / h;
      observed += static_cast<double>(counts[rank - 1]);
      if (expected >= 1000 || rank == kKeys) {
        chi_square += (observed - expected) * (observed - expected) / expected;
        ++groups;
        expected = observed = 0;
      }
    }
    // groups - 1 degrees of freedom; mean + 6 standard deviations.
    const double dof = groups - 1;
    CHECK(chi_square < dof + 6 * std::sqrt(2 * dof) + 10);
  }
}

TEST_CASE("zipf over 10M keys needs no table and stays in range", "[keys]") {
  constexpr std::uint64_t kKeys = 10'000'000;
  constexpr double kS = 1.2;
  constexpr std::uint64_t kSamples = 200'000;
  KeyGenerator gen(DistributionSpec{Kind::kZipf, kS}, kKeys, 3);
  std::uint64_t rank1 = 0;
  std::uint64_t rank2 = 0;
  std::uint64_t beyond_million = 0;
  std::uint64_t out_of_range = 0;
  for (std::uint64_t i = 0; i < kSamples; ++i) {
    const auto index = gen.next();
    out_of_range += index >= kKeys;
    rank1 += index == 0;
    rank2 += index == 1;
    beyond_million += index >= 1'000'000;
  }
  // H(10M, 1.2): the first 10^4 terms summed, the tail by its integral (midpoint rule).
  const double tail = (std::pow(1e4 + 0.5, 1 - kS) - std::pow(1e7 + 0.5, 1 - kS)) / (kS - 1);
  const double h = harmonic(10'000, kS) + tail;
  const double n = kSamples;
  const double p1 = 1 / h;
  const double p2 = std::pow(2.0, -kS) / h;
  CHECK(std::abs(rank1 / n - p1) < 5 * std::sqrt(p1 * (1 - p1) / n));
  CHECK(std::abs(rank2 / n - p2) < 5 * std::sqrt(p2 * (1 - p2) / n));
  CHECK(out_of_range == 0);
  CHECK(beyond_million > 0);  // the tail is reached
}

TEST_CASE("hot:20 puts 20% +- 1% on one key and spreads the rest", "[keys]") {
  constexpr std::uint64_t kKeys = 1000;
  constexpr std::uint64_t kSamples = 200'000;
  KeyGenerator gen(*parse_distribution("hot:20"), kKeys, 99);
  const auto counts = histogram_of(gen, kSamples);
  const double hot_share = static_cast<double>(counts[0]) / kSamples;
  CHECK(hot_share > 0.19);
  CHECK(hot_share < 0.21);
  // The other 80% uniform over 999 keys: ~160 each; none is another hot key.
  std::uint64_t largest_other = 0;
  std::uint64_t smallest_other = kSamples;
  for (std::uint64_t i = 1; i < kKeys; ++i) {
    largest_other = std::max(largest_other, counts[i]);
    smallest_other = std::min(smallest_other, counts[i]);
  }
  CHECK(largest_other < 240);
  CHECK(smallest_other > 90);
}

TEST_CASE("hot:0 never and hot:100 always picks the hot key", "[keys]") {
  KeyGenerator never(*parse_distribution("hot:0"), 50, 1);
  KeyGenerator always(*parse_distribution("hot:100"), 50, 1);
  int hot_in_never = 0;
  int cold_in_always = 0;
  for (int i = 0; i < 10'000; ++i) {
    hot_in_never += never.next() == 0;
    cold_in_always += always.next() != 0;
  }
  CHECK(hot_in_never == 0);
  CHECK(cold_in_always == 0);
}

TEST_CASE("key text is prefix plus fixed-width decimal", "[keys]") {
  const KeyFormatter fmt("k:", 10'000'000);
  CHECK(fmt.max_length() == 2 + 7);
  char buffer[16];
  CHECK(fmt.format(0, buffer) == "k:0000000");
  CHECK(fmt.format(1234, buffer) == "k:0001234");
  CHECK(fmt.format(9'999'999, buffer) == "k:9999999");

  const KeyFormatter one("user-", 1);
  CHECK(one.format(0, buffer) == "user-0");
  const KeyFormatter ten("", 11);
  CHECK(ten.format(10, buffer) == "10");
  CHECK(ten.format(3, buffer) == "03");
  // An exact-size buffer is enough.
  std::vector<char> exact(fmt.max_length());
  CHECK(fmt.format(42, exact) == "k:0000042");
}

TEST_CASE("seq visits every key once in order, then wraps", "[keys]") {
  const auto spec = parse_distribution("seq");
  REQUIRE(spec);
  CHECK(describe(*spec) == "seq");
  KeyGenerator gen(*spec, 5, 99);
  for (std::uint64_t i = 0; i < 12; ++i) CHECK(gen.next() == i % 5);
}

}  // namespace
}  // namespace sluice::load
