// CounterTable throughput on one thread: find (acquire on a stored key), insert (acquire on a
// new key, with and without growth, and at the memory cap where every insert evicts), sliding
// log, records between nodes (export, apply, scan), and sweep; then the longest single insert
// while a table grows, and memory per key.
// Keys are uniformly random 128-bit hashes, computed before timing or made on the fly.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "server/table/counter_table.h"

#ifdef __linux__
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#endif

namespace {

using sluice::Algorithm;
using sluice::KeyHash;
using sluice::Request;
using sluice::Rule;
using sluice::server::CounterTable;
using sluice::server::TableConfig;

constexpr std::size_t kKeys = 1'000'000;
constexpr std::uint64_t kT0 = 1'700'000'000ull * 1'000'000'000ull;
constexpr std::uint64_t kStepNs = 100;  // simulated time between requests
// 100 units per hour: a key touched a few times during a run never expires or runs dry.
const Rule kBucket{Algorithm::kTokenBucket, 100, 3'600'000, 0};

std::uint64_t splitmix64(std::uint64_t& x) {
  std::uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::vector<KeyHash> random_keys(std::size_t n, std::uint64_t seed) {
  std::vector<KeyHash> keys(n);
  for (KeyHash& k : keys) {
    k.lo = splitmix64(seed);
    k.hi = splitmix64(seed);
  }
  return keys;
}

TableConfig roomy(std::size_t initial_slots, bool huge_pages = false) {
  TableConfig c;
  c.max_bytes = std::size_t{1} << 30;
  c.initial_slots = initial_slots;
  c.huge_pages = huge_pages;
  return c;
}

void fill(CounterTable& table, const std::vector<KeyHash>& keys, const Rule& rule,
          std::uint64_t now) {
  for (const KeyHash& k : keys) table.acquire(k, rule, Request{now, 1, false});
}

// The table's load factor, beside its time.
void report_load(benchmark::State& state, const CounterTable& table) {
  state.counters["load"] = static_cast<double>(table.size()) / table.stats().slots;
}

// Args: keys stored, and whether records are in huge pages. 10k fits in cache and shows the CPU
// cost; 1M pays a memory miss, and with 4 KiB pages a TLB miss too.
void BM_FindExisting(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const auto keys = random_keys(n, 1);
  CounterTable table(roomy(16, state.range(1) != 0));
  fill(table, keys, kBucket, kT0);
  std::uint64_t now = kT0;
  std::size_t i = 0;
  for (auto _ : state) {
    // Visit keys in a different order than they were inserted.
    const KeyHash& k = keys[(i * 7919) % n];
    benchmark::DoNotOptimize(table.acquire(k, kBucket, Request{now += kStepNs, 1, false}));
    ++i;
  }
  report_load(state, table);
}
BENCHMARK(BM_FindExisting)
    ->Args({10'000, 1})
    ->Args({kKeys, 0})
    ->Args({kKeys, 1})
    ->ArgNames({"keys", "huge"});

// As above, with prefetch() issued 8 requests ahead, as a server draining a batch would.
void BM_FindExistingPrefetched(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const auto keys = random_keys(n, 1);
  CounterTable table(roomy(16, state.range(1) != 0));
  fill(table, keys, kBucket, kT0);
  std::uint64_t now = kT0;
  std::size_t i = 0;
  for (auto _ : state) {
    table.prefetch(keys[((i + 8) * 7919) % n]);
    const KeyHash& k = keys[(i * 7919) % n];
    benchmark::DoNotOptimize(table.acquire(k, kBucket, Request{now += kStepNs, 1, false}));
    ++i;
  }
}
BENCHMARK(BM_FindExistingPrefetched)
    ->Args({kKeys, 0})
    ->Args({kKeys, 1})
    ->ArgNames({"keys", "huge"});

// Key i's hash, made from i as a server hashes a key it has just read: no key array to miss.
KeyHash key_of(std::uint64_t i) {
  KeyHash k;
  k.lo = splitmix64(i);
  k.hi = splitmix64(i);
  return k;
}

// A uniformly random index below n.
std::uint64_t random_below(std::uint64_t& seed, std::uint64_t n) {
  return static_cast<std::uint64_t>((static_cast<unsigned __int128>(splitmix64(seed)) * n) >> 64);
}

// A table of `n` keys made by key_of(), each with one token taken.
std::unique_ptr<CounterTable> table_of(std::size_t n, bool huge_pages) {
  auto table = std::make_unique<CounterTable>(roomy(16, huge_pages));
  for (std::size_t i = 0; i < n; ++i) table->acquire(key_of(i), kBucket, Request{kT0, 1, false});
  return table;
}

// The arguments of the acquire benchmarks: keys stored (in cache, and not), huge pages.
void table_args(benchmark::internal::Benchmark* b) {
  b->Args({10'000, 0})->Args({kKeys, 0})->Args({kKeys, 1})->ArgNames({"keys", "huge"});
}

// One acquire at a time on a stored key, the key hashed from a random index (as
// BM_FindExisting, without its key array: at 1M keys that array is 16 MB, and reading it is a
// cache miss of the benchmark's, not the table's). Args: keys stored, huge pages.
void BM_AcquireSingle(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  auto table = table_of(n, state.range(1) != 0);
  std::uint64_t seed = 21;
  std::uint64_t now = kT0;
  for (auto _ : state) {
    const KeyHash k = key_of(random_below(seed, n));
    benchmark::DoNotOptimize(table->acquire(k, kBucket, Request{now += kStepNs, 1, false}));
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
  report_load(state, *table);
}
BENCHMARK(BM_AcquireSingle)->Apply(table_args);

// A 64-item ACQUIRE frame on one shard, decided as Dispatcher::handle_acquire decides it: the
// frame's hashes in an array (made while the frame is read), one clock reading for the frame,
// then for_each_prefetched() over them. Time per decision is 1 / items_per_second.
void BM_AcquireBatch(benchmark::State& state) {
  constexpr std::size_t kBatch = 64;
  const auto n = static_cast<std::size_t>(state.range(0));
  auto table = table_of(n, state.range(1) != 0);
  std::vector<KeyHash> hashes(kBatch);
  std::vector<sluice::server::TableAnswer> answers(kBatch);
  std::uint64_t seed = 22;
  std::uint64_t now = kT0;
  for (auto _ : state) {
    for (KeyHash& k : hashes) k = key_of(random_below(seed, n));
    now += kBatch * kStepNs;
    table->for_each_prefetched(
        kBatch, [&](std::size_t k) -> const KeyHash& { return hashes[k]; },
        [&](std::size_t k) {
          answers[k] = table->acquire(hashes[k], kBucket, Request{now, 1, false});
        });
    benchmark::DoNotOptimize(answers.data());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kBatch));
  report_load(state, *table);
}
BENCHMARK(BM_AcquireBatch)->Apply(table_args);

// The machine's floor under the figures at 1M keys, measured in the same run: dependent loads
// of random cache lines over 48 MiB (about the records of 1M keys), one at a time. A decision on
// a key whose record is not in cache cannot take less than one of these. Arg: huge pages.
void BM_RandomLoadFloor(benchmark::State& state) {
#ifdef __linux__
  constexpr std::size_t kBytes = std::size_t{48} << 20;
  constexpr std::size_t kStride = 64 / sizeof(std::uint64_t);  // one word per cache line
  void* map = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED) return state.SkipWithError("mmap failed");
  if (state.range(0) != 0) madvise(map, kBytes, MADV_HUGEPAGE);
  auto* words = static_cast<std::uint64_t*>(map);
  // One cycle through every line in random order (Sattolo's shuffle).
  const std::size_t lines = kBytes / 64;
  std::vector<std::uint32_t> next(lines);
  for (std::size_t i = 0; i < lines; ++i) next[i] = static_cast<std::uint32_t>(i);
  std::uint64_t seed = 23;
  for (std::size_t i = lines - 1; i > 0; --i) std::swap(next[i], next[random_below(seed, i)]);
  for (std::size_t i = 0; i < lines; ++i) words[i * kStride] = next[i] * kStride;
  std::uint64_t at = 0;
  for (auto _ : state) benchmark::DoNotOptimize(at = words[at]);
  munmap(map, kBytes);
#else
  state.SkipWithError("needs mmap");
#endif
}
BENCHMARK(BM_RandomLoadFloor)->Arg(0)->Arg(1)->ArgName("huge");

// Inserts into a table sized for kKeys up front (no growth); refilled every kKeys inserts.
void BM_InsertPresized(benchmark::State& state) {
  const auto keys = random_keys(kKeys, 2);
  auto table = std::make_unique<CounterTable>(roomy(kKeys * 10 / 9 + 1));
  std::uint64_t now = kT0;
  std::size_t i = 0;
  for (auto _ : state) {
    if (i == kKeys) {
      state.PauseTiming();
      table = std::make_unique<CounterTable>(roomy(kKeys * 10 / 9 + 1));
      i = 0;
      state.ResumeTiming();
    }
    benchmark::DoNotOptimize(table->acquire(keys[i++], kBucket, Request{now += kStepNs, 1, false}));
  }
}
BENCHMARK(BM_InsertPresized);

// Inserts from 1024 slots up to kKeys: every rehash on the way is in the average.
void BM_InsertGrowing(benchmark::State& state) {
  const auto keys = random_keys(kKeys, 3);
  auto table = std::make_unique<CounterTable>(roomy(1024));
  std::uint64_t now = kT0;
  std::size_t i = 0;
  for (auto _ : state) {
    if (i == kKeys) {
      state.PauseTiming();
      table = std::make_unique<CounterTable>(roomy(1024));
      i = 0;
      state.ResumeTiming();
    }
    benchmark::DoNotOptimize(table->acquire(keys[i++], kBucket, Request{now += kStepNs, 1, false}));
  }
}
BENCHMARK(BM_InsertGrowing);

// A table full at its cap (~1M keys): every new key evicts one.
void BM_InsertAtCap(benchmark::State& state) {
  const std::size_t home_slots = kKeys * 10 / 9 + 1;
  TableConfig c;
  c.max_bytes = (home_slots + CounterTable::kMaxDisplacement + 1) * 40 + (1 << 20);
  c.initial_slots = home_slots;
  CounterTable table(c);
  std::uint64_t seed = 4;
  std::uint64_t now = kT0;
  for (std::size_t i = 0; i < kKeys; ++i) {
    table.acquire(KeyHash{splitmix64(seed), splitmix64(seed)}, kBucket, Request{now, 1, false});
  }
  for (auto _ : state) {
    // Keys made on the fly, so that every one is new however long the run.
    const KeyHash k{splitmix64(seed), splitmix64(seed)};
    benchmark::DoNotOptimize(table.acquire(k, kBucket, Request{now += kStepNs, 1, false}));
  }
  state.counters["evicted"] = static_cast<double>(table.stats().evicted);
  state.counters["keys"] = static_cast<double>(table.size());
}
BENCHMARK(BM_InsertAtCap);

void BM_SlidingLogExisting(benchmark::State& state) {
  constexpr std::size_t kLogKeys = 100'000;
  const auto keys = random_keys(kLogKeys, 5);
  const Rule log{Algorithm::kSlidingLog, 100, 3'600'000, 0};
  CounterTable table(roomy(16));
  fill(table, keys, log, kT0);
  std::uint64_t now = kT0;
  std::size_t i = 0;
  for (auto _ : state) {
    const KeyHash& k = keys[(i * 7919) % kLogKeys];
    benchmark::DoNotOptimize(table.acquire(k, log, Request{now += kStepNs, 1, false}));
    ++i;
  }
}
BENCHMARK(BM_SlidingLogExisting);

// New sliding-log keys at the cap, all logs live with one request each: every one takes the
// ring of another (reclaim_ring: of 16 sampled logs, all with as much left, the least recently
// used) after a first try that found none.
void BM_SlidingLogAtCap(benchmark::State& state) {
  const Rule log{Algorithm::kSlidingLog, 100, 3'600'000, 0};  // 1 KiB rings, live for an hour
  TableConfig c;
  c.max_bytes = 64u << 20;
  CounterTable table(c);
  std::uint64_t seed = 8;
  std::uint64_t now = kT0;
  while (table.stats().evicted == 0) {  // fill up to the cap
    table.acquire(KeyHash{splitmix64(seed), splitmix64(seed)}, log,
                  Request{now += kStepNs, 1, false});
  }
  for (auto _ : state) {
    const KeyHash k{splitmix64(seed), splitmix64(seed)};
    benchmark::DoNotOptimize(table.acquire(k, log, Request{now += kStepNs, 1, false}));
  }
  state.counters["keys"] = static_cast<double>(table.size());
  state.counters["failed"] = static_cast<double>(table.stats().failed_inserts);
}
BENCHMARK(BM_SlidingLogAtCap);

// export_record() on a stored key, as a replication batch reads each changed record. Arg 0:
// 1M token bucket keys; arg 1: 100k sliding logs of 50 entries each (limit 100), copied out.
void BM_ExportRecord(benchmark::State& state) {
  const bool logs = state.range(0) != 0;
  const std::size_t n = logs ? 100'000 : kKeys;
  const auto keys = random_keys(n, 10);
  const Rule log{Algorithm::kSlidingLog, 100, 3'600'000, 0};
  CounterTable table(roomy(16));
  for (const KeyHash& k : keys) table.acquire(k, logs ? log : kBucket, Request{kT0, 50, false});
  sluice::server::RecordImage image;
  std::vector<std::uint64_t> entries;
  std::size_t i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(table.export_record(keys[(i * 7919) % n], kT0, image, entries));
    benchmark::DoNotOptimize(image);
    ++i;
  }
}
BENCHMARK(BM_ExportRecord)->Arg(0)->Arg(1)->ArgName("log");

// apply_record() of a token bucket record. Arg 0: a new key, into a table sized for 1M keys (no
// growth; refilled every 1M applies, untimed), as a new replica fills. Arg 1: a newer image of
// one of 1M stored keys, so each apply replaces the state.
void BM_ApplyRecord(benchmark::State& state) {
  const bool existing = state.range(0) != 0;
  const auto keys = random_keys(kKeys, 11);
  const auto make_table = [] { return std::make_unique<CounterTable>(roomy(kKeys * 10 / 9 + 1)); };
  auto table = make_table();
  sluice::server::RecordImage image;
  image.algorithm = static_cast<std::uint8_t>(Algorithm::kTokenBucket);
  image.capacity_class = 14;
  image.idle_at_ns = kT0 + 3'600'000'000'000ull;
  image.state = {kT0, 1};
  if (existing) {
    for (const KeyHash& k : keys) {
      image.key = k;
      table->apply_record(image, {}, kT0);
    }
  }
  std::uint64_t now = kT0;
  std::size_t i = 0;
  for (auto _ : state) {
    if (!existing && i == kKeys) {
      state.PauseTiming();
      table = make_table();
      i = 0;
      state.ResumeTiming();
    }
    image.key = existing ? keys[(i * 7919) % kKeys] : keys[i];
    image.state.a = now += kStepNs;  // a later refill time: newer than what is stored
    benchmark::DoNotOptimize(table->apply_record(image, {}, kT0));
    ++i;
  }
}
BENCHMARK(BM_ApplyRecord)->Arg(0)->Arg(1)->ArgName("existing");

// A replica's REPLICATE batch: 256 newer images of random keys among 1M stored ones, applied
// one after another (arg 0) or with for_each_prefetched() (arg 1), as Dispatcher::
// handle_replicate does. items_per_second counts records.
void BM_ApplyBatch(benchmark::State& state) {
  const bool prefetched = state.range(0) != 0;
  constexpr std::size_t kBatch = 256;
  const auto keys = random_keys(kKeys, 12);
  CounterTable table(roomy(kKeys * 10 / 9 + 1, /*huge_pages=*/true));
  std::vector<sluice::server::RecordImage> batch(kBatch);
  for (auto& image : batch) {
    image.algorithm = static_cast<std::uint8_t>(Algorithm::kTokenBucket);
    image.capacity_class = 14;
    image.idle_at_ns = kT0 + 3'600'000'000'000ull;
    image.state = {kT0, 1};
  }
  for (const KeyHash& k : keys) {
    batch[0].key = k;
    table.apply_record(batch[0], {}, kT0);
  }
  std::uint64_t now = kT0;
  std::size_t next = 0;
  for (auto _ : state) {
    state.PauseTiming();
    for (auto& image : batch) {
      image.key = keys[(next++ * 7919) % kKeys];
      image.state.a = now += kStepNs;  // newer than what is stored
    }
    state.ResumeTiming();
    if (prefetched) {
      table.for_each_prefetched(
          kBatch, [&](std::size_t k) { return batch[k].key; },
          [&](std::size_t k) { benchmark::DoNotOptimize(table.apply_record(batch[k], {}, kT0)); });
    } else {
      for (const auto& image : batch) benchmark::DoNotOptimize(table.apply_record(image, {}, kT0));
    }
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kBatch));
}
BENCHMARK(BM_ApplyBatch)->Arg(0)->Arg(1)->ArgName("prefetched");

// scan() over 1M token bucket keys in pages of 256, restarting when done: time per record
// visited. Arg 0: every record wanted; arg 1: the records of 1/16 of the partitions (hi >> 48),
// so each visit also pays for the 15 records passed over, as a PULL of a few partitions does.
void BM_ScanPerRecord(benchmark::State& state) {
  const bool some = state.range(0) != 0;
  const auto keys = random_keys(kKeys, 12);
  CounterTable table(roomy(16));
  fill(table, keys, kBucket, kT0);
  std::uint64_t cursor = 0;
  std::uint64_t sum = 0;
  std::int64_t visited = 0;
  for (auto _ : state) {
    const sluice::server::ScanResult page = table.scan(
        cursor, 256, kT0, [some](const KeyHash& k) { return !some || (k.hi >> 48) % 16 == 5; },
        [&sum](const sluice::server::RecordImage& image, std::span<const std::uint64_t>) {
          sum += image.state.a;
        });
    cursor = page.next_cursor;
    visited += static_cast<std::int64_t>(page.visited);
  }
  benchmark::DoNotOptimize(sum);
  state.SetItemsProcessed(visited);
}
BENCHMARK(BM_ScanPerRecord)->Arg(0)->Arg(1)->ArgName("partitions");

// Examining slots that hold live records (nothing to drop): time per slot.
void BM_SweepLive(benchmark::State& state) {
  const auto keys = random_keys(kKeys, 6);
  CounterTable table(roomy(16));
  fill(table, keys, kBucket, kT0);
  constexpr std::size_t kBudget = 1024;
  for (auto _ : state) benchmark::DoNotOptimize(table.sweep(kT0, kBudget));
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kBudget));
}
BENCHMARK(BM_SweepLive);

// Dropping expired records: time per record dropped; refilled (untimed) when empty.
void BM_SweepExpired(benchmark::State& state) {
  const auto keys = random_keys(kKeys, 7);
  const Rule short_lived{Algorithm::kFixedWindow, 10, 1000, 0};
  CounterTable table(roomy(kKeys * 10 / 9 + 1));
  const std::uint64_t later = kT0 + 10'000'000'000ull;
  fill(table, keys, short_lived, kT0);
  std::int64_t dropped = 0;
  for (auto _ : state) {
    if (table.size() == 0) {
      state.PauseTiming();
      fill(table, keys, short_lived, kT0);
      state.ResumeTiming();
    }
    dropped += static_cast<std::int64_t>(table.sweep(later, 1024));
  }
  state.SetItemsProcessed(dropped);
}
BENCHMARK(BM_SweepExpired);

// One cheap system call (getppid, which glibc does not cache); nothing off Linux.
void one_syscall() {
#ifdef __linux__
  ::syscall(SYS_getppid);
#endif
}

// W3's table work on one shard: 1M uniform keys under a 100/s token bucket (a key idles 10 ms
// after its last use) at one decision per kStep of simulated time, decided in batches of 64 and
// swept as a shard does (for_each_prefetched, sweep_step every kSweepIntervalNs). Nearly every
// decision meets a key that has expired since its last visit. Warmed up for 3 simulated seconds
// first; reports the table's shape at the end. With syscall:1, a system call (getppid) before
// each batch, as a server makes them between frames: where a system call flushes the TLB
// (page-table isolation without PCID, as on the guest of docs/BENCHMARKS.md), the batch then
// starts with every page of the table cold; BM_Syscall is the call alone.
void BM_ShortLivedKeys(benchmark::State& state) {
  const bool syscall_each_batch = state.range(1) != 0;
  const Rule rule{Algorithm::kTokenBucket, 100, 1000, 0};
  constexpr std::uint64_t kStep = 435;  // ns of simulated time per decision
  constexpr std::size_t kBatch = 64;
  CounterTable table(roomy(1024, state.range(0) != 0));
  std::uint64_t seed = 11;
  std::uint64_t now = kT0;
  std::uint64_t next_sweep = kT0 + CounterTable::kSweepIntervalNs;
  // Key i's hash is made from i, as a server hashes a key it has just read: no key array to miss.
  std::vector<KeyHash> batch(kBatch);
  const auto run_batch = [&] {
    if (syscall_each_batch) one_syscall();
    for (KeyHash& k : batch) {
      std::uint64_t i = splitmix64(seed) % kKeys;
      k.lo = splitmix64(i);
      k.hi = splitmix64(i);
    }
    table.for_each_prefetched(
        kBatch, [&](std::size_t k) -> const KeyHash& { return batch[k]; },
        [&](std::size_t k) {
          benchmark::DoNotOptimize(table.acquire(batch[k], rule, Request{now += kStep, 1, false}));
        });
    if (now >= next_sweep) {
      next_sweep += CounterTable::kSweepIntervalNs;
      table.sweep_step(now);
    }
  };
  while (now < kT0 + 3'000'000'000ull) run_batch();
  for (auto _ : state) run_batch();
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kBatch));
  const auto stats = table.stats();
  state.counters["keys"] = static_cast<double>(stats.keys);
  state.counters["slots"] = static_cast<double>(stats.slots);
  state.counters["segments"] = static_cast<double>(stats.segments);
}
BENCHMARK(BM_ShortLivedKeys)->ArgsProduct({{0, 1}, {0, 1}})->ArgNames({"huge", "syscall"});

