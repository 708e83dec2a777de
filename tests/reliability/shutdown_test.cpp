// Issue 12's shutdown promise against a real sluiced (docs/RELIABILITY.md): SIGTERM while busy
// clients pipeline ACQUIREs and one client does not read. Every client that reads gets whole,
// correct replies, then ERROR SHUTTING_DOWN, then end of stream; the one that does not read
// holds sluiced no longer than --shutdown-timeout; sluiced exits 0.
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "protocol/frame.h"
#include "protocol/messages.h"
#include "tests/reliability/reliability_support.h"

namespace sluice::test {
namespace {

// What one busy client saw, from its first request to the end of the stream.
struct Busy {
  std::atomic<std::uint32_t> sent{0};  // requests written (read by the test while it runs)
  std::uint32_t answered = 0;          // ACQUIRE replies, each to a request sent, once
  bool wrong = false;                  // a reply to no outstanding request, or not allowed
  bool shutting_down = false;          // ERROR SHUTTING_DOWN came ...
  bool frame_after_error = false;      // ... and something after it
  bool other_error = false;            // any other ERROR
  bool cut = false;                    // the stream ended inside a frame
  bool ended = false;                  // end of stream (or reset) before the deadline
  bool reset = false;                  // the stream ended in a reset
  SteadyClock::time_point ended_at;
};

// Pipelines ACQUIREs of 16 keys (on both shards), up to `depth` unanswered, reading the replies
// as they come, until the server ends the stream or `deadline`.
void run_busy(std::uint16_t port, int index, int depth, SteadyClock::time_point deadline,
              Busy& seen) {
  FloodSocket socket(port);
  const Rule rule{Algorithm::kTokenBucket, 1'000'000, 1000, 0};
  std::vector<std::string> keys;
  for (int k = 0; k < 16; ++k)
    keys.push_back("busy:" + std::to_string(index) + ":" + std::to_string(k));
  std::vector<protocol::AcquireItem> items;
  for (const std::string& key : keys) items.push_back({key, rule, 1, false});
  const protocol::FrameDecoder decoder(std::numeric_limits<std::uint32_t>::max());
  std::set<std::uint32_t> outstanding;
  protocol::Bytes request;
  std::size_t request_sent = 0;
  protocol::Bytes input;
  bool writable = true;
  while (SteadyClock::now() < deadline) {
    // One request at a time, finished before the next is started (sends are non-blocking).
    while (writable && (request_sent < request.size() ||
                        outstanding.size() < static_cast<std::size_t>(depth))) {
      if (request_sent == request.size()) {
        const std::uint32_t id = seen.sent.load() + 1;
        request.clear();
        protocol::encode_acquire_request(request, id, items);
        request_sent = 0;
        outstanding.insert(id);
        seen.sent.store(id);
      }
      const std::size_t taken = socket.send_some(std::span(request).subspan(request_sent));
      request_sent += taken;
      if (socket.broken()) writable = false;  // the server has closed: read what it sent
      if (taken == 0) break;
    }
    const FloodSocket::End end = socket.read_available(input, 20ms);
    std::size_t at = 0;
    for (;;) {
      const auto decoded = decoder.decode(std::span<const std::uint8_t>(input).subspan(at));
      if (decoded.status != protocol::DecodeStatus::kOk) break;
      at += decoded.frame_size;
      if (seen.shutting_down) seen.frame_after_error = true;
      if (decoded.frame.header.opcode == protocol::Opcode::kError) {
        protocol::ErrorReply error;
        const bool parsed = protocol::parse_error(decoded.frame.body, error).ok;
        if (parsed && error.code == protocol::WireErrorCode::kShuttingDown) {
          seen.shutting_down = true;
        } else {
          seen.other_error = true;
        }
        continue;
      }
      std::vector<protocol::AcquireResult> results;
      const bool allowed =
          protocol::parse_acquire_reply(decoded.frame.body, results).ok &&
          results.size() == items.size() &&
          std::all_of(results.begin(), results.end(), [](const protocol::AcquireResult& r) {
            return r.status == protocol::ItemStatus::kAllowed;
          });
      if (outstanding.erase(decoded.frame.header.request_id) == 1 && allowed) {
        ++seen.answered;
      } else {
        seen.wrong = true;
      }
    }
    input.erase(input.begin(), input.begin() + static_cast<std::ptrdiff_t>(at));
    if (end != FloodSocket::End::kTimeout) {
      seen.ended = true;
      seen.reset = end == FloodSocket::End::kReset;
      seen.ended_at = SteadyClock::now();
      seen.cut = !input.empty();
      break;
    }
  }
}

TEST_CASE(
    "SIGTERM under load: busy clients get whole replies, then SHUTTING_DOWN and end of stream, "
    "and one that does not read holds sluiced no longer than the shutdown timeout",
    "[reliability][shutdown]") {
  constexpr auto kShutdownTimeout = 1000ms;
  Sluiced sluiced({"--shutdown-timeout", "1s", "--max-queued-output", "1MiB"});
  GoodClient good(sluiced.port(), 2000ms * kSlowdown);
  REQUIRE(good.wait_for_requests(20));

  constexpr int kBusy = 6;
  std::vector<Busy> busy(kBusy);
  std::vector<std::thread> threads;
  const auto deadline = SteadyClock::now() + 20s;
  for (int i = 0; i < kBusy; ++i) {
    threads.emplace_back(run_busy, sluiced.port(), i, 32, deadline, std::ref(busy[i]));
  }
  // One client that sends big PINGs and never reads: sluiced pauses it with 1 MiB of replies
  // waiting, which it can never send.
  FloodSocket stuck(sluiced.port(), 16 * 1024);
  protocol::Bytes pings;
  protocol::encode_ping(pings, 1, protocol::Bytes(64 * 1024, 0x44), false);
  auto last_taken = SteadyClock::now();
  const auto push_until = SteadyClock::now() + 3s;
  while (SteadyClock::now() - last_taken < 300ms && SteadyClock::now() < push_until) {
    if (stuck.send_stream(pings) > 0) {
      last_taken = SteadyClock::now();
    } else {
      std::this_thread::sleep_for(1ms);
    }
  }
  CHECK(stuck.sent() > 2 * 1024 * 1024);  // past its output limit and the kernel's buffers
  REQUIRE(!stuck.broken());
  // Every busy client is under way.
  const auto going_until = SteadyClock::now() + 10s;
  while (SteadyClock::now() < going_until &&
         std::any_of(busy.begin(), busy.end(), [](const Busy& b) { return b.sent < 200; })) {
    std::this_thread::sleep_for(1ms);
  }

  const auto signalled = SteadyClock::now();
  sluiced.child().send_signal(SIGTERM);
  const std::optional<int> status = sluiced.child().wait_exit(kShutdownTimeout + 4s);
  const auto exited = SteadyClock::now();
  for (std::thread& t : threads) t.join();
  CHECK(good.wait_finished(2s));
  const GoodClient::Report report = good.stop();

  auto last_end = SteadyClock::duration::zero();
  std::uint64_t answered = 0;
  for (int i = 0; i < kBusy; ++i) {
    INFO("busy client " << i << ": sent " << busy[i].sent.load() << ", answered "
                        << busy[i].answered);
    CHECK(busy[i].ended);
    CHECK(busy[i].shutting_down);
    CHECK_FALSE(busy[i].frame_after_error);
    CHECK_FALSE(busy[i].other_error);
    CHECK_FALSE(busy[i].cut);
    CHECK_FALSE(busy[i].reset);
    CHECK_FALSE(busy[i].wrong);
    CHECK(busy[i].answered > 0);
    if (busy[i].ended) last_end = std::max(last_end, busy[i].ended_at - signalled);
    answered += busy[i].answered;
  }
  report_figure(fmt::format(
      "SIGTERM under load: {} busy clients ({} replies, none cut) and the good client saw "
      "SHUTTING_DOWN then end of stream within {} ms of the signal; sluiced exited {} after {} "
      "ms (--shutdown-timeout 1s, one client not reading); {}",
      kBusy, answered, std::max(ms(last_end), ms(report.end - signalled)),
      status ? std::to_string(*status) : "(still running)", ms(exited - signalled),
      latency_figures(report)));
  INFO(latency_figures(report) << "; failure: " << report.failure);
  CHECK(report.failure.empty());
  CHECK(report.shutting_down);
  CHECK(report.closed_after);
  CHECK(report.slowest < 500ms * kSlowdown);  // as in memory_test: starvation, not a slow machine
  // The clients that read are not held back by the one that does not.
  CHECK(last_end < kShutdownTimeout);
  CHECK(report.end - signalled < kShutdownTimeout);
  REQUIRE(status.has_value());
  CHECK(*status == 0);
  // The client that does not read is closed at the timeout, not before (it cannot be finished)
  // and not after.
  CHECK(exited - signalled >= kShutdownTimeout - 100ms);
  CHECK(exited - signalled < kShutdownTimeout + 1s);
}

}  // namespace
}  // namespace sluice::test
