// One decision per iteration on the allowed path, in steady state, plus key hashing.
// Each benchmark reports `denied`, which must be 0: otherwise it measured the wrong path.
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "core/algorithms.h"
#include "core/key_hash.h"

namespace sluice {
namespace {

// Runs `step(now)` with now advancing by `gap_ns` per iteration.
template <typename Step>
void run_steps(benchmark::State& bench, std::uint64_t start_ns, std::uint64_t gap_ns, Step step) {
  std::uint64_t now = start_ns;
  std::int64_t denied = 0;
  for (auto _ : bench) {
    const Verdict d = step(now);
    benchmark::DoNotOptimize(d);
    denied += d.allowed ? 0 : 1;
    now += gap_ns;
  }
  bench.counters["denied"] = static_cast<double>(denied);
}

constexpr std::uint64_t kStart = 1'700'000'000ull * 1'000'000'000;  // a 2023 wall-clock time

// Window algorithms: a limit that the loop never reaches, a window change every 10^6 steps.
void BM_FixedWindow(benchmark::State& bench) {
  const Rule rule{.algorithm = Algorithm::kFixedWindow, .limit = 0xffff'ffff, .period_ms = 1000};
  CounterState state;
  run_steps(bench, kStart, 1000,
            [&](std::uint64_t now) { return fixed_window(rule, state, Request{.now_ns = now}); });
}
BENCHMARK(BM_FixedWindow);

void BM_SlidingWindow(benchmark::State& bench) {
  const Rule rule{.algorithm = Algorithm::kSlidingWindow, .limit = 0xffff'ffff, .period_ms = 1000};
  CounterState state;
  run_steps(bench, kStart, 1000,
            [&](std::uint64_t now) { return sliding_window(rule, state, Request{.now_ns = now}); });
}
BENCHMARK(BM_SlidingWindow);

// Bucket algorithms: one token every 10 ns and one request every 10 ns, with the bucket kept
// half empty, so every step refills a partial bucket (the general path) and then takes one.
const Rule kBucketRule{
    .algorithm = Algorithm::kTokenBucket, .limit = 100'000'000, .period_ms = 1000, .burst = 100};

void BM_TokenBucket(benchmark::State& bench) {
  CounterState state;
  token_bucket(kBucketRule, state, Request{.now_ns = kStart, .cost = 50});
  run_steps(bench, kStart + 10, 10, [&](std::uint64_t now) {
    return token_bucket(kBucketRule, state, Request{.now_ns = now});
  });
}
BENCHMARK(BM_TokenBucket);

void BM_Gcra(benchmark::State& bench) {
  Rule rule = kBucketRule;
  rule.algorithm = Algorithm::kGcra;
  CounterState state;
  gcra(rule, state, Request{.now_ns = kStart, .cost = 50});
  run_steps(bench, kStart + 10, 10,
            [&](std::uint64_t now) { return gcra(rule, state, Request{.now_ns = now}); });
}
BENCHMARK(BM_Gcra);

// Sliding log at its default cap, full: each request expires the oldest entry and adds one.
void BM_SlidingLog(benchmark::State& bench) {
  const Rule rule{.algorithm = Algorithm::kSlidingLog, .limit = 10'000, .period_ms = 1000};
  constexpr std::uint64_t kGap = 100'000;  // 10,000 a second: exactly the limit
  std::vector<std::uint64_t> ring(rule.limit);
  SlidingLog log{.ring = ring};
  std::uint64_t now = kStart;
  for (std::uint32_t i = 0; i < rule.limit; ++i, now += kGap) {
    sliding_log(rule, log, Request{.now_ns = now});
  }
  run_steps(bench, now, kGap,
            [&](std::uint64_t t) { return sliding_log(rule, log, Request{.now_ns = t}); });
}
BENCHMARK(BM_SlidingLog);

void BM_HashKey(benchmark::State& bench) {
  const std::string key(static_cast<std::size_t>(bench.range(0)), 'k');
  for (auto _ : bench) {
    benchmark::DoNotOptimize(hash_key(key));
  }
  bench.SetBytesProcessed(bench.iterations() * bench.range(0));
}
BENCHMARK(BM_HashKey)->Arg(16)->Arg(64);

}  // namespace
}  // namespace sluice
