// What the reliability tests share: a real sluiced started as a child process on 127.0.0.1 with
// ephemeral ports, a well-behaved client on its own thread that checks every answer and times
// it, raw sockets for hostile clients, a watch on sluiced's resident memory, and the one line
// per figure that docs/RELIABILITY.md quotes.
#pragma once

#include "net/asio.h"  // before any other Asio header

#include <fcntl.h>
#include <fmt/core.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "core/rule.h"
#include "protocol/frame.h"
#include "protocol/messages.h"
#include "tests/integration/raw_client.h"
#include "tests/support/child_process.h"
#include "tests/support/window_clock.h"

#ifndef SLUICED_PATH
#error "SLUICED_PATH must be defined by the build (tests/CMakeLists.txt)"
#endif

namespace sluice::test {

using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;

// Under AddressSanitizer every allocation carries redzones and freed memory sits in a
// quarantine, so resident memory says nothing about sluiced's own: the tests skip their RSS
// bounds there and keep every other check. A sanitized sluiced (a Debug build, unoptimized)
// also answers several times slower, so the latency bounds there are kSlowdown times as wide.
#if defined(SLUICE_SANITIZED)
inline constexpr bool kCheckRss = false;
inline constexpr int kSlowdown = 4;
#else
inline constexpr bool kCheckRss = true;
inline constexpr int kSlowdown = 1;
#endif

inline constexpr std::uint64_t kKiB = 1024;
inline constexpr std::uint64_t kMiB = 1024 * 1024;

inline double mib(std::uint64_t bytes) { return static_cast<double>(bytes) / kMiB; }
inline double mib(std::int64_t bytes) { return static_cast<double>(bytes) / kMiB; }

inline std::int64_t growth(std::uint64_t now, std::uint64_t baseline) {
  return static_cast<std::int64_t>(now) - static_cast<std::int64_t>(baseline);
}

// One figure for docs/RELIABILITY.md, on a line of its own: "RELIABILITY: <text>".
inline void report_figure(const std::string& text) {
  fmt::print("RELIABILITY: {}{}\n", text,
             kCheckRss ? "" : " [sanitized build: RSS not checked, latency bounds x4]");
  std::fflush(stdout);
}

inline long long ms(SteadyClock::duration d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

// sluiced on 127.0.0.1 with ephemeral ports, two shards and --max-memory 64MiB unless `flags`
// give their own --max-memory, then `flags`; its public port comes from its start-up line.
//
// Transparent huge pages are off for the child (PR_SET_THP_DISABLE, set on this process and
// inherited across exec), so that its RSS counts the 4 KiB pages it touches: under THP
// "always" a heap or a large buffer could be backed by 2 MiB pages as a whole. That changes
// nothing under "madvise", where sluiced advises only its --huge-pages counter blocks.
class Sluiced {
 public:
  explicit Sluiced(const std::vector<std::string>& flags)
      : thp_off_(::prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0) == 0),
        child_(SLUICED_PATH, with_defaults(flags)) {
    if (!thp_off_) WARN("PR_SET_THP_DISABLE failed: sluiced's RSS may count 2 MiB pages");
    startup_line_ = child_.first_line(std::chrono::seconds(10));
    INFO("start-up line: " << startup_line_);
    REQUIRE(listen_endpoint(startup_line_).starts_with("127.0.0.1:"));
    port_ = listen_port(startup_line_);
    REQUIRE(port_ != 0);
  }

  Child& child() { return child_; }
  std::uint16_t port() const { return port_; }
  bool thp_off() const { return thp_off_; }
  const std::string& startup_line() const { return startup_line_; }

 private:
  static std::vector<std::string> with_defaults(const std::vector<std::string>& flags) {
    std::vector<std::string> args = {"--bind", "127.0.0.1", "--port", "0", "--shards", "2"};
    // sluiced refuses --max-memory twice: the test's own comes instead of the 64 MiB default.
    if (std::find(flags.begin(), flags.end(), "--max-memory") == flags.end()) {
      args.insert(args.end(), {"--max-memory", "64MiB"});
    }
    args.insert(args.end(), flags.begin(), flags.end());
    return args;
  }

  bool thp_off_;
  Child child_;
  std::string startup_line_;
  std::uint16_t port_ = 0;
};

// The total of one STATS counter, read through `client`, once the snapshot (rebuilt at most every
// 100 ms) shows `done` or `timeout` has passed; the last value either way.
template <typename Done>
std::uint64_t stat_eventually(RawClient& client, const std::string& name, Done done,
                              std::chrono::milliseconds timeout = 5s) {
  const auto deadline = SteadyClock::now() + timeout;
  for (;;) {
    const std::uint64_t value = client.stats().at("total." + name);
    if (done(value) || SteadyClock::now() >= deadline) return value;
    std::this_thread::sleep_for(20ms);
  }
}

// Samples sluiced's resident memory every millisecond on a thread of its own, and reads the
// kernel's own peak (VmHWM, reset at the start) when the kernel allows the reset: the peak is
// then exact, not sampled.
class RssWatch {
 public:
  explicit RssWatch(const Child& child)
      : child_(child), exact_(child.reset_peak_rss()), sampler_([this] { sample(); }) {}
  ~RssWatch() {
    running_ = false;
    sampler_.join();
  }
  RssWatch(const RssWatch&) = delete;
  RssWatch& operator=(const RssWatch&) = delete;

