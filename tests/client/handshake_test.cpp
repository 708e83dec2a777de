// What connect() says when the peer is not a Sluice node: a TCP connect that failed, a peer
// that accepted but sent no HELLO reply, and one that answered bytes that are not Sluice
// (with require_cluster_at_connect: tests/client/no_cluster_test.cpp has a connect that
// succeeds without a node).
#include <catch2/catch.hpp>
#include <chrono>
#include <string>

#include "client/client.h"
#include "tests/client/test_support.h"

namespace sluice::client {
namespace {

using namespace std::chrono_literals;
using testing::FakeServer;
using testing::options_for;

ClientOptions quick_options(const std::string& address) {
  ClientOptions options = options_for(address, /*shard_aware=*/false);
  options.connect_timeout = 200ms;  // these connects are meant to fail
  options.require_cluster_at_connect = true;
  return options;
}

std::uint16_t closed_port(const char* host) {
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor probe(
      io, boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address(host), 0));
  return probe.local_endpoint().port();
}

TEST_CASE("a peer that accepts but never answers HELLO is named as not answering HELLO") {
  FakeServer silent(FakeServer::Mode::kSilent);
  const auto connected = Client::connect(quick_options(silent.address()));
  REQUIRE_FALSE(connected.ok());
  CHECK(connected.code() == ErrorCode::kTimeout);
  CHECK(connected.status().message() ==
        "no seed answered: no Sluice HELLO from " + silent.address() + " within 200 ms");
}

TEST_CASE("a peer that answers HELLO with bytes that are not Sluice is named as not Sluice") {
  FakeServer redis(FakeServer::Mode::kNotSluice);
  const auto connected = Client::connect(quick_options(redis.address()));
  REQUIRE_FALSE(connected.ok());
  CHECK(connected.code() == ErrorCode::kProtocolError);
  CHECK(connected.status().message() ==
        redis.address() + " answered something that is not Sluice (bad magic)");
}

TEST_CASE("a refused TCP connect is reported as a failed connect") {
  const std::string address = "127.0.0.1:" + std::to_string(closed_port("127.0.0.1"));
  const auto connected = Client::connect(quick_options(address));
  REQUIRE_FALSE(connected.ok());
  CHECK(connected.code() == ErrorCode::kConnectionFailed);
  CHECK_THAT(connected.status().message(),
             Catch::StartsWith("no seed answered: connect to " + address + " failed"));
}

TEST_CASE("IPv6 endpoints print in brackets") {
  FakeServer silent(FakeServer::Mode::kSilent, "::1");
  REQUIRE(silent.address().rfind("[::1]:", 0) == 0);
  const auto no_hello = Client::connect(quick_options(silent.address()));
  REQUIRE_FALSE(no_hello.ok());
  CHECK(no_hello.status().message() ==
        "no seed answered: no Sluice HELLO from " + silent.address() + " within 200 ms");

  const std::string closed = "[::1]:" + std::to_string(closed_port("::1"));
  const auto refused = Client::connect(quick_options(closed));
  REQUIRE_FALSE(refused.ok());
  CHECK_THAT(refused.status().message(),
             Catch::StartsWith("no seed answered: connect to " + closed + " failed"));
}

}  // namespace
}  // namespace sluice::client
