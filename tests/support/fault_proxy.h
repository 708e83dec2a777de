// A TCP proxy on loopback that a test puts between a client and a real server, and then tells,
// at any moment, to pass bytes, to delay them, to black-hole the connections (bytes stop moving
// both ways and the connections stay open, as when a route vanishes: once it passes again, what
// was held flows on, as TCP would retransmit it) or to drop them (every connection through it is
// reset, and new ones are accepted and reset at once). One thread, poll(), bounded buffers. When
// either side closes, the pair is closed at once and what was queued for the other is dropped:
// enough for these tests, which never close a connection they still read from.
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace sluice::test {

class FaultProxy {
 public:
  enum class Mode { kPass, kDelay, kBlackHole, kDrop };

  // Forwards 127.0.0.1:port() to 127.0.0.1:`upstream_port`.
  explicit FaultProxy(std::uint16_t upstream_port) : upstream_port_(upstream_port) {
    listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    REQUIRE(listener_ >= 0);
    sockaddr_in address = loopback(0);
    REQUIRE(::bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
    REQUIRE(::listen(listener_, 64) == 0);
    socklen_t length = sizeof address;
    REQUIRE(::getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &length) == 0);
    port_ = ntohs(address.sin_port);
    REQUIRE(::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) == 0);
    thread_ = std::thread([this] { run(); });
  }
  ~FaultProxy() {
    stop_.store(true);
    poke();
    thread_.join();
    for (Pair& p : pairs_) close_pair(p);
    ::close(listener_);
    ::close(wake_[0]);
    ::close(wake_[1]);
  }
  FaultProxy(const FaultProxy&) = delete;
  FaultProxy& operator=(const FaultProxy&) = delete;

  std::uint16_t port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

  void pass() { set(Mode::kPass, 0); }
  // Every byte read from now on is held `ms` before it is written on.
  void delay(std::chrono::milliseconds ms) { set(Mode::kDelay, ms.count()); }
  void black_hole() { set(Mode::kBlackHole, 0); }
  void drop() { set(Mode::kDrop, 0); }

  // Connections accepted since construction.
  std::uint64_t accepted() const { return accepted_.load(); }

 private:
  struct Chunk {
    std::chrono::steady_clock::time_point due;
    std::string bytes;
  };
  // One direction: bytes read from `from`, waiting to be written to `to`.
  struct Flow {
    int from = -1;
    int to = -1;
    std::deque<Chunk> queue;
    std::size_t queued = 0;
  };
  struct Pair {
    Flow up;    // client -> server
    Flow down;  // server -> client
    bool dead = false;
  };
  static constexpr std::size_t kMaxQueued = 4 << 20;  // per direction: reading stops above it

  static sockaddr_in loopback(std::uint16_t port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
  }
  void set(Mode mode, long long delay_ms) {
    delay_ms_.store(delay_ms);
    mode_.store(mode);
    poke();
  }
  void poke() {
    const char c = 1;
    [[maybe_unused]] const ssize_t n = ::write(wake_[1], &c, 1);
  }
  static void close_pair(Pair& p) {
    if (p.up.from >= 0) ::close(p.up.from);
    if (p.down.from >= 0) ::close(p.down.from);
    p.up.from = p.up.to = p.down.from = p.down.to = -1;
  }
  // Resets the connection at once (RST, not FIN): the peer sees it as a dropped route would.
  static void reset(int fd) {
    if (fd < 0) return;
    linger hard{1, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &hard, sizeof hard);
  }
  void accept_all() {
    for (int n = 0; n < 64; ++n) {
      const int client = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (client < 0) return;
      accepted_.fetch_add(1);
      if (mode_.load() == Mode::kDrop) {
        reset(client);
        ::close(client);
        continue;
      }
      const int server = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in address = loopback(upstream_port_);
      if (server < 0 ||
          ::connect(server, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
        if (server >= 0) ::close(server);
        reset(client);
        ::close(client);
        continue;
      }
      ::fcntl(server, F_SETFL, ::fcntl(server, F_GETFL) | O_NONBLOCK);
      int one = 1;
      ::setsockopt(server, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      ::setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      Pair p;
      p.up.from = client;
      p.up.to = server;
      p.down.from = server;
      p.down.to = client;
      pairs_.push_back(std::move(p));
    }
  }
  // Reads what `flow.from` has; false when it is closed or failed.
  bool read_into(Flow& flow, std::chrono::steady_clock::time_point now) {
    char buffer[64 * 1024];
    const ssize_t n = ::recv(flow.from, buffer, sizeof buffer, 0);
    if (n == 0) return false;
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    const auto hold = mode_.load() == Mode::kDelay ? std::chrono::milliseconds(delay_ms_.load())
                                                   : std::chrono::milliseconds(0);
    flow.queue.push_back(Chunk{now + hold, std::string(buffer, static_cast<std::size_t>(n))});
    flow.queued += static_cast<std::size_t>(n);
    return true;
  }
  // Writes what is due; false when `flow.to` failed.
  bool write_due(Flow& flow, std::chrono::steady_clock::time_point now) {
    while (!flow.queue.empty() && flow.queue.front().due <= now) {
      std::string& bytes = flow.queue.front().bytes;
      const ssize_t n = ::send(flow.to, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
      flow.queued -= static_cast<std::size_t>(n);
      if (static_cast<std::size_t>(n) < bytes.size()) {
        bytes.erase(0, static_cast<std::size_t>(n));
        return true;
      }
      flow.queue.pop_front();
    }
    return true;
  }
  void run() {
    while (!stop_.load()) {
      const Mode mode = mode_.load();
      const auto now = std::chrono::steady_clock::now();
      if (mode == Mode::kDrop) {
        for (Pair& p : pairs_) {
          reset(p.up.from);
          reset(p.down.from);
          close_pair(p);
        }
        pairs_.clear();
      }
      std::vector<pollfd> fds;
      fds.push_back(pollfd{wake_[0], POLLIN, 0});
      fds.push_back(pollfd{listener_, POLLIN, 0});
      int timeout_ms = 100;  // stop_ is looked at least this often
      for (Pair& p : pairs_) {
        for (Flow* f : {&p.up, &p.down}) {
          short events = 0;
          if (mode != Mode::kBlackHole) {
            if (f->queued < kMaxQueued) events |= POLLIN;
            if (!f->queue.empty()) {
              if (f->queue.front().due <= now) {
                fds.push_back(pollfd{f->to, POLLOUT, 0});
              } else {
                const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(
                                      f->queue.front().due - now)
                                      .count() +
                                  1;
                timeout_ms = std::min<int>(timeout_ms, static_cast<int>(wait));
              }
            }
          }
          fds.push_back(pollfd{f->from, events, 0});
        }
      }
      ::poll(fds.data(), fds.size(), timeout_ms);
      if ((fds[0].revents & POLLIN) != 0) {
        char drain[64];
        while (::read(wake_[0], drain, sizeof drain) > 0) {
        }
      }
      if ((fds[1].revents & POLLIN) != 0) accept_all();
      if (mode_.load() != mode || mode == Mode::kBlackHole || mode == Mode::kDrop) continue;
      const auto after = std::chrono::steady_clock::now();
      for (Pair& p : pairs_) {
        for (Flow* f : {&p.up, &p.down}) {
          if (p.dead) break;
          // Read only below the bound, so a stalled peer holds at most kMaxQueued per way.
          if ((f->queued < kMaxQueued && !read_into(*f, after)) || !write_due(*f, after)) {
            p.dead = true;
          }
        }
        if (p.dead) close_pair(p);
      }
      std::erase_if(pairs_, [](const Pair& p) { return p.dead; });
    }
  }

  const std::uint16_t upstream_port_;
  int listener_ = -1;
  std::uint16_t port_ = 0;
  int wake_[2] = {-1, -1};
  std::atomic<Mode> mode_{Mode::kPass};
  std::atomic<long long> delay_ms_{0};
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> accepted_{0};
  std::vector<Pair> pairs_;  // the proxy's thread
  std::thread thread_;
};

}  // namespace sluice::test