  // The most resident memory since the watch started (or since restart()).
  std::uint64_t peak() const {
    const std::uint64_t sampled = sampled_peak_.load();
    return exact_ ? std::max(sampled, child_.peak_rss_bytes()) : sampled;
  }
  void restart() {
    exact_ = child_.reset_peak_rss();
    sampled_peak_ = child_.rss_bytes();
  }
  bool exact() const { return exact_; }

 private:
  void sample() {
    while (running_) {
      const std::uint64_t now = child_.rss_bytes();
      std::uint64_t seen = sampled_peak_.load();
      while (now > seen && !sampled_peak_.compare_exchange_weak(seen, now)) {
      }
      std::this_thread::sleep_for(1ms);
    }
  }

  const Child& child_;
  std::atomic<bool> exact_;
  std::atomic<bool> running_{true};
  std::atomic<std::uint64_t> sampled_peak_{0};
  std::thread sampler_;
};

// A well-behaved client on its own thread: round after round, a PING whose payload must come
// back, then an ACQUIRE of two keys whose answers are known exactly (a counter of 1,000,000 a
// window that must have one less left each time, and a key of 1 a window, used up first, that
// must stay denied), each reply within `deadline`. It times every request and stops at the
// first wrong answer, or when the server sends ERROR SHUTTING_DOWN (then it must see end of
// stream and nothing else). The windows are fixed ones that no boundary of the UTC clock
// crosses during a test (steady_period_ms()): at a boundary both keys would start afresh.
class GoodClient {
 public:
  struct Report {
    std::uint64_t requests = 0;  // answered correctly
    SteadyClock::duration slowest{};
    std::vector<SteadyClock::duration> latencies;  // of every request answered, in order
    std::string failure;          // the first wrong answer, timeout or error; empty when none
    bool shutting_down = false;   // the server sent ERROR SHUTTING_DOWN ...
    bool closed_after = false;    // ... then end of stream, with nothing in between
    SteadyClock::time_point end;  // when the stream ended (shutting_down and closed_after)
  };

  GoodClient(std::uint16_t port, std::chrono::milliseconds deadline,
             std::chrono::milliseconds pause = 2ms)
      : port_(port), deadline_(deadline), pause_(pause), thread_([this] { run(); }) {}
  ~GoodClient() { stop(); }
  GoodClient(const GoodClient&) = delete;
  GoodClient& operator=(const GoodClient&) = delete;

  // Requests answered so far (any thread).
  std::uint64_t requests() const { return requests_.load(); }
  // Waits until `n` requests have been answered, the client failed or stopped, or 10 s.
  bool wait_for_requests(std::uint64_t n) const {
    const auto until = SteadyClock::now() + 10s;
    while (requests_.load() < n && !finished_.load() && SteadyClock::now() < until) {
      std::this_thread::sleep_for(1ms);
    }
    return requests_.load() >= n;
  }
  // Waits for the thread to finish on its own (the server ended the stream), at most `limit`.
  bool wait_finished(std::chrono::milliseconds limit) const {
    const auto until = SteadyClock::now() + limit;
    while (!finished_.load() && SteadyClock::now() < until) std::this_thread::sleep_for(1ms);
    return finished_.load();
  }
  // Stops the rounds (if still running), joins, and says what the client saw.
  Report stop() {
    stopping_ = true;
    if (thread_.joinable()) thread_.join();
    std::lock_guard lock(mutex_);
    return report_;
  }

