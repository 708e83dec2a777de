// Small, fast, deterministic pseudo-random numbers for traffic generation: xoshiro256**
// (Blackman & Vigna) seeded through splitmix64. Not for anything secret. A run is reproducible
// from its --seed: the same seed and stream give the same sequence on every machine.
#pragma once

#include <bit>
#include <cstdint>

namespace sluice::load {

// One step of splitmix64: advances `state` and returns a well-mixed 64-bit value. Used to
// expand a seed into xoshiro's 256-bit state (which must not be all zero) and to derive
// independent per-thread seeds.
constexpr std::uint64_t splitmix64(std::uint64_t& state) {
  state += 0x9E3779B97F4A7C15ull;
  std::uint64_t z = state;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// A seed for stream `stream` (e.g. a thread index) of run `seed`; distinct streams of one
// seed give unrelated sequences.
constexpr std::uint64_t derive_seed(std::uint64_t seed, std::uint64_t stream) {
  std::uint64_t state = seed ^ (stream * 0xD1B54A32D192ED03ull);
  splitmix64(state);
  return splitmix64(state);
}

class Xoshiro256 {
 public:
  explicit constexpr Xoshiro256(std::uint64_t seed) {
    std::uint64_t sm = seed;
    for (auto& word : s_) word = splitmix64(sm);
  }

  constexpr std::uint64_t next() {
    const std::uint64_t result = std::rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = std::rotl(s_[3], 45);
    return result;
  }

  // Uniform in [0, 1) with 53 random bits.
  constexpr double next_double() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

  // Uniform in [0, bound), unbiased (Lemire's multiply-and-reject). REQUIRES: bound >= 1.
  // Rejection happens with probability < bound / 2^64, so the loop almost never repeats; it is
  // capped anyway, and the cap (never reached in practice) costs a bias below 2^-60.
  constexpr std::uint64_t next_below(std::uint64_t bound) {
    unsigned __int128 m = static_cast<unsigned __int128>(next()) * bound;
    auto low = static_cast<std::uint64_t>(m);
    if (low < bound) {
      const std::uint64_t threshold = (0 - bound) % bound;
      for (int i = 0; i < 64 && low < threshold; ++i) {
        m = static_cast<unsigned __int128>(next()) * bound;
        low = static_cast<std::uint64_t>(m);
      }
    }
    return static_cast<std::uint64_t>(m >> 64);
  }

 private:
  std::uint64_t s_[4] = {};
};

}  // namespace sluice::load
