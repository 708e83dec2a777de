// What sluice-gateway's metrics cost per decision request, on one thread: the counts one
// ShouldRateLimit call of 3 descriptors records (3 limits decided, then the call answered with
// its latency), and one /check request of 1 limit. docs/BENCHMARKS.md ("The gateway's metrics")
// has the figures before and after the counters were cached.
//   taskset -c 1 build/bin/gateway_bench --benchmark_min_time=0.5
#include <benchmark/benchmark.h>

#include <chrono>
#include <string>

#include "tools/gateway/gateway_metrics.h"

namespace {

using sluice::gateway::GatewayMetrics;

void BM_RlsCallMetrics(benchmark::State& state) {
  GatewayMetrics metrics;
  const std::string limits[] = {"bench.d0", "bench.d1", "bench.d2"};
  for (auto _ : state) {
    for (const std::string& limit : limits) metrics.decided(limit, "allowed", "cluster");
    metrics.rls_answered("bench", "OK", std::chrono::microseconds(80));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_RlsCallMetrics);

void BM_CheckMetrics(benchmark::State& state) {
  GatewayMetrics metrics;
  const std::string policy = "per-api-key";
  for (auto _ : state) {
    metrics.decided(policy, "allowed", "cluster");
    metrics.answered("check", true, std::chrono::microseconds(80));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_CheckMetrics);

}  // namespace