 private:
  enum class Step { kOk, kEnded, kFailed };

  void run() {
    try {
      RawClient client(port_, deadline_);
      client.hello();
      counter_left_ = kCounterLimit;
      if (exchange_acquire(client, /*first=*/true) == Step::kOk) {
        while (!stopping_.load()) {
          if (exchange_ping(client) != Step::kOk) break;
          if (exchange_acquire(client, false) != Step::kOk) break;
          std::this_thread::sleep_for(pause_);
        }
      }
    } catch (const std::exception& e) {
      fail(std::string("exception: ") + e.what());
    }
    finished_ = true;
  }

  void fail(const std::string& why) {
    std::lock_guard lock(mutex_);
    if (report_.failure.empty()) report_.failure = why;
  }

  void answered(SteadyClock::duration took) {
    std::lock_guard lock(mutex_);
    ++report_.requests;
    report_.slowest = std::max(report_.slowest, took);
    report_.latencies.push_back(took);
    requests_.store(report_.requests);
  }

  // The reply to `id`, or why there is none. ERROR SHUTTING_DOWN ends the rounds: what follows
  // must be end of stream.
  Step await_reply(RawClient& client, std::uint32_t id, protocol::Opcode opcode,
                   ReceivedFrame& reply) {
    switch (client.read(reply, deadline_)) {
      case RawClient::ReadEnd::kTimeout:
        fail(fmt::format("no reply to request {} within {} ms", id, deadline_.count()));
        return Step::kFailed;
      case RawClient::ReadEnd::kClosed:
        fail(fmt::format("the connection ended before the reply to request {}", id));
        return Step::kFailed;
      case RawClient::ReadEnd::kFrame:
        break;
    }
    if (reply.header.opcode == protocol::Opcode::kError) {
      protocol::ErrorReply error;
      if (!protocol::parse_error(reply.body, error)) {
        fail("an ERROR that does not parse");
        return Step::kFailed;
      }
      if (error.code != protocol::WireErrorCode::kShuttingDown) {
        fail(fmt::format("ERROR {}: {}", protocol::error_code_name(error.code), error.message));
        return Step::kFailed;
      }
      ReceivedFrame after;
      const RawClient::ReadEnd end = client.read(after, deadline_);
      std::lock_guard lock(mutex_);
      report_.shutting_down = true;
      report_.closed_after = end == RawClient::ReadEnd::kClosed;
      report_.end = SteadyClock::now();
      return Step::kEnded;
    }
    if (!reply.header.is_reply() || reply.header.opcode != opcode ||
        reply.header.request_id != id) {
      fail(fmt::format("the reply to request {} has opcode {} and id {}", id,
                       static_cast<int>(reply.header.opcode), reply.header.request_id));
      return Step::kFailed;
    }
    return Step::kOk;
  }

  Step exchange_ping(RawClient& client) {
    const std::uint32_t id = client.next_id();
    std::uint8_t payload[32];
    for (std::size_t i = 0; i < sizeof payload; ++i) payload[i] = static_cast<std::uint8_t>(id + i);
    protocol::Bytes request;
    protocol::encode_ping(request, id, payload, false);
    const auto start = SteadyClock::now();
    if (!client.send(request)) {
      fail("could not send a PING");
      return Step::kFailed;
    }
    ReceivedFrame reply;
    const Step step = await_reply(client, id, protocol::Opcode::kPing, reply);
    if (step != Step::kOk) return step;
    if (!std::equal(reply.body.begin(), reply.body.end(), std::begin(payload), std::end(payload))) {
      fail(fmt::format("PING {} came back with another payload", id));
      return Step::kFailed;
    }
    answered(SteadyClock::now() - start);
    return Step::kOk;
  }

