// Stopping a node under load: every frame already received is answered, every connection then
// gets ERROR SHUTTING_DOWN and end of stream, no reply is cut, and a client that does not read
// cannot hold the node past its shutdown timeout.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "protocol/frame.h"
#include "protocol/messages.h"
#include "tests/integration/test_server.h"

namespace sluice::test {
namespace {

using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;

// A connected socket, or -1. No Catch2 assertion here: client threads call it, and Catch2's
// assertions are not thread-safe.
int connect_to(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    ::close(fd);
    return -1;
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

// What one busy client saw, from its first request to the end of the stream.
struct Seen {
  std::atomic<std::uint32_t> sent{0};  // requests written (read by the test while it runs)
  std::uint32_t answered = 0;          // ACQUIRE replies, each with an id that was sent, once
  bool duplicate_or_unknown = false;
  bool shutting_down = false;  // the last frame was ERROR SHUTTING_DOWN
  bool frame_after_error = false;
  bool cut = false;    // the stream ended inside a frame
  bool ended = false;  // end of stream (or reset) seen before the deadline
};

// Pipelines ACQUIREs of 16 keys (spread over the shards) up to `depth` in flight, reading as it
// goes, until the server ends the stream or `deadline`.
void busy_client(std::uint16_t port, int index, int depth, SteadyClock::time_point deadline,
                 Seen& seen) {
  const int fd = connect_to(port);
  if (fd < 0) return;  // seen.ended stays false: the test fails on it
  const protocol::FrameDecoder decoder(std::numeric_limits<std::uint32_t>::max());
  const Rule rule{Algorithm::kTokenBucket, 1'000'000, 1000, 0};
  std::vector<std::string> keys;
  for (int k = 0; k < 16; ++k)
    keys.push_back("busy:" + std::to_string(index) + ":" + std::to_string(k));
  std::vector<protocol::AcquireItem> items;
  for (const std::string& key : keys) items.push_back({key, rule, 1, false});
  std::set<std::uint32_t> outstanding;
  protocol::Bytes input;
  bool writable = true;
  while (SteadyClock::now() < deadline) {
    while (writable && outstanding.size() < static_cast<std::size_t>(depth)) {
      protocol::Bytes request;
      const std::uint32_t id = seen.sent.load() + 1;
      protocol::encode_acquire_request(request, id, items);
      if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
          static_cast<ssize_t>(request.size())) {
        writable = false;  // the server has closed: keep reading what it sent
        break;
      }
      outstanding.insert(id);
      seen.sent.store(id);
    }
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    std::uint8_t chunk[65536];
    const ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
    if (n <= 0) {
      seen.ended = true;
      seen.cut = !input.empty();
      break;
    }
    input.insert(input.end(), chunk, chunk + n);
    std::size_t at = 0;
    for (;;) {
      const auto decoded = decoder.decode(std::span<const std::uint8_t>(input).subspan(at));
      if (decoded.status != protocol::DecodeStatus::kOk) break;
      at += decoded.frame_size;
      if (seen.shutting_down) seen.frame_after_error = true;
      if (decoded.frame.header.opcode == protocol::Opcode::kError) {
        protocol::ErrorReply error;
        if (protocol::parse_error(decoded.frame.body, error) &&
            error.code == protocol::WireErrorCode::kShuttingDown) {
          seen.shutting_down = true;
        }
        continue;
      }
      if (outstanding.erase(decoded.frame.header.request_id) == 1) {
        ++seen.answered;
      } else {
        seen.duplicate_or_unknown = true;
      }
    }
    input.erase(input.begin(), input.begin() + static_cast<std::ptrdiff_t>(at));
  }
  ::close(fd);
}

TEST_CASE(
    "stopping under load answers every frame received, then SHUTTING_DOWN on every "
    "connection, and cuts no reply",
    "[shutdown]") {
  server::ServerConfig config = test_config(2);
  config.shutdown_timeout = 5s;
  auto server = std::make_unique<TestServer>(config);
  constexpr int kClients = 8;
  std::vector<Seen> seen(kClients);
  std::vector<std::thread> clients;
  const auto deadline = SteadyClock::now() + 15s;
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back(busy_client, server->port(), i, 32, deadline, std::ref(seen[i]));
  }
  // Let every client get going, then stop the node under them.
  REQUIRE(eventually(
      [&] {
        for (const Seen& s : seen) {
          if (s.sent < 200) return false;
        }
        return true;
      },
      10s));
  const auto stop_started = SteadyClock::now();
  server->server().stop();
  server->server().wait();
  const auto stop_took = SteadyClock::now() - stop_started;
  for (std::thread& t : clients) t.join();

  for (int i = 0; i < kClients; ++i) {
    INFO("client " << i << ": sent " << seen[i].sent.load() << ", answered " << seen[i].answered);
    CHECK(seen[i].ended);
    CHECK(seen[i].shutting_down);
    CHECK_FALSE(seen[i].frame_after_error);
    CHECK_FALSE(seen[i].cut);
    CHECK_FALSE(seen[i].duplicate_or_unknown);
    CHECK(seen[i].answered > 0);
  }
  // Busy clients read what they are sent and close: nobody waits for the timeout.
  CHECK(stop_took < 2s);
}

TEST_CASE("a client that does not read cannot hold the stop past the shutdown timeout",
          "[shutdown]") {
  server::ServerConfig config = test_config(1);
  config.shutdown_timeout = 500ms;
  config.max_queued_output = 64 << 10;
  TestServer server(config);
  const int fd = connect_to(server.port());
  REQUIRE(fd >= 0);
  {
    // One round trip first: the node has accepted the connection and serves it (else a stop
    // on a loaded machine could come before the accept, with nothing to wait for).
    protocol::Bytes ping;
    protocol::encode_ping(ping, 0, {}, false);
    REQUIRE(::send(fd, ping.data(), ping.size(), MSG_NOSIGNAL) ==
            static_cast<ssize_t>(ping.size()));
    pollfd p{fd, POLLIN, 0};
    REQUIRE(::poll(&p, 1, 5000) == 1);
    std::uint8_t reply[64];
    REQUIRE(::recv(fd, reply, sizeof reply, 0) == static_cast<ssize_t>(protocol::kHeaderSize));
  }
  protocol::Bytes flood;
  const protocol::Bytes payload(32 << 10, 0x44);
  for (std::uint32_t id = 1; id <= 64; ++id) protocol::encode_ping(flood, id, payload, false);
  std::size_t sent = 0;
  const auto push_until = SteadyClock::now() + 300ms;
  while (sent < flood.size() && SteadyClock::now() < push_until) {
    const ssize_t n =
        ::send(fd, flood.data() + sent, flood.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) sent += static_cast<std::size_t>(n);
  }
  const auto stop_started = SteadyClock::now();
  server.server().stop();
  server.server().wait();
  const auto stop_took = SteadyClock::now() - stop_started;
  CHECK(stop_took >= 400ms);
  CHECK(stop_took < 1500ms);
  ::close(fd);
}

}  // namespace
}  // namespace sluice::test
