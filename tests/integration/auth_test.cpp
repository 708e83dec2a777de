// Authentication (docs/PROTOCOL.md, section 6): with a token, a connection is served only after
// a HELLO that carries it; anything else gets one ERROR UNAUTHENTICATED and a close, while other
// connections go on. The token never shows in an ERROR or in STATS.
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tests/integration/raw_client.h"
#include "tests/integration/test_server.h"

namespace sluice::test {
namespace {

using namespace std::chrono_literals;
using protocol::WireErrorCode;

constexpr std::string_view kToken = "correct-horse-battery-staple";

server::ServerConfig config_with_token(unsigned shards = 2) {
  server::ServerConfig config = test_config(shards);
  config.auth_token = std::string(kToken);
  return config;
}

Rule any_rule() { return Rule{Algorithm::kTokenBucket, 100, 60'000, 0}; }

bool contains(std::span<const std::uint8_t> haystack, std::string_view needle) {
  return std::search(haystack.begin(), haystack.end(), needle.begin(), needle.end()) !=
         haystack.end();
}

struct Refusal {
  WireErrorCode code = WireErrorCode::kInternal;
  std::uint32_t request_id = 0;
  std::string message;
};

// The next frame must be an ERROR, and the server must then close the connection.
Refusal expect_error_then_close(RawClient& client) {
  const ReceivedFrame frame = client.read();
  REQUIRE(frame.header.opcode == protocol::Opcode::kError);
  protocol::ErrorReply error;
  REQUIRE(protocol::parse_error(frame.body, error));
  CHECK(client.wait_closed(3s));
  // No part of the token, not even a short run of it, is in the message.
  for (std::size_t at = 0; at + 4 <= kToken.size(); ++at) {
    CHECK_THAT(std::string(error.message), !Catch::Contains(std::string(kToken.substr(at, 4))));
  }
  return Refusal{error.code, frame.header.request_id, std::string(error.message)};
}

protocol::Bytes hello_frame(std::uint32_t id, std::uint8_t version, std::string_view token) {
  protocol::Bytes out;
  protocol::encode_hello_request(out, id, protocol::HelloRequest{version, "auth_test", token});
  return out;
}

TEST_CASE("with a token, HELLO with the right token is answered and ACQUIRE then served",
          "[auth]") {
  TestServer server(config_with_token());
  for (const std::uint16_t port : {server.port(), server.shard_port(0), server.shard_port(1)}) {
    CAPTURE(port);
    RawClient client(port);
    const protocol::HelloReply hello = client.hello(protocol::kVersion, kToken);
    CHECK(hello.version == protocol::kVersion);
    CHECK(client.acquire("authed", any_rule()).status == protocol::ItemStatus::kAllowed);
    CHECK(client.ping());
    CHECK(client.stats().at("total.auth_failures") == 0);
  }
}

TEST_CASE("a request pipelined right behind the authenticating HELLO is served", "[auth]") {
  TestServer server(config_with_token());
  RawClient client(server.port());
  protocol::Bytes burst = hello_frame(1, protocol::kVersion, kToken);
  const protocol::AcquireItem item{"pipelined", any_rule(), 1, false};
  protocol::encode_acquire_request(burst, 2, std::span(&item, 1));
  REQUIRE(client.send(burst));
  std::vector<std::uint32_t> ids;
  for (int i = 0; i < 2; ++i) {
    const ReceivedFrame reply = client.read();
    CHECK(reply.header.opcode != protocol::Opcode::kError);
    ids.push_back(reply.header.request_id);
  }
  std::sort(ids.begin(), ids.end());
  CHECK(ids == std::vector<std::uint32_t>{1, 2});
}

TEST_CASE("a wrong token gets ERROR UNAUTHENTICATED and a close", "[auth]") {
  const std::string wrong = GENERATE(std::string("correct-horse-battery-stapla"),  // last byte
                                     std::string("Correct-horse-battery-staple"),  // first byte
                                     std::string("correct-horse"),                 // a prefix
                                     std::string(kToken) + "-and-more",            // longer
                                     std::string(protocol::kMaxTokenLength, 'x'));
  CAPTURE(wrong.size());
  TestServer server(config_with_token());
  RawClient client(server.port());
  REQUIRE(client.send(hello_frame(21, protocol::kVersion, wrong)));
  const Refusal refusal = expect_error_then_close(client);
  CHECK(refusal.code == WireErrorCode::kUnauthenticated);
  CHECK(refusal.request_id == 21);
  CHECK(refusal.message == "wrong or missing token");
  CHECK_THAT(refusal.message, !Catch::Contains(wrong.substr(0, 8)));
}

TEST_CASE("a missing token, in a version 1 HELLO or an empty one in version 2, is refused alike",
          "[auth]") {
  const std::uint8_t version = GENERATE(std::uint8_t{1}, std::uint8_t{2});
  CAPTURE(version);
  TestServer server(config_with_token());
  RawClient client(server.shard_port(1));
  REQUIRE(client.send(hello_frame(22, version, "")));
  const Refusal refusal = expect_error_then_close(client);
  CHECK(refusal.code == WireErrorCode::kUnauthenticated);
  CHECK(refusal.request_id == 22);
  CHECK(refusal.message == "wrong or missing token");
}

TEST_CASE("PING, ACQUIRE, RESET or STATS before HELLO gets ERROR UNAUTHENTICATED and a close",
          "[auth]") {
  const std::string request = GENERATE("ping", "acquire", "reset", "stats");
  CAPTURE(request);
  TestServer server(config_with_token());
  RawClient client(server.port());
  protocol::Bytes out;
  const protocol::AcquireItem item{"early", any_rule(), 1, false};
  const std::string_view key = "early";
  if (request == "ping") protocol::encode_ping(out, 23, {}, false);
  if (request == "acquire") protocol::encode_acquire_request(out, 23, std::span(&item, 1));
  if (request == "reset") protocol::encode_reset_request(out, 23, std::span(&key, 1));
  if (request == "stats") protocol::encode_stats_request(out, 23);
  // A HELLO with the token right behind it comes too late: the connection is already refused.
  const protocol::Bytes hello = hello_frame(24, protocol::kVersion, kToken);
  out.insert(out.end(), hello.begin(), hello.end());
  REQUIRE(client.send(out));
  const Refusal refusal = expect_error_then_close(client);
  CHECK(refusal.code == WireErrorCode::kUnauthenticated);
  CHECK(refusal.request_id == 23);
  CHECK(refusal.message == "authentication required: send HELLO with the token first");

  // Nothing was decided for the refused ACQUIRE.
  RawClient good(server.port());
  good.hello(protocol::kVersion, kToken);
  const auto stats = good.stats();
  CHECK(stats.at("total.allowed") == 0);
  CHECK(stats.at("total.auth_failures") == 1);
  CHECK(stats.at("total.protocol_errors") == 0);
}

TEST_CASE("a wrong token in a second HELLO closes an authenticated connection", "[auth]") {
  TestServer server(config_with_token());
  RawClient client(server.port());
  client.hello(protocol::kVersion, kToken);
  client.hello(protocol::kVersion, kToken);  // the right token again is fine
  REQUIRE(client.send(hello_frame(25, protocol::kVersion, "guess")));
  CHECK(expect_error_then_close(client).code == WireErrorCode::kUnauthenticated);
}

TEST_CASE("an authenticated client is served throughout while others are refused", "[auth]") {
  TestServer server(config_with_token());
  RawClient good(server.port());
  good.hello(protocol::kVersion, kToken);
  constexpr int kRefused = 12;
  for (int i = 0; i < kRefused; ++i) {
    RawClient bad(server.port());
    if (i % 3 == 0) {
      REQUIRE(bad.send(hello_frame(1, protocol::kVersion, "not-the-token")));
    } else if (i % 3 == 1) {
      REQUIRE(bad.send(hello_frame(1, 1, "")));
    } else {
      protocol::Bytes ping;
      protocol::encode_ping(ping, 1, {}, false);
      REQUIRE(bad.send(ping));
    }
    CHECK(expect_error_then_close(bad).code == WireErrorCode::kUnauthenticated);
    CHECK(good.acquire("served-" + std::to_string(i), any_rule()).status ==
          protocol::ItemStatus::kAllowed);
  }
  CHECK(good.ping());

  // STATS counts the refusals and never holds the token, under any name or value.
  const std::uint32_t id = good.next_id();
  protocol::Bytes request;
  protocol::encode_stats_request(request, id);
  const ReceivedFrame reply = good.call(request, id);
  CHECK_FALSE(contains(reply.body, kToken));
  CHECK_FALSE(contains(reply.body, kToken.substr(0, 6)));
  std::vector<protocol::StatEntry> entries;
  REQUIRE(protocol::parse_stats_reply(reply.body, entries));
  std::uint64_t failures = 0;
  for (const auto& entry : entries) {
    if (entry.name == "total.auth_failures") failures = entry.value;
  }
  CHECK(failures == kRefused);
}

TEST_CASE("without a token the server takes HELLO with or without one, and requests before it",
          "[auth]") {
  TestServer server;  // no token
  RawClient before(server.port());
  CHECK(before.ping());
  CHECK(before.acquire("no-hello", any_rule()).status == protocol::ItemStatus::kAllowed);

  RawClient v1(server.port());
  CHECK(v1.hello(1).version == 1);
  CHECK(v1.ping());
  RawClient v2_empty(server.port());
  CHECK(v2_empty.hello(2, "").version == 2);
  CHECK(v2_empty.ping());
  RawClient v2_token(server.port());
  CHECK(v2_token.hello(2, "some-token-the-server-ignores").version == 2);
  CHECK(v2_token.acquire("with-token", any_rule()).status == protocol::ItemStatus::kAllowed);
  CHECK(v2_token.stats().at("total.auth_failures") == 0);
}

TEST_CASE("a HELLO token above kMaxTokenLength is a malformed frame, not an auth failure",
          "[auth]") {
  TestServer server(config_with_token());
  RawClient client(server.port());
  // A hand-built body: version 2, an empty name, token_len 1025 and as many bytes.
  protocol::Bytes body = {2, 0, 0x01, 0x04};
  body.insert(body.end(), protocol::kMaxTokenLength + 1, 'x');
  protocol::Bytes frame;
  const std::size_t start = protocol::begin_frame(frame, protocol::Opcode::kHello, 0, 26);
  frame.insert(frame.end(), body.begin(), body.end());
  protocol::finish_frame(frame, start);
  REQUIRE(client.send(frame));
  const Refusal refusal = expect_error_then_close(client);
  CHECK(refusal.code == WireErrorCode::kMalformedFrame);
  CHECK(refusal.message == "HELLO token too long");

  RawClient good(server.port());
  good.hello(protocol::kVersion, kToken);
  const auto stats = good.stats();
  CHECK(stats.at("total.protocol_errors") == 1);
  CHECK(stats.at("total.auth_failures") == 0);
}

}  // namespace
}  // namespace sluice::test