void BM_Syscall(benchmark::State& state) {
  for (auto _ : state) one_syscall();
}
BENCHMARK(BM_Syscall);

// Resident set size of this process, from /proc/self/statm (0 where there is none).
double rss_bytes() {
  std::ifstream statm("/proc/self/statm");
  double pages = 0;
  double resident = 0;
  statm >> pages >> resident;
  return resident * 4096;
}

// This thread's CPU time in ns (page faults included, time preempted by other processes not).
double thread_cpu_ns() {
#ifdef __linux__
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
#else
  return 0;
#endif
}

// Inserts up to state.range(0) keys into a table that starts at 1024 slots (records in huge
// pages when state.range(1) is 1: the first touch of each 2 MiB block is a page fault that
// zeroes it), timing each insert alone: the longest one is the growth pause. Reported: max_us
// (wall) and the insert count at which it happened, how many inserts took over 100 us and over
// 1 ms (wall), and max_cpu_us, the longest in thread CPU time: on a shared machine wall time
// also counts preemption.
void BM_InsertMaxPause(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  using SteadyClock = std::chrono::steady_clock;
  for (auto _ : state) {
    CounterTable table(roomy(1024, state.range(1) != 0));
    std::uint64_t seed = 8;
    std::uint64_t now = kT0;
    double max_ns = 0;
    std::size_t max_at = 0;
    std::size_t over_100us = 0;
    std::size_t over_1ms = 0;
    double max_cpu_ns = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const KeyHash k{splitmix64(seed), splitmix64(seed)};
      const double cpu_start = thread_cpu_ns();
      const auto start = SteadyClock::now();
      benchmark::DoNotOptimize(table.acquire(k, kBucket, Request{now += kStepNs, 1, false}));
      const double ns =
          std::chrono::duration<double, std::nano>(SteadyClock::now() - start).count();
      max_cpu_ns = std::max(max_cpu_ns, thread_cpu_ns() - cpu_start);
      over_100us += ns > 100e3;
      over_1ms += ns > 1e6;
      if (ns > max_ns) {
        max_ns = ns;
        max_at = i;
      }
    }
    state.counters["max_us"] = max_ns / 1e3;
    state.counters["max_at"] = static_cast<double>(max_at);
    state.counters["over_100us"] = static_cast<double>(over_100us);
    state.counters["over_1ms"] = static_cast<double>(over_1ms);
    state.counters["max_cpu_us"] = max_cpu_ns / 1e3;
  }
}
BENCHMARK(BM_InsertMaxPause)
    ->Args({kKeys, 0})
    ->Args({kKeys, 1})
    ->Args({5 * kKeys, 0})
    ->Args({5 * kKeys, 1})
    ->ArgNames({"keys", "huge"})
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

