// An in-process sluiced for integration tests: 127.0.0.1, ephemeral ports, a ManualClock that
// only moves when a test says so (windows never roll over mid-test). Stopped by its destructor.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include "core/clock.h"
#include "core/key_hash.h"
#include "server/server.h"
#include "tests/support/slack.h"

namespace sluice::test {

// A minute boundary, so that fixed windows start exactly at the test's first request.
inline constexpr std::uint64_t kTestStartNs = 1'700'000'040'000'000'000ull;

inline server::ServerConfig test_config(unsigned shards = 2) {
  server::ServerConfig config;
  config.bind = "127.0.0.1";
  config.port = 0;
  config.shard_base_port = 0;
  config.shards = shards;
  config.max_memory = 16u << 20;
  config.idle_timeout = std::chrono::milliseconds(0);
  config.stats_refresh = std::chrono::milliseconds(0);  // STATS shows every change at once
  config.shutdown_timeout = std::chrono::seconds(2);
  return config;
}

class TestServer {
 public:
  explicit TestServer(server::ServerConfig config = test_config()) : clock_(kTestStartNs) {
    config.clock = &clock_;
    server_ = std::make_unique<server::Server>(config);
    server_->start();
  }
  ~TestServer() {
    server_->stop();
    server_->wait();
  }

  server::Server& server() { return *server_; }
  ManualClock& clock() { return clock_; }
  std::uint16_t port() const { return server_->port(); }
  std::uint16_t shard_port(unsigned shard) const { return server_->shard_ports().at(shard); }
  unsigned shard_count() const { return server_->shard_count(); }

 private:
  ManualClock clock_;
  std::unique_ptr<server::Server> server_;
};

// A key (prefix + number) that shard `shard` of `shard_count` owns.
inline std::string key_on_shard(unsigned shard, unsigned shard_count,
                                const std::string& prefix = "key-") {
  for (int i = 0; i < 100'000; ++i) {
    std::string key = prefix + std::to_string(i);
    if (shard_for(hash_key(key), shard_count) == shard) return key;
  }
  throw std::runtime_error("no key found for the shard");
}

// Polls `condition` until it holds (true) or `timeout` passes (false).
template <typename Condition>
bool eventually(Condition condition, std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return condition();
}

}  // namespace sluice::test
