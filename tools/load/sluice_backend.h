// sluice-load's Sluice backend: a request is one call of the client library,
// acquire_batch_async (probe_batch_async for --op ping), which groups the keys by owning shard,
// sends one frame per group on that shard's own connections and calls back once every frame is
// answered. The client runs on the worker's io_context, so its callbacks run on the thread that
// issues the next request. What a gateway using the library would pay (routing, grouping, the
// pending table, the timeout tick) is in the measurement. docs/LOAD.md, "How a run works".
#pragma once

#include "net/asio.h"  // before any other Asio header

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "client/client.h"
#include "tools/load/backend.h"
#include "tools/load/key_generator.h"
#include "tools/load/load_driver.h"

namespace sluice::load {

class SluiceBackend final : public Backend {
 public:
  // `connections` (the worker's share) are spread over the seed node's `shards`, at least one
  // to each: ceil(connections / shards) per shard, on every node of a cluster. `audit`: null
  // without --audit.
  SluiceBackend(BackendHost& host, const LoadOptions& options, const KeyFormatter& formatter,
                SharedAudit* audit, unsigned connections, unsigned shards);

  // HELLO on the public port, then on every shard connection of every node.
  client::Status connect() override;
  unsigned connections() const override { return connections_; }
  unsigned nodes() const override;
  void reserve(std::size_t requests) override;
  void start() override {}
  // Lanes mean nothing here: the client routes each key to its shard. Keys are formatted into
  // per-item slices of one arena; the client encodes them before it returns.
  void issue(std::uint32_t r, std::span<const std::uint64_t> keys, std::uint32_t lane) override;
  void flush() override {}  // the client writes by itself
  void close() override;

 private:
  void on_results(std::uint32_t r, std::span<const client::Result<client::Decision>> results);

  BackendHost& host_;
  const LoadOptions& o_;
  const KeyFormatter& formatter_;
  SharedAudit* const audit_;
  const unsigned per_shard_;  // connections to each shard
  unsigned connections_;
  std::unique_ptr<client::Client> client_;
  std::vector<char> key_arena_;  // one request's keys, max_length() bytes each
  std::vector<client::AcquireRequest> acquire_items_;
  // Per request, for the audit: its keys (--batch slots each) and the system time it was sent.
  std::vector<std::uint64_t> keys_;
  std::vector<std::uint64_t> sent_unix_ns_;
  bool closed_ = false;
};

}  // namespace sluice::load