// Memory per key as one table grows from 1024 slots to state.range(0) keys (5M: one shard's part
// of the W5 workload; 10M: all of it in one table): memory_bytes() per key at the end
// (bytes_per_key), its worst and best over every multiple of 10k keys from 500k on (bpk_max,
// bpk_min), and RSS growth per key at the end (rss_per_key, which also counts allocator and
// page-table overhead).
void BM_BytesPerKey(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  for (auto _ : state) {
    const double rss_before = rss_bytes();
    CounterTable table(roomy(1024));
    std::uint64_t seed = 9;
    double worst = 0;
    double best = 1e9;
    for (std::size_t i = 1; i <= n; ++i) {
      table.acquire(KeyHash{splitmix64(seed), splitmix64(seed)}, kBucket, Request{kT0, 1, false});
      if (i >= 500'000 && i % 10'000 == 0) {
        const double per_key = static_cast<double>(table.memory_bytes()) / static_cast<double>(i);
        worst = std::max(worst, per_key);
        best = std::min(best, per_key);
      }
    }
    state.counters["bytes_per_key"] =
        static_cast<double>(table.memory_bytes()) / static_cast<double>(table.size());
    state.counters["rss_per_key"] = (rss_bytes() - rss_before) / static_cast<double>(table.size());
    if (worst > 0) {
      state.counters["bpk_max"] = worst;
      state.counters["bpk_min"] = best;
    }
  }
}
BENCHMARK(BM_BytesPerKey)
    ->Arg(500'000)
    ->Arg(kKeys)
    ->Arg(2'500'000)
    ->Arg(5 * kKeys)
    ->Arg(10 * kKeys)
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

}  // namespace
