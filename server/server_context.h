// What every shard of a node shares (docs/ARCHITECTURE.md, "Threads and ownership"): the
// configuration, the node's identity and ports, the fence of etcd mode, the connection count and
// the shutdown bookkeeping. Set up before the shard threads start; afterwards only the atomics
// change.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/clock.h"
#include "server/server.h"

namespace sluice::server {

class Shard;
class ShardEngine;

struct ServerContext {
  // Both in server/shard.cpp, where Shard is complete.
  ServerContext();
  ~ServerContext();
  ServerContext(const ServerContext&) = delete;
  ServerContext& operator=(const ServerContext&) = delete;

  ServerConfig config;
  const Clock* clock = nullptr;
  unsigned shard_count = 1;
  std::vector<std::unique_ptr<Shard>> shards;
  // Each shard's engine, by shard index (each Shard registers its own as it is made): what a
  // STATS reply sums over.
  std::vector<const ShardEngine*> engines;
  std::uint16_t public_port = 0;
  std::vector<std::uint16_t> shard_ports;
  std::string node_id;
  // RELOAD (static cluster mode): rereads the cluster file off the shard threads and calls
  // `done(epoch in force, "" or why the file was refused)` on some thread. Set by Server.
  std::function<void(std::function<void(std::uint64_t, std::string)> done)> reload_cluster;
  // DRAIN (etcd mode): sets this node's record to draining, then calls `done(epoch, "" or why
  // not)`. Set by Server in etcd mode only.
  std::function<void(std::function<void(std::uint64_t, std::string)> done)> drain_node;

  // The fence, in etcd mode (docs/ARCHITECTURE.md, "Fencing and failover with etcd"): the node
  // decides as primary only while boottime_now_ns() is below fence_deadline_ns, which the
  // membership agent moves forward with each answered keepalive of its etcd lease and each read
  // that confirms its map (the earlier of the two bounds), and sets to 0 when the lease is
  // lost. `fenced`: the node runs under a fence (set before the shard threads start).
  bool fenced = false;
  std::atomic<std::uint64_t> fence_deadline_ns{0};
  // etcd mode, for STATS ("node.*"): why the fence is closed (cluster::FenceReason, 0 while
  // open), and the index in --etcd of the member the node's calls go to.
  std::atomic<std::uint8_t> fence_reason{3};
  std::atomic<std::uint32_t> etcd_endpoint{0};

  std::atomic<std::uint32_t> connections{0};  // open connections on all shards (max_connections)

  // Shutdown: the shards keep running until every shard has closed its listeners and
  // connections and every hand-over task is back home; then their work guards are released.
  std::atomic<unsigned> shards_closed{0};
  std::atomic<std::uint64_t> tasks_in_flight{0};
  std::atomic<bool> released{false};
  void maybe_release();  // server/shard.cpp
};

}  // namespace sluice::server
