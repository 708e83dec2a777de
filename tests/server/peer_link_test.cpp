// PeerLink, the node-to-node connection: HELLO in protocol 3, replies to the owner, retries
// while the other node is not there, and nothing after close().
#include "server/peer_link.h"

#include "net/asio.h"  // before any other Asio header

#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "protocol/messages.h"
#include "tests/integration/test_server.h"

namespace sluice::server {
namespace {

using namespace std::chrono_literals;

// Runs `io` until `done()` or `limit` passes; returns done().
template <typename Done>
bool run_until(boost::asio::io_context& io, Done done, std::chrono::milliseconds limit = 5s) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done() && std::chrono::steady_clock::now() < deadline) {
    io.run_for(5ms);
    io.restart();
  }
  return done();
}

std::uint16_t closed_port() {
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor acceptor(io, {boost::asio::ip::make_address("127.0.0.1"), 0});
  return acceptor.local_endpoint().port();  // closed again when the acceptor goes
}

TEST_CASE("a peer link says HELLO, learns the node's shard ports and carries requests",
          "[peer_link]") {
  test::TestServer node(test::test_config(2));
  boost::asio::io_context io;
  std::vector<protocol::Bytes> replies;
  int ups = 0;
  PeerLink::Config config;
  config.host = "127.0.0.1";
  config.port = node.port();
  config.epoch = 7;
  auto link = std::make_shared<PeerLink>(
      io, config,
      [&](const protocol::Frame& frame) {
        CHECK(frame.header.version == protocol::kFrameVersionEpoch);
        replies.emplace_back(frame.body.begin(), frame.body.end());
      },
      [&](bool up, const std::string& why) {
        INFO(why);
        CHECK(up);
        ++ups;
      });
  link->start();
  REQUIRE(run_until(io, [&] { return link->up(); }));
  CHECK(ups == 1);
  CHECK(link->hello().version == protocol::kVersion);
  CHECK(link->hello().shard_ports.size() == 2);
  CHECK(link->hello().shard_ports[1] == node.shard_port(1));

  const std::uint8_t payload[] = {4, 5, 6};
  for (int i = 0; i < 3; ++i) {
    protocol::encode_ping(link->output(), link->next_id(), payload, false, link->framing());
  }
  link->flush();
  REQUIRE(run_until(io, [&] { return replies.size() == 3; }));
  CHECK(replies[2] == protocol::Bytes{4, 5, 6});
  link->close();
  io.run_for(20ms);
  CHECK(replies.size() == 3);
}

TEST_CASE("a peer link whose output passes its bound drops the connection and comes back up",
          "[peer_link]") {
  test::TestServer node(test::test_config(1));
  boost::asio::io_context io;
  std::vector<std::string> downs;
  int ups = 0;
  PeerLink::Config config;
  config.host = "127.0.0.1";
  config.port = node.port();
  config.max_output_bytes = 64 * 1024;
  auto link = std::make_shared<PeerLink>(
      io, config, [](const protocol::Frame&) {},
      [&](bool up, const std::string& why) {
        if (up) {
          ++ups;
        } else {
          downs.push_back(why);
        }
      });
  link->start();
  REQUIRE(run_until(io, [&] { return link->up(); }));
  // 48 MiB at once: no socket takes that much without the other side reading, so most of it
  // is still waiting after flush(), far past the bound.
  const std::vector<std::uint8_t> payload(48 * 1024, 7);
  for (int i = 0; i < 1024; ++i) {
    protocol::encode_ping(link->output(), link->next_id(), payload, false, link->framing());
  }
  link->flush();
  CHECK(link->pending_output() == 0);  // dropped with the connection, not kept
  REQUIRE(run_until(io, [&] { return !downs.empty() && ups == 2; }));
  CHECK(downs.front().find("does not read") != std::string::npos);
  CHECK(link->up());
  link->close();
}

TEST_CASE("a peer link retries with backoff while nobody listens, and stops at close()",
          "[peer_link]") {
  boost::asio::io_context io;
  std::vector<std::string> failures;
  PeerLink::Config config;
  config.host = "127.0.0.1";
  config.port = closed_port();
  config.retry_min = 5ms;
  config.retry_max = 20ms;
  auto link = std::make_shared<PeerLink>(
      io, config, [](const protocol::Frame&) { FAIL("no reply expected"); },
      [&](bool up, const std::string& why) {
        CHECK_FALSE(up);
        failures.push_back(why);
      });
  link->start();
  REQUIRE(run_until(io, [&] { return failures.size() >= 3; }));
  CHECK_THAT(failures[0], Catch::Contains("connect 127.0.0.1:"));
  link->close();
  const std::size_t seen = failures.size();
  io.run_for(100ms);
  CHECK(failures.size() == seen);
  CHECK_FALSE(link->up());
}

TEST_CASE("a peer link whose token is refused reports the refusal and retries", "[peer_link]") {
  server::ServerConfig with_token = test::test_config(1);
  with_token.auth_token = "the-right-one";
  test::TestServer node(with_token);
  boost::asio::io_context io;
  std::vector<std::string> failures;
  PeerLink::Config config;
  config.host = "127.0.0.1";
  config.port = node.port();
  config.token = "a-wrong-one";
  config.retry_min = 5ms;
  auto link = std::make_shared<PeerLink>(
      io, config, [](const protocol::Frame&) {},
      [&](bool up, const std::string& why) {
        CHECK_FALSE(up);
        failures.push_back(why);
      });
  link->start();
  REQUIRE(run_until(io, [&] { return !failures.empty(); }));
  CHECK_THAT(failures[0], Catch::Contains("unauthenticated"));
  CHECK(failures[0].find("a-wrong-one") == std::string::npos);
  link->close();
}

}  // namespace
}  // namespace sluice::server
