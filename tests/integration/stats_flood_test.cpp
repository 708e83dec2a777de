// A flood of STATS from connections that never read does not starve a well-behaved client.

#include <fmt/core.h>
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>
#include "net/asio.h"  // before any other Asio header

#include "tests/integration/raw_client.h"
#include "tests/integration/test_server.h"

namespace sluice::test {
namespace {

using namespace std::chrono_literals;

// Connections that pipeline STATS and never read their replies, each up to a fixed number of
// requests.
class StatsFlood {
 public:
  StatsFlood(std::uint16_t port, int connections, std::uint64_t requests_each)
      : requests_each_(requests_each) {
    const boost::asio::ip::tcp::endpoint endpoint(boost::asio::ip::make_address("127.0.0.1"), port);
    for (int i = 0; i < connections; ++i) {
      auto& socket = sockets_.emplace_back(io_);
      socket.connect(endpoint);
      // Small buffers: the replies back up into the server soon, and the kernel holds little.
      socket.set_option(boost::asio::socket_base::receive_buffer_size(64 << 10));
      socket.set_option(boost::asio::socket_base::send_buffer_size(64 << 10));
      socket.non_blocking(true);
    }
    sent_.assign(sockets_.size(), 0);
    for (int i = 0; i < kRequestsPerWrite; ++i)
      protocol::encode_stats_request(requests_, static_cast<std::uint32_t>(i + 1));
  }

  // One non-blocking write to every connection that has requests left; false when none took a
  // byte (all full or done).
  bool write_round() {
    bool any = false;
    for (std::size_t i = 0; i < sockets_.size(); ++i) {
      const std::uint64_t left = requests_each_ * protocol::kHeaderSize - sent_[i];
      if (left == 0) continue;
      // After a partial write, go on mid-request: the requests differ only in their ids.
      const std::size_t offset = sent_[i] % protocol::kHeaderSize;
      const std::size_t length = std::min<std::uint64_t>(left, requests_.size() - offset);
      boost::system::error_code ec;
      const std::size_t n =
          sockets_[i].write_some(boost::asio::buffer(requests_.data() + offset, length), ec);
      if (!ec && n > 0) {
        any = true;
        sent_[i] += n;
        total_sent_.fetch_add(n, std::memory_order_relaxed);
      }
    }
    return any;
  }

  // Whole requests written so far, by all connections (any thread).
  std::uint64_t requests_sent() const {
    return total_sent_.load(std::memory_order_relaxed) / protocol::kHeaderSize;
  }

 private:
  static constexpr int kRequestsPerWrite = 256;
  const std::uint64_t requests_each_;
  boost::asio::io_context io_;
  std::vector<boost::asio::ip::tcp::socket> sockets_;
  std::vector<std::uint64_t> sent_;
  std::atomic<std::uint64_t> total_sent_{0};
  protocol::Bytes requests_;
};

TEST_CASE("PINGs keep answering within 500 ms while 50 connections pipeline STATS unread",
          "[stats]") {
  server::ServerConfig config = test_config(2);
  config.stats_refresh = 100ms;
  // Each flooder's unread replies stop its reading at 1 MiB: the server still answers several
  // hundred STATS per connection before it pauses, and the test's memory stays modest.
  config.max_queued_output = 1u << 20;
  TestServer server(config);
  RawClient pinger(server.port());
  REQUIRE(pinger.ping());

  // 4000 requests (64 KB) each fit in the server's receive buffer: they are all sent at once,
  // and the server works through them (until each connection pauses) while the PINGs go.
  constexpr int kFlooders = 50;
  constexpr std::uint64_t kRequestsEach = 4000;
  StatsFlood flood(server.port(), kFlooders, kRequestsEach);
  const auto send_deadline = std::chrono::steady_clock::now() + 5s;
  while (flood.requests_sent() < kFlooders * kRequestsEach &&
         std::chrono::steady_clock::now() < send_deadline) {
    if (!flood.write_round()) std::this_thread::sleep_for(1ms);
  }
  REQUIRE(flood.requests_sent() == kFlooders * kRequestsEach);

  std::chrono::steady_clock::duration slowest{};
  int answered = 0;
  for (int i = 0; i < 50; ++i) {
    const auto start = std::chrono::steady_clock::now();
    if (!pinger.ping()) break;
    slowest = std::max(slowest, std::chrono::steady_clock::now() - start);
    ++answered;
  }
  CHECK(answered == 50);
  fmt::print(
      "RELIABILITY: STATS flood (in process): slowest of 50 PINGs {:.1f} ms while {} connections "
      "pipelined {} STATS each unread\n",
      std::chrono::duration<double, std::milli>(slowest).count(), kFlooders, kRequestsEach);
  // Generous: on two cores the first PINGs wait behind the flood's replies for tens of ms; the
  // bound catches starvation (seconds), not a slow machine.
  CHECK(std::chrono::duration_cast<std::chrono::microseconds>(slowest) < 500ms * kTimingSlack);
  // The flood did reach the server: some connection has replies queued up to its limit (the
  // server serves the PINGs between the flooders' turns, so it may get there only after them).
  const auto flood_deadline = std::chrono::steady_clock::now() + 10s;
  while (server.server().TEST_peak_queued_output() < config.max_queued_output &&
         std::chrono::steady_clock::now() < flood_deadline) {
    std::this_thread::sleep_for(1ms);
  }
  CHECK(server.server().TEST_peak_queued_output() >= config.max_queued_output);
}

}  // namespace
}  // namespace sluice::test
