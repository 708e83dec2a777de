// INSPECT (docs/PROTOCOL.md, section 12): what a node stores for a key, asked through any port,
// read-only; a bad key is an item answer, a bad body a connection error.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "core/algorithms.h"
#include "core/key_hash.h"
#include "tests/integration/raw_client.h"
#include "tests/integration/test_server.h"

namespace sluice::test {
namespace {

using namespace std::chrono_literals;
using protocol::InspectRole;
using protocol::InspectStatus;

constexpr std::uint64_t kMsNs = 1'000'000;

TEST_CASE("INSPECT answers what the key's shard stores through every port, and changes nothing",
          "[inspect][shards]") {
  TestServer server;
  const std::string key = key_on_shard(1, server.shard_count(), "inspect-");
  const Rule rule{.algorithm = Algorithm::kFixedWindow, .limit = 10, .period_ms = 60'000};
  RawClient client(server.port());
  REQUIRE(client.acquire(key, rule, 3).status == protocol::ItemStatus::kAllowed);

  // The public port, the owner's port, and the other shard's (a hand-over) agree.
  for (const std::uint16_t port : {server.port(), server.shard_port(1), server.shard_port(0)}) {
    INFO("port " << port);
    RawClient asker(port);
    const RawClient::Inspected inspected = asker.inspect(key);
    const protocol::InspectReply& reply = inspected.reply;
    CHECK(reply.status == InspectStatus::kStored);
    CHECK(reply.role == InspectRole::kStandalone);
    CHECK(reply.partition_state == 0);
    CHECK(reply.shard == 1);
    CHECK(reply.now_ns == kTestStartNs);
    const KeyHash hash = hash_key(key);
    CHECK(reply.record.fp_lo == hash.lo);
    CHECK(reply.record.fp_hi == hash.hi);
    CHECK(reply.record.algorithm == static_cast<std::uint8_t>(Algorithm::kFixedWindow));
    // The window of the test's start (a minute boundary), counted 3.
    const std::vector<StateField> fields = describe_state(
        Algorithm::kFixedWindow, CounterState{reply.record.state_a, reply.record.state_b});
    REQUIRE(fields.size() == 2);
    CHECK(fields[0].value == kTestStartNs / (60'000 * kMsNs));
    CHECK(fields[1].value == 3);
    // Fresh again at the window's end (the table keeps expiries rounded up to 2^19 ns).
    CHECK(reply.record.idle_at_ns >= kTestStartNs + 60'000 * kMsNs);
    CHECK(reply.record.idle_at_ns < kTestStartNs + 60'000 * kMsNs + (1u << 19));
    CHECK(reply.record.capacity_class == 15 * 7 / 10);
    CHECK(inspected.log.empty());
  }
  // Three inspections spent nothing: 7 are left.
  CHECK(client.acquire(key, rule, 7).status == protocol::ItemStatus::kAllowed);
  CHECK(client.acquire(key, rule, 1).status == protocol::ItemStatus::kDenied);
}

TEST_CASE("INSPECT of a sliding log carries its timestamps, and of an absent key nothing",
          "[inspect]") {
  TestServer server;
  const Rule rule{.algorithm = Algorithm::kSlidingLog, .limit = 5, .period_ms = 1000};
  RawClient client(server.port());
  REQUIRE(client.acquire("log-key", rule, 2).status == protocol::ItemStatus::kAllowed);
  server.clock().advance_ms(250);
  REQUIRE(client.acquire("log-key", rule, 1).status == protocol::ItemStatus::kAllowed);

  const RawClient::Inspected log = client.inspect("log-key");
  CHECK(log.reply.status == InspectStatus::kStored);
  CHECK(log.reply.record.algorithm == static_cast<std::uint8_t>(Algorithm::kSlidingLog));
  CHECK(log.log ==
        std::vector<std::uint64_t>{kTestStartNs, kTestStartNs, kTestStartNs + 250 * kMsNs});
  CHECK(log.reply.now_ns == kTestStartNs + 250 * kMsNs);

  const RawClient::Inspected absent = client.inspect("never-seen");
  CHECK(absent.reply.status == InspectStatus::kAbsent);
  CHECK(absent.log.empty());
  // An expired record is absent too: the log's last entry is over a period old (the table
  // keeps expiries rounded up to 2^19 ns, about half a millisecond).
  server.clock().advance_ms(1001);
  CHECK(client.inspect("log-key").reply.status == InspectStatus::kAbsent);
}

TEST_CASE("INSPECT of an empty or overlong key is answered INVALID_KEY and the connection goes on",
          "[inspect]") {
  TestServer server;
  RawClient client(server.port());
  CHECK(client.inspect("").reply.status == InspectStatus::kInvalidKey);
  CHECK(client.inspect(std::string(protocol::kDefaultMaxKey + 1, 'k')).reply.status ==
        InspectStatus::kInvalidKey);
  CHECK(client.inspect(std::string(protocol::kDefaultMaxKey, 'k')).reply.status ==
        InspectStatus::kAbsent);
  CHECK(client.ping());
}

TEST_CASE("an INSPECT body with bytes after its key is refused MALFORMED_FRAME and closed",
          "[inspect][errors]") {
  TestServer server;
  RawClient good(server.port());
  RawClient bad(server.port());
  protocol::Bytes frame;
  protocol::encode_inspect_request(frame, 9, "abc");
  frame.push_back(0);  // one byte more than the key
  frame[12] += 1;      // body_length, little-endian (section 2)
  REQUIRE(bad.send(frame));
  const ReceivedFrame reply = bad.read();
  REQUIRE(reply.header.opcode == protocol::Opcode::kError);
  CHECK(reply.header.request_id == 9);
  protocol::ErrorReply error;
  REQUIRE(protocol::parse_error(reply.body, error));
  CHECK(error.code == protocol::WireErrorCode::kMalformedFrame);
  CHECK(bad.wait_closed(3s));
  CHECK(good.ping());
}

}  // namespace
}  // namespace sluice::test
