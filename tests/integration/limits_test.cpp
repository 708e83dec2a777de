// Configured limits at their edges, STATS, and the server's lifecycle.
#include <fmt/core.h>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "server/table/counter_table.h"
#include "tests/integration/raw_client.h"
#include "tests/integration/test_server.h"

namespace sluice::test {
namespace {

using namespace std::chrono_literals;
using protocol::ItemStatus;
using protocol::WireErrorCode;

Rule any_rule() { return Rule{Algorithm::kFixedWindow, 100, 60'000, 0}; }

protocol::WireErrorCode read_error(RawClient& client) {
  const ReceivedFrame frame = client.read();
  REQUIRE(frame.header.opcode == protocol::Opcode::kError);
  protocol::ErrorReply error;
  REQUIRE(protocol::parse_error(frame.body, error));
  return error.code;
}

TEST_CASE("a key of exactly max_key bytes is accepted, one byte more is not", "[limits]") {
  server::ServerConfig config = test_config();
  config.max_key = 40;
  TestServer server(config);
  RawClient client(server.port());
  const std::string longest(40, 'k');
  const std::string too_long(41, 'k');
  const std::vector<protocol::AcquireItem> items = {{longest, any_rule(), 1, false},
                                                    {too_long, any_rule(), 1, false},
                                                    {"", any_rule(), 1, false}};
  const auto results = client.acquire(items);
  CHECK(results[0].status == ItemStatus::kAllowed);
  CHECK(results[1].status == ItemStatus::kInvalidKey);
  CHECK(results[2].status == ItemStatus::kInvalidKey);
  CHECK(client.ping());  // an invalid item is not a protocol error

  const std::vector<std::string_view> keys = {longest, too_long};
  const auto reset = client.reset(keys);
  CHECK(reset[0] == protocol::ResetStatus::kRemoved);
  CHECK(reset[1] == protocol::ResetStatus::kInvalidKey);
}

TEST_CASE("a batch of max_batch items is answered, one more is refused", "[limits]") {
  server::ServerConfig config = test_config();
  config.max_batch = 16;
  TestServer server(config);
  std::vector<std::string> keys;
  for (int i = 0; i < 17; ++i) keys.push_back("batch-" + std::to_string(i));
  std::vector<protocol::AcquireItem> items;
  for (const auto& key : keys) items.push_back({key, any_rule(), 1, false});

  RawClient client(server.port());
  const auto results = client.acquire(std::span(items.data(), 16));
  CHECK(results.size() == 16);
  for (const auto& r : results) CHECK(r.status == ItemStatus::kAllowed);

  protocol::Bytes request;
  protocol::encode_acquire_request(request, 99, items);
  REQUIRE(client.send(request));
  CHECK(read_error(client) == WireErrorCode::kBatchTooLarge);
  CHECK(client.wait_closed(3s));

  RawClient resets(server.port());
  const std::vector<std::string_view> too_many(17, "k");
  protocol::Bytes reset;
  protocol::encode_reset_request(reset, 100, too_many);
  REQUIRE(resets.send(reset));
  CHECK(read_error(resets) == WireErrorCode::kBatchTooLarge);
}

TEST_CASE("max_connections are served, one more is refused with an ERROR", "[limits]") {
  server::ServerConfig config = test_config(2);
  config.max_connections = 3;
  TestServer server(config);
  std::vector<std::unique_ptr<RawClient>> clients;
  clients.push_back(std::make_unique<RawClient>(server.port()));
  clients.push_back(std::make_unique<RawClient>(server.shard_port(0)));
  clients.push_back(std::make_unique<RawClient>(server.shard_port(1)));
  for (auto& client : clients) CHECK(client->ping());

  RawClient refused(server.port());
  CHECK(read_error(refused) == WireErrorCode::kTooManyConnections);
  CHECK(refused.wait_closed(3s));
  for (auto& client : clients) CHECK(client->ping());  // the others are untouched

  // Once one leaves, a newcomer gets its slot (the close is noticed asynchronously).
  clients.pop_back();
  bool admitted = false;
  for (int attempt = 0; attempt < 50 && !admitted; ++attempt) {
    RawClient newcomer(server.port());
    ReceivedFrame frame;
    const std::uint8_t payload[] = {1, 2, 3};
    protocol::Bytes ping;
    protocol::encode_ping(ping, 1, payload, false);
    REQUIRE(newcomer.send(ping));
    REQUIRE(newcomer.read(frame, 2s) == RawClient::ReadEnd::kFrame);
    admitted = frame.header.opcode == protocol::Opcode::kPing;
    if (admitted) {
      const auto stats = newcomer.stats();
      CHECK(stats.at("total.connections") == 3);
      CHECK(stats.at("total.rejected_connections") >= 1);
    } else {
      std::this_thread::sleep_for(10ms);  // refused: the old slot is not free yet
    }
  }
  CHECK(admitted);
}

TEST_CASE("an idle connection is closed after idle_timeout", "[limits][idle]") {
  // Real time, with wide margins for loaded sanitizer runs: a 1 s timeout, a busy client that
  // talks every 100 ms, and a 10 s bound on waiting for the idle client's close.
  server::ServerConfig config = test_config(1);
  config.idle_timeout = 1s;
  TestServer server(config);

  RawClient idle(server.port(), 10s);
  const auto start = std::chrono::steady_clock::now();

  // A connection that keeps talking stays open past the timeout.
  RawClient busy(server.port(), 10s);
  const auto busy_start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - busy_start < 2s) {
    REQUIRE(busy.ping());
    std::this_thread::sleep_for(100ms);
  }

  CHECK(read_error(idle) == WireErrorCode::kIdleTimeout);
  CHECK(idle.wait_closed(10s));
  CHECK(std::chrono::steady_clock::now() - start >= 900ms);
  CHECK(busy.stats().at("total.idle_closed") == 1);
}

TEST_CASE("a pipelined burst of STATS is answered in full while queued output stays bounded",
          "[limits][backpressure]") {
  server::ServerConfig config = test_config(2);
  config.max_queued_output = 8 * 1024;
  TestServer server(config);
  RawClient client(server.shard_port(0), 10s);

  // Each burst reaches the server in one or a few reads; its replies (about 2 KiB each) are far
  // more than max_queued_output, so the server must pause mid-buffer and, once the client has
  // read, resume on the frames it already holds: the client sends nothing more until it has
  // every reply of the burst.
  constexpr std::uint32_t kBursts = 10;
  constexpr std::uint32_t kPerBurst = 2'000;
  std::size_t largest_reply = 0;
  for (std::uint32_t burst = 0; burst < kBursts; ++burst) {
    protocol::Bytes requests;
    for (std::uint32_t i = 1; i <= kPerBurst; ++i)
      protocol::encode_stats_request(requests, burst * kPerBurst + i);
    REQUIRE(client.send(requests));
    for (std::uint32_t i = 1; i <= kPerBurst; ++i) {
      const ReceivedFrame reply = client.read();
      REQUIRE(reply.header.opcode == protocol::Opcode::kStats);
      REQUIRE(reply.header.request_id == burst * kPerBurst + i);
      std::vector<protocol::StatEntry> entries;
      REQUIRE(protocol::parse_stats_reply(reply.body, entries));
      largest_reply = std::max(largest_reply, protocol::kHeaderSize + reply.body.size());
    }
  }
  // Decoding stops as soon as the limit is reached: at most one reply beyond it.
  fmt::print(
      "RELIABILITY: back-pressure (in process): at most {} bytes of output waited with "
      "max_queued_output {} (largest reply {} bytes) through {} pipelined STATS\n",
      server.server().TEST_peak_queued_output(), config.max_queued_output, largest_reply,
      kBursts * kPerBurst);
  CHECK(server.server().TEST_peak_queued_output() >= config.max_queued_output);
  CHECK(server.server().TEST_peak_queued_output() < config.max_queued_output + largest_reply);
  CHECK(client.ping());
}

TEST_CASE("a key the shard has no memory for is answered NO_MEMORY with all numbers 0",
          "[limits]") {
  server::ServerConfig config = test_config(1);
  config.max_memory = 64 << 10;
  TestServer server(config);
  RawClient client(server.port());
  const Rule huge{Algorithm::kSlidingLog, 10'000, 1000, 0};  // its log needs more than 64 KiB
  const protocol::AcquireResult result = client.acquire("huge", huge);
  CHECK(result.status == ItemStatus::kNoMemory);
  CHECK(result.limit == 0);
  CHECK(result.remaining == 0);
  CHECK(result.reset_after_ms == 0);
  CHECK(result.retry_after_ms == 0);
  CHECK(client.acquire("small", any_rule()).status == ItemStatus::kAllowed);
}

TEST_CASE("STATS counts decisions, connections and errors per shard and in total", "[stats]") {
  TestServer server(test_config(2));
  RawClient client(server.shard_port(0));
  const Rule rule{Algorithm::kFixedWindow, 2, 60'000, 0};
  const std::string local = key_on_shard(0, 2);
  const std::string foreign = key_on_shard(1, 2);
  for (int i = 0; i < 3; ++i) client.acquire(local, rule);    // 2 allowed, 1 denied on shard 0
  for (int i = 0; i < 4; ++i) client.acquire(foreign, rule);  // 2 allowed, 2 denied on shard 1
  client.acquire("", rule);                                   // invalid, counted on shard 0
  {
    RawClient bad(server.shard_port(1));
    const std::uint8_t junk[] = {0, 0, 0, 0};
    REQUIRE(bad.send(junk));
    CHECK(bad.wait_closed(3s));
  }
  REQUIRE(eventually([&] { return client.stats().at("total.connections") == 1; }));

  const auto stats = client.stats();
  CHECK(stats.at("shard.0.allowed") == 2);
  CHECK(stats.at("shard.0.denied") == 1);
  CHECK(stats.at("shard.1.allowed") == 2);
  CHECK(stats.at("shard.1.denied") == 2);
  CHECK(stats.at("total.allowed") == 4);
  CHECK(stats.at("total.denied") == 3);
  CHECK(stats.at("total.invalid_items") == 1);
  CHECK(stats.at("shard.0.handed_over") == 4);
  CHECK(stats.at("total.keys") == 2);
  CHECK(stats.at("shard.0.keys") == 1);
  CHECK(stats.at("total.memory_bytes") > 0);
  CHECK(stats.at("total.slots") > 0);
  CHECK(stats.at("shard.0.connections") == 1);
  CHECK(stats.at("shard.1.connections") == 0);
  CHECK(stats.at("shard.1.connections_total") == 1);
  CHECK(stats.at("shard.1.protocol_errors") == 1);
  CHECK(stats.at("total.protocol_errors") == 1);
  CHECK(stats.count("total.expired") == 1);
  CHECK(stats.count("total.evicted") == 1);
  CHECK(stats.count("total.failed_inserts") == 1);
  CHECK(stats.count("total.idle_closed") == 1);
  CHECK(stats.count("total.rejected_connections") == 1);
  CHECK(stats.at("total.huge_pages") == 0);  // off by default
}

TEST_CASE("STATS tells which shards keep their counters in huge pages", "[stats]") {
  server::ServerConfig config = test_config(2);
  config.max_memory = 2 * server::CounterTable::kHugePagesMinBytes;
  SECTION("off by default") {
    TestServer server(config);
    RawClient client(server.port());
    CHECK(client.stats().at("total.huge_pages") == 0);
  }
  SECTION("on when asked, from 64 MiB a shard") {
    config.huge_pages = true;
    TestServer server(config);
    RawClient client(server.port());
    const auto stats = client.stats();
    CHECK(stats.at("shard.0.huge_pages") == 1);
    CHECK(stats.at("total.huge_pages") == 2);
  }
  SECTION("off below 64 MiB a shard, even when asked") {
    config.huge_pages = true;
    config.max_memory = 2 * server::CounterTable::kHugePagesMinBytes - 2;
    TestServer server(config);
    RawClient client(server.port());
    CHECK(client.stats().at("total.huge_pages") == 0);
  }
}

TEST_CASE("the periodic sweep drops keys that have expired", "[stats][sweep]") {
  TestServer server(test_config(2));
  RawClient client(server.port());
  const Rule one_second{Algorithm::kFixedWindow, 5, 1000, 0};
  for (unsigned s = 0; s < 2; ++s) client.acquire(key_on_shard(s, 2), one_second);
  CHECK(client.stats().at("total.keys") == 2);

  server.clock().advance_ms(10'000);  // both windows and the ones after them are over
  // Nobody touches the keys again: only the sweep can drop them.
  CHECK(eventually([&] {
    const auto stats = client.stats();
    return stats.at("total.keys") == 0 && stats.at("total.expired") == 2;
  }));
}

TEST_CASE("stop() with connections open returns promptly", "[lifecycle]") {
  auto server = std::make_unique<TestServer>(test_config(2));
  std::vector<std::unique_ptr<RawClient>> clients;
  for (int i = 0; i < 6; ++i) {
    const std::uint16_t port = i % 3 == 0 ? server->port() : server->shard_port(i % 2);
    clients.push_back(std::make_unique<RawClient>(port));
    CHECK(clients.back()->ping());
  }
  // One connection has requests in flight, one a half-written frame.
  protocol::Bytes burst;
  const Rule rule = any_rule();
  for (int i = 0; i < 200; ++i) {
    const std::string key = "stop-" + std::to_string(i);
    const protocol::AcquireItem item{key, rule, 1, false};
    protocol::encode_acquire_request(burst, static_cast<std::uint32_t>(i + 1), std::span(&item, 1));
  }
  REQUIRE(clients[0]->send(burst));
  const std::uint8_t half[] = {0x53, 0x4C, 1};
  REQUIRE(clients[1]->send(half));

  const auto start = std::chrono::steady_clock::now();
  server->server().stop();
  server->server().wait();
  CHECK(std::chrono::steady_clock::now() - start < 10s);  // a hang detector, not a speed check
  for (auto& client : clients) CHECK(client->wait_closed(2s));
  server->server().stop();  // idempotent
  server.reset();
}

TEST_CASE("a client that half-closes still gets every reply, then the close", "[lifecycle]") {
  TestServer server(test_config(3));
  RawClient client(server.shard_port(0));
  protocol::Bytes burst;
  for (std::uint32_t i = 1; i <= 300; ++i) {
    const std::string key = key_on_shard(i % 3, 3, "half-" + std::to_string(i) + "-");
    const protocol::AcquireItem item{key, any_rule(), 1, false};
    protocol::encode_acquire_request(burst, i, std::span(&item, 1));
  }
  REQUIRE(client.send(burst));
  client.shutdown_send();
  std::set<std::uint32_t> ids;
  ReceivedFrame frame;
  while (client.read(frame, 5s) == RawClient::ReadEnd::kFrame) {
    CHECK(frame.header.opcode == protocol::Opcode::kAcquire);
    ids.insert(frame.header.request_id);
  }
  CHECK(ids.size() == 300);
}

TEST_CASE("stop() during cross-shard traffic returns promptly", "[lifecycle]") {
  auto server = std::make_unique<TestServer>(test_config(3));
  constexpr int kThreads = 4;
  std::vector<std::thread> threads;
  std::atomic<int> replies{0};
  for (int t = 0; t < kThreads; ++t) {
    const std::uint16_t port = server->shard_port(t % 3);
    threads.emplace_back([port, t, &replies] {
      try {
        RawClient client(port, 3s);
        const Rule rule{Algorithm::kGcra, 1000, 1000, 0};
        // Keep 64 batches of keys on every shard in flight until the server goes away.
        for (std::uint32_t round = 0; round < 10'000; ++round) {
          protocol::Bytes burst;
          for (std::uint32_t i = 0; i < 64; ++i) {
            std::vector<std::string> keys;
            for (int k = 0; k < 6; ++k) keys.push_back(fmt::format("{}-{}-{}", t, i, k));
            std::vector<protocol::AcquireItem> items;
            for (const auto& key : keys) items.push_back({key, rule, 1, false});
            protocol::encode_acquire_request(burst, round * 64 + i + 1, items);
          }
          if (!client.send(burst)) return;
          for (int i = 0; i < 64; ++i) {
            ReceivedFrame frame;
            if (client.read(frame, 3s) != RawClient::ReadEnd::kFrame) return;
            replies.fetch_add(1);
          }
        }
      } catch (const std::exception&) {
        // The server went away mid-connect or mid-frame: expected here.
      }
    });
  }
  REQUIRE(eventually([&] { return replies.load() >= 500; }));
  const auto start = std::chrono::steady_clock::now();
  server->server().stop();
  server->server().wait();
  CHECK(std::chrono::steady_clock::now() - start < 10s);  // a hang detector, not a speed check
  for (auto& thread : threads) thread.join();
  server.reset();
}

TEST_CASE("start() throws std::system_error when a port is taken", "[lifecycle]") {
  TestServer first(test_config(1));
  server::ServerConfig config = test_config(1);
  config.port = 0;
  config.shard_base_port = first.shard_port(0);
  server::Server second(config);
  CHECK_THROWS_AS(second.start(), std::system_error);
}

TEST_CASE("start() throws std::system_error when another server holds the public port",
          "[lifecycle]") {
  TestServer first(test_config(2));
  server::ServerConfig config = test_config(1);
  config.port = first.port();
  // A shard port that is free (a stopped server's): only the public port is contested.
  {
    TestServer unused(test_config(1));
    config.shard_base_port = unused.shard_port(0);
  }
  server::Server second(config);
  try {
    second.start();
    FAIL("the second server started on a port the first one listens on");
  } catch (const std::system_error& e) {
    CHECK(e.code() == std::errc::address_in_use);
  }
  // The first server still answers on its public port.
  RawClient client(first.port());
  CHECK(client.ping());
}

TEST_CASE("shard ports follow shard_base_port", "[lifecycle]") {
  // Find a free pair by letting the kernel pick, then ask for exactly those numbers.
  std::uint16_t base = 0;
  {
    TestServer probe(test_config(1));
    base = probe.shard_port(0);
  }
  server::ServerConfig config = test_config(1);
  config.shard_base_port = base;
  server::Server server(config);
  try {
    server.start();
  } catch (const std::system_error&) {
    SUCCEED("the port was taken again in between; nothing to check");
    return;
  }
  CHECK(server.shard_ports() == std::vector<std::uint16_t>{base});
  RawClient client(base);
  CHECK(client.hello().this_shard == 0);
}

}  // namespace
}  // namespace sluice::test
