// Issue 12's memory promises against a real sluiced on loopback (docs/RELIABILITY.md): what a
// connection costs, the node-wide buffer budget under clients that never read and under
// half-sent frames, and memory going back to the system once the connections are gone. A good
// client is served, correctly and within its deadline, throughout each test. Each test prints
// its figures on lines that start with "RELIABILITY:".
//
// sluiced's resident memory (RSS) may grow by at most
//
//     --max-buffer-memory + connections * kPerConnection + kFixedSlack
//
// The budget counts the buffers a connection holds beyond its 32 KiB input buffer (grown
// input, output queued and in flight, cross-shard backlog). Per connection, kPerConnection adds
// that input buffer, the connection's own state (socket, coroutine frames, timers; measured by
// the first test) and what the allocator keeps of the connection's freed buffers below glibc's
// mmap threshold of 128 KiB (the input buffer's 32 and 64 KiB steps as it grows for a large
// frame, small output buffers): those stay in a shard's heap while buffers allocated after them
// live. kFixedSlack covers what is not per connection (code paged in, the heaps' first pages,
// and a buffer that grows on each shard in the moment before the budget sheds). Kernel socket
// buffers are not in sluiced's RSS.
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "protocol/frame.h"
#include "protocol/messages.h"
#include "tests/reliability/reliability_support.h"

