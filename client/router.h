// Internal: which connection a key goes to. One node for now; the cluster (a hash ring over
// nodes, then shards within the node) will be another Router, so client.cpp does not change.
#pragma once

#include <atomic>
#include <cstddef>
#include <vector>

#include "client/connection.h"
#include "core/key_hash.h"

namespace sluice::client::detail {

class Router {
 public:
  virtual ~Router() = default;
  // Connections that own keys, numbered [0, size()).
  virtual std::size_t size() const = 0;
  // The index of the connection that owns the key with this hash.
  virtual std::size_t route(const KeyHash& hash) const = 0;
  virtual Connection& connection(std::size_t index) = 0;
  // The connection for node-level calls (PING, STATS): the public port.
  virtual Connection& control() = 0;
};

// One node. Shard-aware: key -> shard_for(hash, shards) -> one of that shard's connections.
// Otherwise every key goes to the public port's connections. Among an owner's connections
// the one with the fewest calls in flight is chosen (ties rotate).
class SingleNodeRouter final : public Router {
 public:
  // owners[i]: the connections to owner i (shard i, or the public port when not shard-aware),
  // none empty. `control` is the public port's first connection.
  SingleNodeRouter(Connection& control, std::vector<std::vector<Connection*>> owners)
      : control_(control), owners_(std::move(owners)) {}

  std::size_t size() const override { return owners_.size(); }
  std::size_t route(const KeyHash& hash) const override {
    if (owners_.size() == 1) return 0;
    return shard_for(hash, static_cast<std::uint32_t>(owners_.size()));
  }
  Connection& connection(std::size_t index) override {
    const std::vector<Connection*>& group = owners_[index];
    if (group.size() == 1) return *group[0];
    const std::size_t n = group.size();
    const std::size_t start = rotation_.fetch_add(1, std::memory_order_relaxed) % n;
    std::size_t best = start;
    std::size_t best_load = group[start]->load();
    for (std::size_t i = 1; i < n && best_load > 0; ++i) {
      const std::size_t c = (start + i) % n;
      const std::size_t load = group[c]->load();
      if (load < best_load) {
        best = c;
        best_load = load;
      }
    }
    return *group[best];
  }
  Connection& control() override { return control_; }

 private:
  Connection& control_;
  std::vector<std::vector<Connection*>> owners_;
  std::atomic<std::size_t> rotation_{0};
};

}  // namespace sluice::client::detail
