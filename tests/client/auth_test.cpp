// ClientOptions::auth_token against a node that requires a token (and one that does not): the
// right token is served on every connection, a wrong or missing one fails connect() with
// kUnauthenticated and a message that names the node but never a token.
#include <catch2/catch.hpp>
#include <chrono>
#include <string>

#include "client/client.h"
#include "protocol/messages.h"
#include "tests/client/test_support.h"

namespace sluice::client {
namespace {

using testing::connect_or_fail;
using testing::options_for;
using testing::per_minute;
using testing::TestServer;

const std::string kToken = "client-test-token-7f3a";

TEST_CASE("a client with the node's token is served on the public and the shard ports") {
  TestServer server(kToken);
  const bool shard_aware = GENERATE(true, false);
  CAPTURE(shard_aware);
  ClientOptions options = options_for(server.address(), shard_aware);
  options.auth_token = kToken;
  options.connections_per_shard = 2;
  auto client = connect_or_fail(options);
  for (int i = 0; i < 3; ++i) {
    const auto decision = client->acquire("authed:" + std::to_string(i), per_minute(5));
    REQUIRE(decision.ok());
    CHECK(decision->allowed);
  }
  CHECK(client->ping().ok());
  CHECK(client->reset("authed:0").value());
  const auto stats = client->stats();
  REQUIRE(stats.ok());
  for (const Stat& stat : *stats) {
    if (stat.name == "total.auth_failures") CHECK(stat.value == 0);
  }
}

TEST_CASE("a client with a wrong token fails to connect with kUnauthenticated") {
  TestServer server(kToken);
  const std::string wrong =
      GENERATE(std::string("client-test-token-7f3b"), std::string("client"), std::string(""));
  CAPTURE(wrong);
  ClientOptions options = options_for(server.address(), /*shard_aware=*/false);
  options.auth_token = wrong;
  const auto connected = Client::connect(options);
  REQUIRE_FALSE(connected.ok());
  CHECK(connected.code() == ErrorCode::kUnauthenticated);
  CHECK(connected.status().to_string() ==
        "unauthenticated: HELLO refused by " + server.address() + ": wrong or missing token");
  CHECK_THAT(connected.status().message(), !Catch::Contains(kToken.substr(0, 6)));

  // The node counted it and goes on serving a client that has the token.
  ClientOptions good = options_for(server.address());
  good.auth_token = kToken;
  auto client = connect_or_fail(good);
  const auto stats = client->stats();
  REQUIRE(stats.ok());
  std::uint64_t failures = 0;
  for (const Stat& stat : *stats) {
    if (stat.name == "total.auth_failures") failures = stat.value;
  }
  CHECK(failures == 1);
  CHECK(client->acquire("after-refusal", per_minute(1))->allowed);
}

TEST_CASE("a client with a token is served by a node that requires none") {
  TestServer server;
  ClientOptions options = options_for(server.address());
  options.auth_token = kToken;
  auto client = connect_or_fail(options);
  CHECK(client->acquire("open-node", per_minute(1))->allowed);
}

TEST_CASE("a token longer than kMaxTokenLength is refused before connecting") {
  ClientOptions options = options_for("127.0.0.1:1");  // never reached
  options.auth_token = std::string(protocol::kMaxTokenLength + 1, 't');
  const auto refused = Client::connect(options);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.code() == ErrorCode::kInvalidArgument);
  CHECK(refused.status().message() == "auth_token is longer than 1024 bytes");

  // The longest one is sent whole: the node compares it (and refuses it, being wrong).
  TestServer server(kToken);
  options = options_for(server.address(), /*shard_aware=*/false);
  options.auth_token = std::string(protocol::kMaxTokenLength, 't');
  CHECK(Client::connect(options).code() == ErrorCode::kUnauthenticated);
  options.auth_token = kToken;
  CHECK(Client::connect(options).ok());
}

TEST_CASE("error_code_name names kUnauthenticated") {
  CHECK(error_code_name(ErrorCode::kUnauthenticated) == "unauthenticated");
  CHECK(Status(ErrorCode::kUnauthenticated, "wrong or missing token").to_string() ==
        "unauthenticated: wrong or missing token");
}

}  // namespace
}  // namespace sluice::client
