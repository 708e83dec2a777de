// Server lifecycle without clients (the network behaviour is in tests/integration).
#include "server/server.h"

#include <catch2/catch.hpp>
#include <stdexcept>
#include <thread>

#include "core/clock.h"

namespace sluice::server {
namespace {

ServerConfig local_config(unsigned shards) {
  ServerConfig config;
  config.port = 0;
  config.shards = shards;
  config.max_memory = 8u << 20;
  return config;
}

TEST_CASE("shards = 0 means one shard per core", "[server]") {
  Server server(local_config(0));
  CHECK(server.shard_count() == std::max(1u, std::thread::hardware_concurrency()));
}

TEST_CASE("an impossible configuration is refused up front", "[server]") {
  ServerConfig config = local_config(1);
  config.max_batch = 0;
  CHECK_THROWS_AS(Server(config), std::invalid_argument);
  CHECK_THROWS_AS(Server(local_config(100'000)), std::invalid_argument);
  ServerConfig no_output = local_config(1);
  no_output.max_queued_output = 0;
  CHECK_THROWS_AS(Server(no_output), std::invalid_argument);
}

TEST_CASE("the replication window is refused below 64 KiB and above 1 GiB and taken at both edges",
          "[server]") {
  ServerConfig config = local_config(1);
  config.replication_window_bytes = kMinReplicationWindow;
  CHECK_NOTHROW(Server(config));
  config.replication_window_bytes = kMaxReplicationWindow;
  CHECK_NOTHROW(Server(config));
  config.replication_window_bytes = kMinReplicationWindow - 1;
  CHECK_THROWS_AS(Server(config), std::invalid_argument);
  config.replication_window_bytes = kMaxReplicationWindow + 1;
  CHECK_THROWS_AS(Server(config), std::invalid_argument);
  ServerConfig no_stall = local_config(1);
  no_stall.replication_stall_after = std::chrono::milliseconds(0);
  CHECK_THROWS_AS(Server(no_stall), std::invalid_argument);
}

TEST_CASE("start() binds a distinct port per shard plus the public one", "[server]") {
  ManualClock clock;
  ServerConfig config = local_config(3);
  config.clock = &clock;
  Server server(config);
  server.start();
  CHECK(server.port() != 0);
  const auto ports = server.shard_ports();
  REQUIRE(ports.size() == 3);
  for (auto port : ports) {
    CHECK(port != 0);
    CHECK(port != server.port());
  }
  CHECK(ports[0] != ports[1]);
  CHECK(ports[1] != ports[2]);
  CHECK_THROWS_AS(server.start(), std::logic_error);
  server.stop();
  server.wait();
}

TEST_CASE("a bad bind address throws std::system_error", "[server]") {
  ServerConfig config = local_config(1);
  config.bind = "not-an-address";
  Server server(config);
  CHECK_THROWS_AS(server.start(), std::system_error);
}

TEST_CASE("stop() before start() and the destructor alone are harmless", "[server]") {
  {
    Server server(local_config(2));
    server.stop();
    server.wait();
  }
  {
    Server server(local_config(2));
    server.start();
  }  // the destructor stops and joins
  SUCCEED();
}

}  // namespace
}  // namespace sluice::server