  Step exchange_acquire(RawClient& client, bool first) {
    const Rule counter{Algorithm::kFixedWindow, kCounterLimit, steady_period_ms(), 0};
    const Rule single{Algorithm::kFixedWindow, 1, steady_period_ms(), 0};
    const protocol::AcquireItem items[] = {{"good:counter", counter, 1, false},
                                           {"good:used-up", single, 1, false}};
    const std::uint32_t id = client.next_id();
    protocol::Bytes request;
    protocol::encode_acquire_request(request, id, items);
    const auto start = SteadyClock::now();
    if (!client.send(request)) {
      fail("could not send an ACQUIRE");
      return Step::kFailed;
    }
    ReceivedFrame reply;
    const Step step = await_reply(client, id, protocol::Opcode::kAcquire, reply);
    if (step != Step::kOk) return step;
    std::vector<protocol::AcquireResult> results;
    if (!protocol::parse_acquire_reply(reply.body, results) || results.size() != 2) {
      fail(fmt::format("ACQUIRE {}: a reply that does not parse as two results", id));
      return Step::kFailed;
    }
    --counter_left_;
    const bool single_ok = first ? results[1].status == protocol::ItemStatus::kAllowed
                                 : results[1].status == protocol::ItemStatus::kDenied;
    if (results[0].status != protocol::ItemStatus::kAllowed ||
        results[0].remaining != counter_left_ || !single_ok) {
      fail(fmt::format(
          "ACQUIRE {}: counter {} with {} left (expected allowed with {}), used-up key {}", id,
          results[0].status == protocol::ItemStatus::kAllowed ? "allowed" : "not allowed",
          results[0].remaining, counter_left_,
          results[1].status == protocol::ItemStatus::kAllowed ? "allowed" : "not allowed"));
      return Step::kFailed;
    }
    answered(SteadyClock::now() - start);
    return Step::kOk;
  }

  static constexpr std::uint32_t kCounterLimit = 1'000'000;

  const std::uint16_t port_;
  const std::chrono::milliseconds deadline_;
  const std::chrono::milliseconds pause_;
  std::uint32_t counter_left_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> finished_{false};
  std::atomic<std::uint64_t> requests_{0};
  std::mutex mutex_;
  Report report_;
  std::thread thread_;  // last: it starts once everything above exists
};

// The latency that `fraction` of the good client's requests stayed within (0.99: p99).
inline SteadyClock::duration percentile(const GoodClient::Report& report, double fraction) {
  if (report.latencies.empty()) return {};
  std::vector<SteadyClock::duration> sorted = report.latencies;
  const auto at = static_cast<std::size_t>(fraction * static_cast<double>(sorted.size() - 1));
  std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(at), sorted.end());
  return sorted[at];
}

// "p99 1.2 ms, slowest 5.0 ms of 1234 requests": the good client's figures.
inline std::string latency_figures(const GoodClient::Report& report) {
  const auto in_ms = [](SteadyClock::duration d) {
    return std::chrono::duration<double, std::milli>(d).count();
  };
  return fmt::format("good client p99 {:.1f} ms, slowest {:.1f} ms of {} requests",
                     in_ms(percentile(report, 0.99)), in_ms(report.slowest), report.requests);
}

