// Protocol errors: one ERROR reply, then the connection closes; other connections go on.
#include <array>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "tests/integration/raw_client.h"
#include "tests/integration/test_server.h"

namespace sluice::test {
namespace {

using namespace std::chrono_literals;
using protocol::WireErrorCode;

// A raw 16-byte header, for frames the encoders refuse to produce.
protocol::Bytes raw_header(std::uint8_t version, std::uint8_t opcode, std::uint16_t flags,
                           std::uint32_t request_id, std::uint32_t body_length) {
  protocol::Bytes out = {0x53,
                         0x4C,
                         version,
                         opcode,
                         static_cast<std::uint8_t>(flags),
                         static_cast<std::uint8_t>(flags >> 8),
                         0,
                         0};
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<std::uint8_t>(request_id >> (8 * i)));
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<std::uint8_t>(body_length >> (8 * i)));
  return out;
}

// Reads the next frame, which must be an ERROR; returns it parsed. The connection must then
// be closed by the server.
protocol::WireErrorCode expect_error_then_close(RawClient& client,
                                                std::uint32_t* request_id = nullptr) {
  const ReceivedFrame frame = client.read();
  REQUIRE(frame.header.opcode == protocol::Opcode::kError);
  REQUIRE(frame.header.is_reply());
  protocol::ErrorReply error;
  REQUIRE(protocol::parse_error(frame.body, error));
  CHECK_FALSE(error.message.empty());
  if (request_id != nullptr) *request_id = frame.header.request_id;
  CHECK(client.wait_closed(3s));
  return error.code;
}

Rule any_rule() { return Rule{Algorithm::kTokenBucket, 100, 60'000, 0}; }

TEST_CASE("garbage gets an ERROR and a close, while another client keeps being served",
          "[errors]") {
  TestServer server;
  RawClient good(server.port());
  CHECK(good.ping());

  RawClient bad(server.port());
  const std::string garbage = "GET / HTTP/1.1\r\nHost: sluice\r\n\r\n";
  REQUIRE(
      bad.send(std::span(reinterpret_cast<const std::uint8_t*>(garbage.data()), garbage.size())));
  CHECK(expect_error_then_close(bad) == WireErrorCode::kMalformedFrame);

  CHECK(good.ping());
  CHECK(good.acquire("still-served", any_rule()).status == protocol::ItemStatus::kAllowed);
  CHECK(good.stats().at("total.protocol_errors") == 1);
}

TEST_CASE("an oversized body_length is refused from the header alone", "[errors][limits]") {
  server::ServerConfig config = test_config();
  config.max_frame = 4096;
  TestServer server(config);
  RawClient client(server.shard_port(0));
  // Only the header: the server must not wait for a body it will never accept.
  REQUIRE(client.send(raw_header(1, 0x03, 0, 77, 4097)));
  std::uint32_t id = 0;
  CHECK(expect_error_then_close(client, &id) == WireErrorCode::kFrameTooLarge);
  CHECK(id == 77);

  // max_frame itself is fine: a PING with exactly that payload is echoed.
  RawClient ok(server.shard_port(0));
  protocol::Bytes ping;
  const std::vector<std::uint8_t> payload(4096, 0xAB);
  protocol::encode_ping(ping, 5, payload, false);
  REQUIRE(ok.send(ping));
  const ReceivedFrame echo = ok.read();
  CHECK(echo.header.request_id == 5);
  CHECK(echo.body.size() == 4096);
}

TEST_CASE("a frame that arrives a byte at a time is still answered", "[errors]") {
  TestServer server;
  RawClient client(server.port());
  protocol::Bytes ping;
  const std::vector<std::uint8_t> payload(100, 7);
  protocol::encode_ping(ping, 9, payload, false);
  for (std::uint8_t byte : ping) REQUIRE(client.send(std::span(&byte, 1)));
  const ReceivedFrame echo = client.read();
  CHECK(echo.header.request_id == 9);
  CHECK(echo.body == protocol::Bytes(payload.begin(), payload.end()));
}

TEST_CASE("a header version the server does not speak (3 and up) is refused", "[errors]") {
  TestServer server;
  RawClient client(server.port());
  REQUIRE(client.send(raw_header(3, 0x02, 0, 11, 0)));
  CHECK(expect_error_then_close(client) == WireErrorCode::kUnsupportedVersion);
}

TEST_CASE("HELLO version 0 is refused", "[errors]") {
  TestServer server;
  RawClient client(server.port());
  protocol::Bytes hello;
  protocol::encode_hello_request(hello, 12, protocol::HelloRequest{0, "old", ""});
  REQUIRE(client.send(hello));
  std::uint32_t id = 0;
  CHECK(expect_error_then_close(client, &id) == WireErrorCode::kUnsupportedVersion);
  CHECK(id == 12);
}

TEST_CASE("an unknown opcode is refused and its request id echoed", "[errors]") {
  const std::uint8_t opcode = GENERATE(std::uint8_t{0x00}, std::uint8_t{0x42}, std::uint8_t{0x7E});
  CAPTURE(opcode);
  TestServer server;
  RawClient client(server.port());
  REQUIRE(client.send(raw_header(1, opcode, 0, 13, 0)));
  std::uint32_t id = 0;
  CHECK(expect_error_then_close(client, &id) == WireErrorCode::kUnknownOpcode);
  CHECK(id == 13);
}

TEST_CASE("a reply frame sent by a client is malformed", "[errors]") {
  TestServer server;
  RawClient client(server.port());
  protocol::Bytes reply;
  SECTION("a PING reply") { protocol::encode_ping(reply, 14, {}, /*reply=*/true); }
  SECTION("an ERROR") { protocol::encode_error(reply, 14, WireErrorCode::kInternal, "oops"); }
  SECTION("an ERROR without the reply flag") { reply = raw_header(1, 0x7F, 0, 14, 0); }
  REQUIRE(client.send(reply));
  std::uint32_t id = 0;
  CHECK(expect_error_then_close(client, &id) == WireErrorCode::kMalformedFrame);
  CHECK(id == 14);
}

TEST_CASE("a body that does not parse is malformed", "[errors]") {
  TestServer server;
  RawClient client(server.port());
  // An ACQUIRE claiming one item but carrying three bytes of it.
  protocol::Bytes frame = raw_header(1, 0x03, 0, 15, 7);
  for (std::uint8_t b : {1, 0, 0, 0, 5, 0, 0}) frame.push_back(b);
  REQUIRE(client.send(frame));
  CHECK(expect_error_then_close(client) == WireErrorCode::kMalformedFrame);
}

TEST_CASE("replies queued before a bad frame are still delivered", "[errors][pipeline]") {
  TestServer server;
  RawClient client(server.port());
  protocol::Bytes burst;
  const std::uint8_t payload[] = {1};
  protocol::encode_ping(burst, 1, payload, false);
  protocol::encode_ping(burst, 2, payload, false);
  const protocol::Bytes bad = raw_header(1, 0x42, 0, 3, 0);
  burst.insert(burst.end(), bad.begin(), bad.end());
  REQUIRE(client.send(burst));
  CHECK(client.read().header.request_id == 1);
  CHECK(client.read().header.request_id == 2);
  CHECK(expect_error_then_close(client) == WireErrorCode::kUnknownOpcode);
}

}  // namespace
}  // namespace sluice::test
