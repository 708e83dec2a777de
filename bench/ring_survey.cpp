// How even the ring is, and how much moves, over many random member sets: the figures behind
// the choice of vnodes per node and partition count in docs/ARCHITECTURE.md ("The ring"). Shares
// are exact (counted in partitions, which hold equal parts of the hash space), not sampled with
// keys. Usage: ring_survey [SETS [VNODES,... [PARTITION_BITS,...]]]
//   defaults: 200 sets of random ids per node count, vnodes 128,256,512,1024,2048, bits 14,16.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "cluster/ring.h"

namespace sluice::cluster {
namespace {

std::vector<std::uint32_t> parse_list(std::string_view text) {
  std::vector<std::uint32_t> out;
  while (!text.empty()) {
    const std::size_t comma = text.find(',');
    out.push_back(static_cast<std::uint32_t>(std::stoul(std::string(text.substr(0, comma)))));
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return out;
}

std::vector<std::string> random_ids(std::mt19937_64& rng, std::size_t n) {
  std::vector<std::string> ids;
  for (std::size_t i = 0; i < n; ++i) ids.push_back(fmt::format("node-{:08x}", rng() >> 32));
  return ids;
}

// Max over nodes of (share / mean share), for primaries and for replicas.
struct Balance {
  double primary = 0;
  double replica = 0;
  double largest_share = 0;  // the largest primary share, a fraction of all keys
};

Balance balance_of(const Ring& ring) {
  std::vector<std::uint32_t> primaries(ring.nodes().size());
  std::vector<std::uint32_t> replicas(ring.nodes().size());
  for (const PartitionOwners& owners : ring.partitions()) {
    ++primaries[owners.primary];
    ++replicas[owners.replica];
  }
  const double mean = static_cast<double>(ring.partition_count()) / ring.nodes().size();
  const auto top = [](const std::vector<std::uint32_t>& v) {
    return static_cast<double>(*std::max_element(v.begin(), v.end()));
  };
  return Balance{top(primaries) / mean, top(replicas) / mean,
                 top(primaries) / ring.partition_count()};
}

double quantile(std::vector<double> values, double q) {
  std::sort(values.begin(), values.end());
  const std::size_t i = static_cast<std::size_t>(q * static_cast<double>(values.size() - 1));
  return values[i];
}

Ring must_build(const std::vector<std::string>& ids, const RingParams& params) {
  Expected<Ring> ring = Ring::build(ids, params);
  if (!ring) {
    fmt::print(stderr, "ring_survey: {}\n", ring.error());
    std::exit(1);
  }
  return std::move(ring).value();
}

void survey(std::uint32_t sets, std::uint32_t vnodes, std::uint32_t bits) {
  const RingParams params{.vnodes_per_node = vnodes, .partition_bits = bits};
  fmt::print("\nvnodes {} partitions 2^{} ({} sets per row)\n", vnodes, bits, sets);
  fmt::print(
      "| nodes | primary max/mean p50 / p99 / worst | replica max/mean p50 / p99 / worst | "
      "primaries moved - 1/N, worst of remove / add | replicas changed, mean of remove / add | "
      "build ms |\n|---|---|---|---|---|---|\n");
  std::mt19937_64 rng(vnodes * 1000 + bits);
  for (std::size_t n = 3; n <= 10; ++n) {
    std::vector<double> primary;
    std::vector<double> replica;
    double worst_remove = -1;
    double worst_add = -1;
    double replica_remove = 0;
    double replica_add = 0;
    double build_ms = 0;
    for (std::uint32_t s = 0; s < sets; ++s) {
      const std::vector<std::string> ids = random_ids(rng, n);
      const auto started = std::chrono::steady_clock::now();
      const Ring ring = must_build(ids, params);
      build_ms +=
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started)
              .count();
      const Balance b = balance_of(ring);
      primary.push_back(b.primary);
      replica.push_back(b.replica);
      // Removing one of N moves exactly that node's primaries: the largest share is the worst.
      worst_remove = std::max(worst_remove, b.largest_share - 1.0 / n);
      // One removal and one addition measured with ring_changes, to count replicas too.
      std::vector<std::string> fewer = ids;
      fewer.pop_back();
      const Ring smaller = must_build(fewer, params);
      const std::vector<PartitionChange> removed = ring_changes(ring, smaller).value();
      const std::vector<PartitionChange> added = ring_changes(smaller, ring).value();
      const auto moved = [&](const std::vector<PartitionChange>& changes, bool primary_only) {
        const auto count = std::count_if(changes.begin(), changes.end(), [&](const auto& c) {
          return primary_only ? c.primary_changed : c.replica_changed;
        });
        return static_cast<double>(count) / ring.partition_count();
      };
      worst_add = std::max(worst_add, moved(added, true) - 1.0 / n);
      replica_remove += moved(removed, false);
      replica_add += moved(added, false);
    }
    fmt::print(
        "| {} | {:.3f} / {:.3f} / {:.3f} | {:.3f} / {:.3f} / {:.3f} | {:+.4f} / {:+.4f} | "
        "{:.3f} / {:.3f} | {:.2f} |\n",
        n, quantile(primary, 0.5), quantile(primary, 0.99), quantile(primary, 1.0),
        quantile(replica, 0.5), quantile(replica, 0.99), quantile(replica, 1.0), worst_remove,
        worst_add, replica_remove / sets, replica_add / sets, build_ms / sets);
  }
}

}  // namespace
}  // namespace sluice::cluster

int main(int argc, char** argv) {
  using namespace sluice::cluster;
  const std::uint32_t sets = argc > 1 ? static_cast<std::uint32_t>(std::stoul(argv[1])) : 200;
  const std::vector<std::uint32_t> vnodes =
      parse_list(argc > 2 ? argv[2] : "128,256,512,1024,2048");
  const std::vector<std::uint32_t> bits = parse_list(argc > 3 ? argv[3] : "14,16");
  for (const std::uint32_t b : bits) {
    for (const std::uint32_t v : vnodes) survey(sets, v, b);
  }
  return 0;
}
