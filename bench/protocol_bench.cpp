// Cost of the wire format on the hot path: encoding and decoding ACQUIRE frames of one and of
// 64 items (keys of about 16 bytes), with buffers reused as a connection would reuse them.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <string>
#include <vector>

#include "core/rule.h"
#include "core/verdict.h"
#include "protocol/frame.h"
#include "protocol/messages.h"

namespace {

using namespace sluice;
using namespace sluice::protocol;

struct Batch {
  std::vector<std::string> keys;
  std::vector<AcquireItem> items;
  std::vector<AcquireResult> results;
};

Batch make_batch(int size) {
  Batch batch;
  batch.keys.reserve(size);
  for (int i = 0; i < size; ++i) {
    char key[32];
    std::snprintf(key, sizeof key, "tenant:%03d:u%05d", i % 1000, i * 7919 % 100000);
    batch.keys.emplace_back(key);  // 16 bytes
  }
  for (const std::string& key : batch.keys) {
    AcquireItem item;
    item.key = key;
    item.rule = Rule{Algorithm::kTokenBucket, 100, 1000, 200};
    batch.items.push_back(item);
    batch.results.push_back(AcquireResult{ItemStatus::kAllowed, 200, 150, 500, 0});
  }
  return batch;
}

void BM_EncodeAcquireRequest(benchmark::State& state) {
  const Batch batch = make_batch(static_cast<int>(state.range(0)));
  Bytes out;
  std::uint32_t request_id = 0;
  for (auto _ : state) {
    out.clear();
    encode_acquire_request(out, ++request_id, batch.items);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * out.size()));
}

void BM_DecodeParseAcquireRequest(benchmark::State& state) {
  const Batch batch = make_batch(static_cast<int>(state.range(0)));
  Bytes frame;
  encode_acquire_request(frame, 1, batch.items);
  const FrameDecoder decoder;
  std::vector<AcquireItem> items;
  for (auto _ : state) {
    const DecodeResult decoded = decoder.decode(frame);
    const ParseResult parsed = parse_acquire_request(decoded.frame.body, kDefaultMaxBatch, items);
    benchmark::DoNotOptimize(parsed.ok);
    benchmark::DoNotOptimize(items.data());
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * frame.size()));
}

void BM_EncodeAcquireReply(benchmark::State& state) {
  const Batch batch = make_batch(static_cast<int>(state.range(0)));
  Bytes out;
  for (auto _ : state) {
    out.clear();
    encode_acquire_reply(out, 1, batch.results);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * out.size()));
}

void BM_DecodeParseAcquireReply(benchmark::State& state) {
  const Batch batch = make_batch(static_cast<int>(state.range(0)));
  Bytes frame;
  encode_acquire_reply(frame, 1, batch.results);
  const FrameDecoder decoder;
  std::vector<AcquireResult> results;
  for (auto _ : state) {
    const DecodeResult decoded = decoder.decode(frame);
    const ParseResult parsed = parse_acquire_reply(decoded.frame.body, results);
    benchmark::DoNotOptimize(parsed.ok);
    benchmark::DoNotOptimize(results.data());
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * frame.size()));
}

void BM_ToResult(benchmark::State& state) {
  Verdict decision{false, 200, 0, 1'234'567'891, 4'999'999};
  for (auto _ : state) {
    benchmark::DoNotOptimize(decision);
    benchmark::DoNotOptimize(to_result(decision));
  }
}

}  // namespace

BENCHMARK(BM_EncodeAcquireRequest)->Arg(1)->Arg(64);
BENCHMARK(BM_DecodeParseAcquireRequest)->Arg(1)->Arg(64);
BENCHMARK(BM_EncodeAcquireReply)->Arg(1)->Arg(64);
BENCHMARK(BM_DecodeParseAcquireReply)->Arg(1)->Arg(64);
BENCHMARK(BM_ToResult);