namespace sluice::test {
namespace {

constexpr std::uint64_t kBaseInput = 32 * kKiB;  // server::kBaseInputBuffer
constexpr std::uint64_t kConnectionState = 8 * kKiB;
constexpr std::uint64_t kAllocatorKept = 64 * kKiB;
constexpr std::uint64_t kPerConnection = kBaseInput + kConnectionState + kAllocatorKept;
constexpr std::uint64_t kFixedSlack = 8 * kMiB;
// Every request of the good client is answered within this: a bound that catches starvation
// (the issue measured 1.2 to 4.8 s), with room for two cores shared with the flood, sluiced and
// other work (the figures print the good client's p99 and slowest as measured).
constexpr auto kGoodBound = 500ms * kSlowdown;
// The good client's own deadline: a request not answered by then is a failure.
constexpr auto kGoodDeadline = 2000ms * kSlowdown;

// The RSS bound above for `connections` connections (the test's own included).
std::uint64_t rss_bound(std::uint64_t budget, std::uint64_t connections) {
  return budget + connections * kPerConnection + kFixedSlack;
}

// How the bound was made, for the figure lines.
std::string bound_terms(std::uint64_t budget, std::uint64_t connections) {
  return fmt::format("{} MiB budget + {} connections x {} KiB + {} MiB", budget / kMiB, connections,
                     kPerConnection / kKiB, kFixedSlack / kMiB);
}

// Checks the good client's report: served throughout, every answer right, within kGoodBound.
void check_good(const GoodClient::Report& good) {
  INFO(latency_figures(good) << "; failure: " << good.failure);
  CHECK(good.failure.empty());
  CHECK(good.requests > 0);
  CHECK(good.slowest < kGoodBound);
}

// PINGs whose replies pile up, and ACQUIREs of keys on every shard (cross-shard work).
protocol::Bytes flood_pattern(std::uint32_t ping_bytes, std::uint32_t small_pings,
                              std::uint32_t acquire_items) {
  protocol::Bytes out;
  const protocol::Bytes big(ping_bytes, 0x5a);
  protocol::encode_ping(out, 1, big, false);
  const protocol::Bytes small(1024, 0x33);
  for (std::uint32_t i = 0; i < small_pings; ++i) protocol::encode_ping(out, 2 + i, small, false);
  if (acquire_items > 0) {
    std::vector<std::string> keys;
    for (std::uint32_t i = 0; i < acquire_items; ++i) keys.push_back("flood:" + std::to_string(i));
    const Rule rule{Algorithm::kTokenBucket, 1'000'000, 3'600'000, 0};
    std::vector<protocol::AcquireItem> items;
    for (const std::string& key : keys) items.push_back({key, rule, 1, false});
    protocol::encode_acquire_request(out, 1000, items);
  }
  return out;
}

// Pushes the stream to every socket until `done()` (called after each pass) says so, or none
// has taken a byte for `quiet` (each is paused by sluiced, or closed), or `limit` has passed.
template <typename Done>
void push_until(std::vector<std::unique_ptr<FloodSocket>>& sockets, const protocol::Bytes& pattern,
                std::chrono::milliseconds quiet, std::chrono::milliseconds limit, Done done) {
  const auto until = SteadyClock::now() + limit;
  auto last_taken = SteadyClock::now();
  while (SteadyClock::now() < until && SteadyClock::now() - last_taken < quiet) {
    bool any = false;
    for (auto& socket : sockets) any = socket->send_stream(pattern) > 0 || any;
    if (any) {
      last_taken = SteadyClock::now();
    } else {
      std::this_thread::sleep_for(1ms);
    }
    if (done()) break;
  }
}

TEST_CASE("an idle connection costs sluiced its 32 KiB input buffer and at most 8 KiB more",
          "[reliability][memory]") {
  Sluiced sluiced({"--max-buffer-memory", "32MiB"});
  RawClient observer(sluiced.port());
  observer.hello();
  GoodClient good(sluiced.port(), kGoodDeadline);
  REQUIRE(good.wait_for_requests(20));
  std::this_thread::sleep_for(200ms);
  const std::uint64_t baseline = sluiced.child().rss_bytes();

  // Each connection fills its input buffer once (2,048 empty PINGs, 32 KiB, in one write) and
  // reads the replies, so the whole buffer is resident; the replies' output buffer stays (it is
  // counted in buffer_bytes and taken off below).
  constexpr int kIdle = 200;
  protocol::Bytes pings;
  for (std::uint32_t id = 1; id <= kBaseInput / protocol::kHeaderSize; ++id) {
    protocol::encode_ping(pings, id, {}, false);
  }
  std::vector<std::unique_ptr<RawClient>> idle;
  std::size_t pongs = 0;
  for (int i = 0; i < kIdle; ++i) {
    idle.push_back(std::make_unique<RawClient>(sluiced.port(), kGoodDeadline));
    REQUIRE(idle.back()->send(pings));
    for (std::size_t n = 0; n < pings.size() / protocol::kHeaderSize; ++n) {
      pongs += idle.back()->read().header.opcode == protocol::Opcode::kPing ? 1 : 0;
    }
  }
  CHECK(pongs == kIdle * (pings.size() / protocol::kHeaderSize));
  std::this_thread::sleep_for(200ms);
  const std::uint64_t after = sluiced.child().rss_bytes();
  const std::uint64_t connections =
      stat_eventually(observer, "connections", [&](std::uint64_t n) { return n == kIdle + 2; });
  REQUIRE(connections == kIdle + 2);
  const std::uint64_t output = observer.stats().at("total.buffer_bytes");
  const GoodClient::Report report = good.stop();
  check_good(report);

  const double each =
      static_cast<double>(growth(after, baseline) - static_cast<std::int64_t>(output)) / kIdle;
  report_figure(fmt::format(
      "idle connection: {:.1f} KiB of RSS each beyond its output buffers ({} connections, input "
      "buffer of 32 KiB filled once; bound 32 + {} KiB); {}",
      each / kKiB, kIdle, kConnectionState / kKiB, latency_figures(report)));
  if (kCheckRss) CHECK(each <= static_cast<double>(kBaseInput + kConnectionState));
}

TEST_CASE(
    "100 connections that pipeline and never read are paused, then shed by the budget, and "
    "RSS stays within the budget plus the per-connection overhead",
    "[reliability][memory][budget]") {
  constexpr std::uint64_t kBudget = 32 * kMiB;
  // 100 connections paused at 1 MiB of output each would hold about 100 MiB: the budget binds.
  Sluiced sluiced({"--max-buffer-memory", "32MiB", "--max-queued-output", "1MiB"});
  RawClient observer(sluiced.port());
  observer.hello();
  GoodClient good(sluiced.port(), kGoodDeadline);
  REQUIRE(good.wait_for_requests(20));
  std::this_thread::sleep_for(200ms);
  const std::uint64_t baseline = sluiced.child().rss_bytes();
  RssWatch watch(sluiced.child());

  constexpr int kFlooders = 100;
  // A 64 KiB PING (its input grows the buffer too), 8 PINGs of 1 KiB and an ACQUIRE of 256 keys
  // spread over both shards, again and again.
  const protocol::Bytes pattern = flood_pattern(64 * kKiB, 8, 256);
  std::vector<std::unique_ptr<FloodSocket>> flood;
  for (int i = 0; i < kFlooders; ++i)
    flood.push_back(std::make_unique<FloodSocket>(sluiced.port(), 16 * kKiB));
  // Each shard's own buffer_bytes, read through its shard port: a shard publishes it between
  // handlers, within its share; its figure for another shard can be one taken mid-charge, just
  // before that shard sheds.
  const std::vector<std::uint16_t> shard_ports = observer.hello().shard_ports;
  std::vector<std::unique_ptr<RawClient>> shard_observers;
  for (const std::uint16_t port : shard_ports) {
    shard_observers.push_back(std::make_unique<RawClient>(port));
    shard_observers.back()->hello();
  }
  const std::uint64_t share = kBudget / shard_ports.size();
  std::uint64_t most_on_a_shard = 0;
  auto poll_shards = [&] {
    for (std::size_t i = 0; i < shard_observers.size(); ++i) {
      const std::string name = "shard." + std::to_string(i) + ".buffer_bytes";
      most_on_a_shard = std::max(most_on_a_shard, shard_observers[i]->stats().at(name));
    }
  };
  // For 2 s at least, and until the budget has shed a flooder (later under a sanitizer, where
  // sluiced is slower), 10 s at most.
  const auto started = SteadyClock::now();
  auto next_stats = started;
  push_until(flood, pattern, 500ms, 10s, [&] {
    if (SteadyClock::now() < next_stats) return false;
    next_stats = SteadyClock::now() + 100ms;
    poll_shards();
    return observer.stats().at("total.overload_closed") > 0 && SteadyClock::now() - started >= 2s;
  });
  const auto flooded = SteadyClock::now() - started;
  std::this_thread::sleep_for(150ms);  // a fresh STATS snapshot
  poll_shards();
  const auto stats = observer.stats();
  const std::uint64_t peak = watch.peak();
  int broken = 0;
  std::uint64_t sent = 0;
  for (const auto& socket : flood) {
    broken += socket->broken() ? 1 : 0;
    sent += socket->sent();
  }
  const GoodClient::Report report = good.stop();
  for (auto& socket : flood) socket->close();

  const std::uint64_t bound = rss_bound(kBudget, kFlooders + 2 + shard_ports.size());
  report_figure(fmt::format(
      "non-reading flood: peak RSS growth {:.1f} MiB (bound {:.1f} MiB: {}; {}), buffer_bytes "
      "at most {:.1f} MiB on a shard (share {} MiB), overload_closed {} of {} flooders ({} saw "
      "the close while sending), {:.0f} MiB sent in {:.1f} s; {}",
      mib(growth(peak, baseline)), mib(bound),
      bound_terms(kBudget, kFlooders + 2 + shard_ports.size()),
      watch.exact() ? "VmHWM" : "sampled every 1 ms", mib(most_on_a_shard), share / kMiB,
      stats.at("total.overload_closed"), kFlooders, broken, mib(sent),
      std::chrono::duration<double>(flooded).count(), latency_figures(report)));
  check_good(report);
  CHECK(stats.at("total.overload_closed") > 0);
  CHECK(most_on_a_shard <= share);
  CHECK(stats.at("total.protocol_errors") == 0);
  if (kCheckRss) CHECK(growth(peak, baseline) <= static_cast<std::int64_t>(bound));
}

TEST_CASE(
    "100 connections that pipeline STATS and never read leave a good client under 50 ms at p99, "
    "and RSS within the budget",
    "[reliability][memory][stats]") {
  // The amplifier: a 16-byte request, a reply of about 1.3 KB, against sluiced's
  // defaults: --max-memory 1GiB, so a buffer budget of 256 MiB (what RSS may grow by, with the
  // per-connection terms); --max-queued-output 4MiB, so 100 flooders could queue 400 MiB and
  // the budget sheds; the STATS snapshot rebuilt at most every 100 ms.
  constexpr std::uint64_t kBudget = 256 * kMiB;
  Sluiced sluiced({"--max-memory", "1GiB"});
  REQUIRE_THAT(sluiced.startup_line(), Catch::Contains("buffer memory 256MiB"));
  RawClient observer(sluiced.port());
  observer.hello();
  GoodClient good(sluiced.port(), kGoodDeadline);
  REQUIRE(good.wait_for_requests(20));
  std::this_thread::sleep_for(200ms);
  const std::uint64_t baseline = sluiced.child().rss_bytes();
  RssWatch watch(sluiced.child());
  const std::uint64_t answered_before = good.requests();

  constexpr int kFlooders = 100;
  protocol::Bytes pattern;
  for (std::uint32_t i = 0; i < 256; ++i) protocol::encode_stats_request(pattern, i + 1);
  std::vector<std::unique_ptr<FloodSocket>> flood;
  for (int i = 0; i < kFlooders; ++i)
    flood.push_back(std::make_unique<FloodSocket>(sluiced.port(), 64 * kKiB));
  // 3 s of flood (the good client's requests during it are what the test judges), 10 s at most.
  const auto started = SteadyClock::now();
  push_until(flood, pattern, 3s, 10s, [&] { return SteadyClock::now() - started >= 3s; });
  const auto flooded = SteadyClock::now() - started;
  const std::uint64_t peak = watch.peak();
  std::uint64_t sent = 0;
  int broken = 0;
  for (const auto& socket : flood) {
    sent += socket->sent();
    broken += socket->broken() ? 1 : 0;
  }
  const GoodClient::Report report = good.stop();
  const auto stats = observer.stats();
  for (auto& socket : flood) socket->close();

  const std::uint64_t bound = rss_bound(kBudget, kFlooders + 2);
  const std::uint64_t during = report.requests - answered_before;
  report_figure(fmt::format(
      "STATS flood: {} connections pipelined {:.0f}k STATS unread in {:.1f} s; good client {} "
      "requests during it; {}; peak RSS growth {:.1f} MiB (bound {:.1f} MiB: {}), "
      "overload_closed {}",
      kFlooders, static_cast<double>(sent / protocol::kHeaderSize) / 1000,
      std::chrono::duration<double>(flooded).count(), during, latency_figures(report),
      mib(growth(peak, baseline)), mib(bound), bound_terms(kBudget, kFlooders + 2),
      stats.at("total.overload_closed")));
  INFO(latency_figures(report) << "; failure: " << report.failure);
  CHECK(report.failure.empty());
  // Enough requests for the 99th percentile to mean something: one after another, so a
  // sanitized build (kSlowdown times slower) makes fewer (76 in one ASan run on a busy machine).
  CHECK(during > 100 / kSlowdown);
  // The bound for a normal client's PING (and ACQUIRE) behind the flood, on its 99th
  // percentile; the slowest request also waits for whatever else this 2-core machine runs (the
  // flood's own sender is a busy loop), so its bound only catches starvation (the issue
  // measured 1.2 to 4.8 s; without the server's per-turn output quantum it is about 1 s).
  CHECK(percentile(report, 0.99) < 50ms * kSlowdown);
  CHECK(report.slowest < kGoodBound);
  CHECK(stats.at("total.protocol_errors") == 0);
  if (kCheckRss) CHECK(growth(peak, baseline) <= static_cast<std::int64_t>(bound));
}

TEST_CASE(
    "200 connections each holding a half-sent 1 MiB frame are shed with OVERLOADED beyond the "
    "budget, and RSS stays within it plus the per-connection overhead",
    "[reliability][memory][budget]") {
  constexpr std::uint64_t kBudget = 32 * kMiB;
  constexpr std::uint64_t kMaxFrame = 1 * kMiB;
  Sluiced sluiced({"--max-buffer-memory", "32MiB", "--max-frame", "1MiB"});
  RawClient observer(sluiced.port());
  observer.hello();
  GoodClient good(sluiced.port(), kGoodDeadline);
  REQUIRE(good.wait_for_requests(20));
  std::this_thread::sleep_for(200ms);
  const std::uint64_t baseline = sluiced.child().rss_bytes();
  RssWatch watch(sluiced.child());

  // The header announces a 1 MiB PING; all of the body but its last byte follows.
  protocol::Bytes half;
  protocol::encode_ping(half, 1, protocol::Bytes(kMaxFrame, 0x5a), false);
  half.pop_back();
  constexpr int kHostile = 200;
  std::vector<std::unique_ptr<FloodSocket>> hostile;
  const auto send_until = SteadyClock::now() + 20s;
  for (int i = 0; i < kHostile && SteadyClock::now() < send_until; ++i) {
    hostile.push_back(std::make_unique<FloodSocket>(sluiced.port()));
    FloodSocket& socket = *hostile.back();
    while (socket.sent() < half.size() && !socket.broken() && SteadyClock::now() < send_until) {
      if (socket.send_some(std::span(half).subspan(socket.sent())) == 0) {
        socket.wait_writable(10ms);
      }
    }
  }
  REQUIRE(hostile.size() == kHostile);
  int fully_sent = 0;
  for (const auto& socket : hostile) fully_sent += socket->sent() == half.size() ? 1 : 0;
  CHECK(fully_sent == kHostile);

  // Every connection's bytes have reached sluiced once each one not shed holds its whole grown
  // buffer (a buffer grows by doubling, so one still filling is far short of it): from then on
  // nothing grows, so nothing more is shed, and what it holds now is what it keeps.
  const std::uint64_t held = kMaxFrame + protocol::kHeaderSize - kBaseInput;  // one grown buffer
  std::uint64_t shed_stat = 0;
  const auto settle_deadline = SteadyClock::now() + 10s;
  for (;;) {
    const auto now_stats = observer.stats();
    shed_stat = now_stats.at("total.overload_closed");
    const bool settled = shed_stat <= kHostile &&
                         now_stats.at("total.buffer_bytes") >= (kHostile - shed_stat) * held;
    if (settled || SteadyClock::now() >= settle_deadline) break;
    std::this_thread::sleep_for(20ms);
  }

  // The shed ones got ERROR OVERLOADED and end of stream; the others still wait for their last
  // byte and have been sent nothing.
  int shed = 0, open = 0, other = 0;
  const auto read_deadline = SteadyClock::now() + 1s;
  for (auto& socket : hostile) {
    protocol::Bytes received;
    const FloodSocket::End end = socket->read_to_end(received, read_deadline);
    const Replies replies = parse_replies(received);
    if (end == FloodSocket::End::kTimeout && replies.frames == 0 && received.empty()) {
      ++open;
    } else if (end == FloodSocket::End::kClosed && replies.whole && replies.frames == 1 &&
               replies.error == protocol::WireErrorCode::kOverloaded) {
      ++shed;
    } else {
      ++other;
    }
  }
  const auto stats = observer.stats();
  const std::uint64_t peak = watch.peak();
  for (auto& socket : hostile) socket->close();
  const GoodClient::Report report = good.stop();

  const std::uint64_t bound = rss_bound(kBudget, kHostile + 2);
  report_figure(fmt::format(
      "half-sent frames: peak RSS growth {:.1f} MiB (bound {:.1f} MiB: {}; {}), buffer_bytes "
      "{:.1f} MiB, {} of {} shed with OVERLOADED, {} holding 1 MiB each; {}",
      mib(growth(peak, baseline)), mib(bound), bound_terms(kBudget, kHostile + 2),
      watch.exact() ? "VmHWM" : "sampled every 1 ms", mib(stats.at("total.buffer_bytes")), shed,
      kHostile, open, latency_figures(report)));
  check_good(report);
  INFO("shed " << shed << ", open " << open << ", other " << other << "; overload_closed "
               << shed_stat);
  CHECK(other == 0);
  CHECK(shed + open == kHostile);
  CHECK(stats.at("total.overload_closed") == static_cast<std::uint64_t>(shed));
  CHECK(open > 0);
  CHECK(open * held <= kBudget);
  CHECK(stats.at("total.buffer_bytes") <= kBudget);
  CHECK(stats.at("total.buffer_bytes") >= open * held);
  CHECK(stats.at("total.protocol_errors") == 0);
  if (kCheckRss) CHECK(growth(peak, baseline) <= static_cast<std::int64_t>(bound));
}

TEST_CASE(
    "after each of ten rounds of reply floods RSS returns near its baseline, and a connection "
    "that does not read costs at most its output limit",
    "[reliability][memory]") {
  constexpr std::uint64_t kOutputLimit = 4 * kMiB;  // --max-queued-output's default
  // What RSS may keep over its baseline once a round's connections are gone (the issue saw
  // 83 MB grow to 574 MB over ten rounds while the allocator kept freed buffers cached).
  constexpr std::uint64_t kKept = 16 * kMiB;
  // Room for every flooder at its limit, even all on one shard and charged as allocated (up to
  // twice the limit, as an output buffer doubles): nothing is shed, all of it is live, then freed.
  Sluiced sluiced({"--max-buffer-memory", "1GiB"});
  RawClient observer(sluiced.port());
  observer.hello();
  GoodClient good(sluiced.port(), kGoodDeadline);
  REQUIRE(good.wait_for_requests(20));
  std::this_thread::sleep_for(200ms);
  const std::uint64_t baseline = sluiced.child().rss_bytes();
  RssWatch watch(sluiced.child());

  constexpr int kRounds = 10;
  constexpr int kFlooders = 32;
  // Without the RSS bounds (sanitizers) a round need not fill sluiced up: shorter rounds.
  constexpr auto kRoundLimit = kCheckRss ? 4s : 1500ms;
  constexpr std::uint64_t kBigPing = 100 * kKiB;
  // Replies of 100 KiB and of 1 KiB, so that buffers of many sizes are allocated and freed.
  const protocol::Bytes pattern = flood_pattern(kBigPing, 16, 64);
  std::uint64_t first_peak = 0;
  std::uint64_t worst_after = 0;
  std::string rounds;
  for (int round = 1; round <= kRounds; ++round) {
    watch.restart();
    // A small receive buffer (replies back up in sluiced) and the default send buffer.
    std::vector<std::unique_ptr<FloodSocket>> flood;
    for (int i = 0; i < kFlooders; ++i)
      flood.push_back(std::make_unique<FloodSocket>(sluiced.port(), 16 * kKiB, 0));
    // The first round pushes until every flooder is paused at its limit (several seconds: the
    // kernel grows sluiced's socket send buffers slowly, and they take megabytes too, kernel
    // memory that is not in RSS); it gives the cost of a connection that does not read. The
    // others stop once sluiced holds a limit's worth of buffers per flooder.
    auto next_stats = SteadyClock::now();
    push_until(flood, pattern, 300ms, kRoundLimit, [&] {
      if (round == 1 || SteadyClock::now() < next_stats) return false;
      next_stats = SteadyClock::now() + 50ms;
      return observer.stats().at("total.buffer_bytes") >= kFlooders * kOutputLimit;
    });
    const std::uint64_t peak = watch.peak();
    if (round == 1) first_peak = peak;
    for (auto& socket : flood) socket->close();

    // Nothing live but the good client and the observer, whose output buffers (STATS replies
    // and smaller ones) are all that is held.
    const std::uint64_t live =
        stat_eventually(observer, "connections", [](auto n) { return n == 2; });
    CHECK(live == 2);
    CHECK(stat_eventually(observer, "buffer_bytes", [](auto n) { return n < 64 * kKiB; }) <
          64 * kKiB);
    // A shard frees a connection's buffers just after it counts the close: give it up to 1 s.
    const auto closed = SteadyClock::now();
    std::uint64_t after = sluiced.child().rss_bytes();
    while (growth(after, baseline) > static_cast<std::int64_t>(kKept) &&
           SteadyClock::now() - closed < 1s) {
      std::this_thread::sleep_for(10ms);
      after = sluiced.child().rss_bytes();
    }
    const long long settled = ms(SteadyClock::now() - closed);
    worst_after = std::max(worst_after, after);
    rounds += fmt::format("{}{:.1f}", round == 1 ? "" : " ", mib(after));
    fmt::print("round {}: peak {:.1f} MiB, after {:.1f} MiB{} (baseline {:.1f} MiB)\n", round,
               mib(peak), mib(after),
               settled >= 10 ? fmt::format(" (settled in {} ms)", settled) : "", mib(baseline));
    if (kCheckRss) CHECK(growth(after, baseline) <= static_cast<std::int64_t>(kKept));
  }
  const auto stats = observer.stats();
  const GoodClient::Report report = good.stop();

  // Per flooder: its output limit, one reply past it, an empty output buffer kept (256 KiB at
  // most), its input buffer grown to 128 KiB for the big PINGs, and the connection's own cost;
  // for all of them together, kFixedSlack more.
  const std::uint64_t each_bound =
      kOutputLimit + kBigPing + 256 * kKiB + 128 * kKiB + kBaseInput + kConnectionState;
  const std::int64_t first_growth = growth(first_peak, baseline);
  report_figure(fmt::format(
      "memory goes back: RSS baseline {:.1f} MiB, after each of {} rounds of {} flooders "
      "(MiB): {}; worst {:.1f} MiB over baseline (bound {} MiB); {}",
      mib(baseline), kRounds, kFlooders, rounds, mib(growth(worst_after, baseline)), kKept / kMiB,
      latency_figures(report)));
  report_figure(fmt::format(
      "output per connection: peak RSS growth {:.1f} MiB for {} connections that do not read, "
      "{:.2f} MiB each (--max-queued-output 4MiB; bound {:.2f} MiB each + 8 MiB; {})",
      mib(first_growth), kFlooders, mib(first_growth) / kFlooders, mib(each_bound),
      watch.exact() ? "VmHWM" : "sampled every 1 ms"));
  check_good(report);
  CHECK(stats.at("total.overload_closed") == 0);
  if (kCheckRss)
    CHECK(first_growth <= static_cast<std::int64_t>(kFlooders * each_bound + kFixedSlack));
}

}  // namespace
}  // namespace sluice::test
