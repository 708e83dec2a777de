// The ring: looking up a key's owners (what every request and every client call does) and
// building the partition table (what every change of the member set does).
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "cluster/ring.h"

namespace sluice::cluster {
namespace {

std::vector<std::string> node_ids(std::size_t n) {
  std::vector<std::string> ids;
  for (std::size_t i = 1; i <= n; ++i) ids.push_back("node-" + std::to_string(i));
  return ids;
}

// splitmix64: a fresh, well-spread `hi` per iteration without a key array competing with the
// partition table for the cache.
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Arg: partition bits. 10 nodes. Random keys, so the table lookups hit all over it.
void BM_RingOwnerOf(benchmark::State& state) {
  const RingParams params{.partition_bits = static_cast<std::uint32_t>(state.range(0))};
  const Ring ring = Ring::build(node_ids(10), params).value();
  std::uint64_t i = 0;
  for (auto _ : state) {
    const PartitionOwners owners = ring.owners_of(KeyHash{.lo = 0, .hi = mix(i++)});
    benchmark::DoNotOptimize(owners);
  }
}
BENCHMARK(BM_RingOwnerOf)->Arg(14)->Arg(16);

// Arg: nodes. Default params.
void BM_RingBuild(benchmark::State& state) {
  const std::vector<std::string> ids = node_ids(static_cast<std::size_t>(state.range(0)));
  for (auto _ : state) {
    Expected<Ring> ring = Ring::build(ids);
    benchmark::DoNotOptimize(ring);
  }
}
BENCHMARK(BM_RingBuild)->Arg(3)->Arg(10)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace sluice::cluster
