// The Sluice client library: what a gateway embeds to ask the daemon for decisions.
//
//   auto client = sluice::client::Client::connect({.servers = {"127.0.0.1:7420"}});
//   if (!client.ok()) { ...client.status().to_string()... }
//   Result<Decision> d = (*client)->acquire("user:42", rule);
//
// Errors are values (Status, Result<T>); nothing throws. Every call has a timeout. All methods
// are thread-safe; callbacks run on the client's single I/O thread and must not block it.
// docs/CLIENT.md describes the threading model, the errors and the header fields.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "client/decision.h"
#include "client/status.h"
#include "core/rule.h"

namespace sluice::client {

struct ClientOptions {
  // "host:port" of the daemon's public port. One node is used for now: the first that answers.
  std::vector<std::string> servers = {"127.0.0.1:7420"};
  std::chrono::milliseconds timeout{100};           // per call, from submission to reply
  std::chrono::milliseconds connect_timeout{1000};  // TCP connect + HELLO
  std::string client_name = "sluice-client";        // sent in HELLO, for the server's logs
  // Connect to each shard's own port and send each key straight to its owner. When false,
  // everything goes through the public port and the server hands keys over between shards.
  bool shard_aware = true;
};

// One item of a batch.
struct AcquireRequest {
  std::string_view key;
  Rule rule;
  std::uint32_t cost = 1;
  bool peek = false;  // report the decision without consuming anything
};

struct Stat {
  std::string name;  // e.g. "total.allowed", "shard.0.keys"
  std::uint64_t value = 0;
};

// What the HELLO handshake on the public port told us.
struct ServerInfo {
  std::string endpoint;  // the "host:port" connected to
  std::string node_id;
  std::vector<std::uint16_t> shard_ports;  // index = shard
  std::uint32_t max_frame = 0;
  std::uint16_t max_key = 0;
  std::uint16_t max_batch = 0;
};

// Invoked exactly once, on the client's I/O thread. A callback that captures at most two
// pointers is stored without a heap allocation.
using AcquireCallback = std::function<void(Result<Decision>)>;

class Client {
 public:
  // Connects to the first server that answers HELLO and, when shard-aware, to every shard port
  // (HELLO on each). Fails with kInvalidArgument, kConnectionFailed, kTimeout or kServerError.
  static Result<std::unique_ptr<Client>> connect(ClientOptions options);

  // Fails every call still in flight with kClosed and joins the I/O thread. REQUIRES: not
  // called from a callback, and no call on this client runs concurrently.
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Takes `cost` units for `key` under `rule` if available. Blocks for at most the timeout.
  Result<Decision> acquire(std::string_view key, const Rule& rule, std::uint32_t cost = 1);
  // The decision acquire() would give, without consuming anything.
  Result<Decision> peek(std::string_view key, const Rule& rule, std::uint32_t cost = 1);
  // Non-blocking acquire (peek when `request.peek`); `done` runs on the I/O thread.
  void acquire_async(const AcquireRequest& request, AcquireCallback done);
  void acquire_async(std::string_view key, const Rule& rule, std::uint32_t cost,
                     AcquireCallback done);
  // Many decisions in one round trip per shard; results[i] answers items[i]. `results` is
  // resized and reused. Blocks for at most the timeout.
  void acquire_batch(std::span<const AcquireRequest> items, std::vector<Result<Decision>>& results);
  std::vector<Result<Decision>> acquire_batch(std::span<const AcquireRequest> items);

  // Forgets the key's counters; true when the key existed.
  Result<bool> reset(std::string_view key);
  // Round-trip time of a PING on the public port.
  Result<std::chrono::nanoseconds> ping();
  // The server's counters (public port), in the server's order.
  Result<std::vector<Stat>> stats();

  const ServerInfo& server_info() const;
  const ClientOptions& options() const;

  struct Impl;  // client/client.cpp

 private:
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Parses "host:port" (IPv6 hosts in brackets: "[::1]:7420"). False when malformed.
bool split_host_port(std::string_view text, std::string& host, std::uint16_t& port);

}  // namespace sluice::client
