// STATS answers from a snapshot refreshed at most every stats_refresh, so it stays cheap under
// a flood of requests.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>

#include "tests/integration/raw_client.h"
#include "tests/integration/test_server.h"

namespace sluice::test {
namespace {

using namespace std::chrono_literals;

Rule any_rule() { return Rule{Algorithm::kFixedWindow, 100, 60'000, 0}; }

TEST_CASE("STATS repeats its snapshot within the refresh interval and renews it after", "[stats]") {
  server::ServerConfig config = test_config(2);
  config.stats_refresh = 100ms;
  TestServer server(config);
  RawClient client(server.port());

  const auto first = client.stats();
  CHECK(first.at("total.allowed") == 0);
  REQUIRE(client.acquire("a", any_rule()).status == protocol::ItemStatus::kAllowed);
  REQUIRE(client.acquire("b", any_rule()).status == protocol::ItemStatus::kAllowed);
  CHECK(client.stats() == first);  // the counters changed, the snapshot did not

  server.clock().advance_ns(100'000'000 - 1);
  CHECK(client.stats() == first);

  server.clock().advance_ns(1);
  const auto renewed = client.stats();
  CHECK(renewed.at("total.allowed") == 2);
  CHECK(renewed.at("total.keys") == 2);

  REQUIRE(client.acquire("c", any_rule()).status == protocol::ItemStatus::kAllowed);
  CHECK(client.stats() == renewed);
}

}  // namespace
}  // namespace sluice::test
