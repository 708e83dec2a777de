// Internal: which connection a key goes to. One node for now; the cluster (a hash ring over
// nodes, then shards within the node) will be another Router, so client.cpp does not change.
#pragma once

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

// One node. Shard-aware: key -> shard_for(hash, shards) -> that shard's own connection.
// Otherwise (no shard connections) every key goes to the public port.
class SingleNodeRouter final : public Router {
 public:
  SingleNodeRouter(Connection& public_port, std::vector<Connection*> shards)
      : public_(public_port), shards_(std::move(shards)) {}

  std::size_t size() const override { return shards_.empty() ? 1 : shards_.size(); }
  std::size_t route(const KeyHash& hash) const override {
    if (shards_.empty()) return 0;
    return shard_for(hash, static_cast<std::uint32_t>(shards_.size()));
  }
  Connection& connection(std::size_t index) override {
    return shards_.empty() ? public_ : *shards_[index];
  }
  Connection& control() override { return public_; }

 private:
  Connection& public_;
  std::vector<Connection*> shards_;
};

}  // namespace sluice::client::detail