// A raw loopback connection for a hostile client: small kernel buffers when asked (set before
// connect, so the window is negotiated small, and unread replies back up in sluiced), and
// non-blocking sends of an endless stream that repeats `pattern` (whole frames).
class FloodSocket {
 public:
  // `receive_buffer` and `send_buffer`: SO_RCVBUF and SO_SNDBUF, 0 for the kernel's default.
  explicit FloodSocket(std::uint16_t port, int receive_buffer = 0, int send_buffer = -1) {
    if (send_buffer < 0) send_buffer = receive_buffer;
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd_ >= 0);
    if (receive_buffer > 0) {
      ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof receive_buffer);
    }
    if (send_buffer > 0) {
      ::setsockopt(fd_, SOL_SOCKET, SO_SNDBUF, &send_buffer, sizeof send_buffer);
    }
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd_, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0);
    const int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) | O_NONBLOCK);
  }
  ~FloodSocket() { close(); }
  FloodSocket(const FloodSocket&) = delete;
  FloodSocket& operator=(const FloodSocket&) = delete;

  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  // Sends what the kernel takes of the stream without blocking (at most `most` bytes): the
  // stream goes on where the last call stopped (the socket's byte count, modulo the pattern's
  // size). Returns the bytes taken.
  std::size_t send_stream(std::span<const std::uint8_t> pattern,
                          std::size_t most = std::numeric_limits<std::size_t>::max()) {
    std::size_t taken = 0;
    while (taken < most) {
      const std::size_t at = sent_ % pattern.size();
      const std::size_t n =
          send_some(pattern.subspan(at, std::min(pattern.size() - at, most - taken)));
      if (n == 0) break;
      taken += n;
    }
    return taken;
  }

  // Sends what the kernel takes of `bytes` without blocking; the bytes taken. A send that fails
  // for any reason but a full buffer marks the socket broken (the server closed it).
  std::size_t send_some(std::span<const std::uint8_t> bytes) {
    std::size_t taken = 0;
    while (!broken_ && fd_ >= 0 && taken < bytes.size()) {
      const ssize_t n =
          ::send(fd_, bytes.data() + taken, bytes.size() - taken, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        sent_ += static_cast<std::size_t>(n);
        taken += static_cast<std::size_t>(n);
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (n < 0 && errno == EINTR) continue;
      broken_ = true;
    }
    return taken;
  }

  std::uint64_t sent() const { return sent_; }
  bool broken() const { return broken_; }

  // Waits at most `limit` until the kernel takes more bytes; false when it did not.
  bool wait_writable(std::chrono::milliseconds limit) const {
    pollfd p{fd_, POLLOUT, 0};
    return ::poll(&p, 1, static_cast<int>(limit.count())) > 0;
  }

  enum class End { kClosed, kReset, kTimeout };

  // Waits at most `wait` for bytes, then reads what has arrived without blocking; kTimeout when
  // the stream is still open.
  End read_available(protocol::Bytes& received, std::chrono::milliseconds wait) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(wait.count())) <= 0) return End::kTimeout;
    for (;;) {
      std::uint8_t chunk[65536];
      const ssize_t n = ::recv(fd_, chunk, sizeof chunk, MSG_DONTWAIT);
      if (n > 0) {
        received.insert(received.end(), chunk, chunk + n);
        continue;
      }
      if (n == 0) return End::kClosed;
      if (errno == EINTR) continue;
      return errno == EAGAIN || errno == EWOULDBLOCK ? End::kTimeout : End::kReset;
    }
  }

  // Reads until end of stream, a reset, or the deadline; `received` gets every byte. What has
  // already arrived is read even once the deadline has passed.
  End read_to_end(protocol::Bytes& received, SteadyClock::time_point deadline) {
    for (;;) {
      const long long left = std::max(0LL, ms(deadline - SteadyClock::now()));
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left)) <= 0) return End::kTimeout;
      std::uint8_t chunk[65536];
      const ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
      if (n == 0) return End::kClosed;
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (n < 0) return End::kReset;
      received.insert(received.end(), chunk, chunk + n);
    }
  }

 private:
  int fd_ = -1;
  std::uint64_t sent_ = 0;
  bool broken_ = false;
};

// The frames at the start of `bytes`: how many, whether the last one is whole, and the code of
// the last ERROR among them (and whether anything came after it).
struct Replies {
  std::size_t frames = 0;
  bool whole = true;
  std::optional<protocol::WireErrorCode> error;
  bool frame_after_error = false;
};
inline Replies parse_replies(std::span<const std::uint8_t> bytes) {
  const protocol::FrameDecoder decoder(std::numeric_limits<std::uint32_t>::max());
  Replies out;
  std::size_t at = 0;
  while (at < bytes.size()) {
    const auto decoded = decoder.decode(bytes.subspan(at));
    if (decoded.status != protocol::DecodeStatus::kOk) {
      out.whole = false;
      break;
    }
    ++out.frames;
    if (out.error) out.frame_after_error = true;
    if (decoded.frame.header.opcode == protocol::Opcode::kError) {
      protocol::ErrorReply error;
      if (protocol::parse_error(decoded.frame.body, error)) out.error = error.code;
    }
    at += decoded.frame_size;
  }
  return out;
}

}  // namespace sluice::test
