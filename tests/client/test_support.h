// Servers for the client tests: the real daemon in-process on a manual clock, and a fake
// node that answers HELLO and then holds, answers or drops replies on command.
#pragma once

#include "net/asio.h"  // before any other Asio header

#include <atomic>
#include <boost/asio.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "client/client.h"
#include "core/clock.h"
#include "protocol/cluster_messages.h"
#include "protocol/frame.h"
#include "protocol/messages.h"
#include "server/server.h"

namespace sluice::client::testing {

// Unix time of the manual clock: 2023-11-14T22:13:20Z.
inline constexpr std::uint64_t kStartNs = 1'700'000'000ull * 1'000'000'000ull;

class TestServer {
 public:
  // With `auth_token`, the node requires it in every HELLO (ServerConfig::auth_token).
  explicit TestServer(const std::string& auth_token = "") : server_(config(clock_, auth_token)) {
    server_.start();
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(server_.port()); }
  server::Server& server() { return server_; }
  ManualClock& clock() { return clock_; }

 private:
  static server::ServerConfig config(const ManualClock& clock, const std::string& auth_token) {
    server::ServerConfig c;
    c.auth_token = auth_token;
    c.bind = "127.0.0.1";
    c.port = 0;
    c.shards = 2;
    c.max_memory = 16u << 20;
    c.stats_refresh = std::chrono::milliseconds(0);  // STATS shows every change at once
    c.clock = &clock;
    return c;
  }
  ManualClock clock_{kStartNs};
  server::Server server_;
};

// Wall-clock bounds in the client tests only catch hangs; they are not speed assertions.
inline constexpr std::chrono::seconds kHang{10};

// A token bucket of `limit` per minute: nothing refills within a test.
inline Rule per_minute(std::uint32_t limit) {
  Rule r;
  r.limit = limit;
  r.period_ms = 60'000;
  return r;
}

// Runs `f` on the thread that runs `io` and waits for it.
template <typename F>
void run_on(boost::asio::io_context& io, F f) {
  std::promise<void> done;
  boost::asio::post(io, [&] {
    f();
    done.set_value();
  });
  done.get_future().wait();
}

inline ClientOptions options_for(const std::string& address, bool shard_aware = true) {
  ClientOptions options;
  options.servers = {address};
  options.timeout = std::chrono::milliseconds(2000);
  options.connect_timeout = std::chrono::milliseconds(2000);
  options.shard_aware = shard_aware;
  options.client_name = "client_tests";
  // The transport alone: failures come back as errors, nothing is answered locally or counted.
  // The local layer's tests (local_layer_test.cpp) turn it on, on the server's clock.
  options.failure_policy = FailurePolicy::kReport;
  options.blocked_keys = 0;
  options.breaker_failures = 0;
  options.metrics = false;
  options.lease_duration = std::chrono::milliseconds(0);
  return options;
}

// The counter `name` of the client's seed node (Client::stats()); fails the test without it.
inline std::uint64_t stat(Client& client, std::string_view name) {
  auto stats = client.stats();
  REQUIRE(stats.ok());
  for (const Stat& s : *stats) {
    if (s.name == name) return s.value;
  }
  FAIL("no stat " << name);
  return 0;
}

inline std::unique_ptr<Client> connect_or_fail(const ClientOptions& options) {
  auto client = Client::connect(options);
  if (!client.ok()) throw std::runtime_error("connect failed: " + client.status().to_string());
  return std::move(client).value();
}

// Counts callbacks and lets a test wait for a number of them, bounded.
class CallbackLatch {
 public:
  void count_down() {
    std::lock_guard lock(mu_);
    ++done_;
    cv_.notify_all();
  }
  bool wait_for(std::size_t n, std::chrono::milliseconds limit) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, limit, [&] { return done_ >= n; });
  }
  std::size_t done() {
    std::lock_guard lock(mu_);
    return done_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::size_t done_ = 0;
};

// A node on 127.0.0.1 that speaks just enough protocol: in kSilent it never writes a byte;
// otherwise it answers HELLO (one shard: its own port; connect with shard_aware = false) and
// CLUSTER (a node outside any cluster) and, in
// kAnswer, ACQUIRE with `remaining` set to the item's cost (so a test can tell replies apart) and
// PING. In kHold it keeps ACQUIRE replies until release_held(). In kNotSluice it answers any
// bytes as Redis answers an unknown command. In kStall it answers HELLO and CLUSTER and then
// reads nothing more, with a small receive window, so the client's writes stall. `bind` may be
// "::1" for an IPv6 node.
class FakeServer {
 public:
  enum class Mode { kSilent, kHold, kAnswer, kRefuse, kNotSluice, kStall };

  explicit FakeServer(Mode mode, const char* bind = "127.0.0.1") : mode_(mode), acceptor_(io_) {
    namespace ip = boost::asio::ip;
    const ip::tcp::endpoint endpoint(ip::make_address(bind), 0);
    acceptor_.open(endpoint.protocol());
    acceptor_.set_option(ip::tcp::acceptor::reuse_address(true));
    // Accepted sockets inherit a small receive window, so a peer's writes stall sooner.
    if (mode == Mode::kStall) acceptor_.set_option(ip::tcp::socket::receive_buffer_size(4096));
    acceptor_.bind(endpoint);
    acceptor_.listen();
    accept();
    thread_ = std::thread([this] { io_.run(); });
  }
  ~FakeServer() {
    io_.stop();
    thread_.join();
  }

  std::string address() const {
    const auto endpoint = acceptor_.local_endpoint();
    const std::string host = endpoint.address().to_string();
    return (endpoint.address().is_v6() ? "[" + host + "]" : host) + ":" +
           std::to_string(endpoint.port());
  }
  int accepted() const { return accepted_.load(); }
  // ACQUIRE frames received so far (answered, held or refused).
  int acquires() const { return acquires_.load(); }
  // Waits until at least `n` ACQUIRE frames have arrived; false after `limit`.
  bool wait_acquires(int n, std::chrono::milliseconds limit) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, limit, [&] { return acquires_.load() >= n; });
  }

  void set_mode(Mode mode) {
    run([this, mode] { mode_ = mode; });
  }
  // From now on CLUSTER answers a map of epoch 1 whose only node is this one ("fake"), so a
  // client that connects afterwards routes by it (and retries UNAVAILABLE).
  void join_cluster() {
    run([this] { member_ = true; });
  }
  // In kAnswer, the next `frames` ACQUIRE frames have every item answered UNAVAILABLE.
  void answer_unavailable(int frames) {
    run([this, frames] { unavailable_frames_ = frames; });
  }
  // Sends every held reply, oldest first.
  void release_held() {
    run([this] {
      for (auto& session : sessions_) {
        if (session->socket.is_open()) {
          boost::system::error_code ec;
          boost::asio::write(session->socket, boost::asio::buffer(session->held), ec);
        }
        session->held.clear();
      }
    });
  }
  // Closes every accepted connection; new connections are still accepted.
  void drop_connections() {
    run([this] {
      for (auto& session : sessions_) {
        boost::system::error_code ec;
        session->socket.close(ec);
      }
      sessions_.clear();
    });
  }

 private:
  struct Session {
    explicit Session(boost::asio::io_context& io) : socket(io) {}
    boost::asio::ip::tcp::socket socket;
    std::vector<std::uint8_t> in = std::vector<std::uint8_t>(1 << 16);
    std::size_t used = 0;
    protocol::Bytes held;
  };

  // Runs `f` on the server's thread and waits for it.
  template <typename F>
  void run(F f) {
    run_on(io_, std::move(f));
  }

  void accept() {
    auto session = std::make_shared<Session>(io_);
    acceptor_.async_accept(session->socket, [this, session](const boost::system::error_code& ec) {
      if (ec) return;
      ++accepted_;
      sessions_.push_back(session);
      read(session);
      accept();
    });
  }

  void read(const std::shared_ptr<Session>& s) {
    s->socket.async_read_some(
        boost::asio::buffer(s->in.data() + s->used, s->in.size() - s->used),
        [this, s](const boost::system::error_code& ec, std::size_t n) {
          if (ec) return;
          if (mode_ == Mode::kNotSluice) {
            static constexpr char kReply[] = "-ERR unknown command\r\n";
            boost::system::error_code wec;
            boost::asio::write(s->socket, boost::asio::buffer(kReply, sizeof(kReply) - 1), wec);
            return read(s);
          }
          s->used += n;
          std::size_t begin = 0;
          protocol::FrameDecoder decoder;
          for (;;) {
            auto r = decoder.decode(
                std::span<const std::uint8_t>(s->in.data() + begin, s->used - begin));
            if (r.status != protocol::DecodeStatus::kOk) break;
            begin += r.frame_size;
            handle(*s, r.frame);
            // HELLO and CLUSTER answered: never read again.
            if (mode_ == Mode::kStall && r.frame.header.opcode == protocol::Opcode::kCluster) {
              return;
            }
          }
          std::copy(s->in.begin() + static_cast<std::ptrdiff_t>(begin),
                    s->in.begin() + static_cast<std::ptrdiff_t>(s->used), s->in.begin());
          s->used -= begin;
          read(s);
        });
  }

  void handle(Session& s, const protocol::Frame& frame) {
    if (mode_ == Mode::kSilent) return;
    protocol::Bytes out;
    const std::uint32_t id = frame.header.request_id;
    switch (frame.header.opcode) {
      case protocol::Opcode::kHello: {
        protocol::HelloReply hello;
        hello.node_id = "fake";
        hello.shard_ports = {acceptor_.local_endpoint().port()};  // tests connect shard-unaware
        protocol::encode_hello_reply(out, id, hello);
        break;
      }
      case protocol::Opcode::kCluster: {  // whatever the mode
        protocol::ClusterMapMessage map;  // a node outside any cluster, unless it joined one
        if (member_) {
          map.epoch = 1;
          map.ring_version = 1;
          map.partition_bits = 8;
          map.vnodes = 16;
          map.self = 0;
          const auto endpoint = acceptor_.local_endpoint();
          map.nodes.push_back({protocol::WireNodeState::kActive, "fake",
                               endpoint.address().to_string(), endpoint.port()});
        }
        protocol::encode_cluster_reply(out, id, map);
        break;
      }
      case protocol::Opcode::kPing:
        if (mode_ != Mode::kAnswer) return;
        protocol::encode_ping(out, id, frame.body, true);
        break;
      case protocol::Opcode::kAcquire: {
        {
          std::lock_guard lock(mu_);
          ++acquires_;
          cv_.notify_all();
        }
        if (mode_ == Mode::kRefuse) {
          protocol::encode_error(out, id, protocol::WireErrorCode::kInternal, "boom");
          boost::system::error_code ec;
          boost::asio::write(s.socket, boost::asio::buffer(out), ec);
          s.socket.close(ec);
          return;
        }
        std::vector<protocol::AcquireItem> items;
        if (!protocol::parse_acquire_request(frame.body, protocol::kDefaultMaxBatch, items)) return;
        std::vector<protocol::AcquireResult> results;
        const bool unavailable = mode_ == Mode::kAnswer && unavailable_frames_ > 0;
        if (unavailable) --unavailable_frames_;
        for (const auto& item : items) {
          if (unavailable) {
            results.push_back({protocol::ItemStatus::kUnavailable, 0, 0, 0, 0});
          } else {
            results.push_back({protocol::ItemStatus::kAllowed, item.rule.limit, item.cost, 0, 0});
          }
        }
        protocol::encode_acquire_reply(mode_ == Mode::kAnswer ? out : s.held, id, results);
        break;
      }
      default:
        return;
    }
    boost::system::error_code ec;
    if (!out.empty()) boost::asio::write(s.socket, boost::asio::buffer(out), ec);
  }

  Mode mode_;                   // server thread
  bool member_ = false;         // server thread
  int unavailable_frames_ = 0;  // server thread
  boost::asio::io_context io_;
  boost::asio::ip::tcp::acceptor acceptor_;
  std::vector<std::shared_ptr<Session>> sessions_;
  std::atomic<int> accepted_{0};
  std::atomic<int> acquires_{0};
  std::mutex mu_;  // for waiting on acquires_
  std::condition_variable cv_;
  std::thread thread_;
};

// A TCP proxy on 127.0.0.1 in front of a server's port: forwards bytes both ways, except that
// while replies are held, what the server sends waits in the proxy (so a real daemon's HELLO
// reply can be delayed at will).
class GateProxy {
 public:
  explicit GateProxy(std::uint16_t target_port) : target_port_(target_port), acceptor_(io_) {
    namespace ip = boost::asio::ip;
    acceptor_.open(ip::tcp::v4());
    acceptor_.set_option(ip::tcp::acceptor::reuse_address(true));
    acceptor_.bind(ip::tcp::endpoint(ip::make_address("127.0.0.1"), 0));
    acceptor_.listen();
    accept();
    thread_ = std::thread([this] { io_.run(); });
  }
  ~GateProxy() {
    io_.stop();
    thread_.join();
  }

  std::string address() const {
    return "127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port());
  }
  int accepted() const { return accepted_.load(); }

  // From now on the server's bytes wait in the proxy.
  void hold_replies() {
    run([this] { holding_ = true; });
  }
  // Sends what was held and forwards again.
  void release_replies() {
    run([this] {
      holding_ = false;
      for (auto& pair : pairs_) {
        boost::system::error_code ec;
        if (pair->client.is_open())
          boost::asio::write(pair->client, boost::asio::buffer(pair->held), ec);
        pair->held.clear();
      }
    });
  }
  // Closes both sides of every proxied connection; new ones are still accepted.
  void drop_connections() {
    run([this] {
      for (auto& pair : pairs_) {
        boost::system::error_code ec;
        pair->client.close(ec);
        pair->server.close(ec);
      }
      pairs_.clear();
    });
  }

 private:
  struct Pair {
    explicit Pair(boost::asio::io_context& io) : client(io), server(io) {}
    boost::asio::ip::tcp::socket client;
    boost::asio::ip::tcp::socket server;
    std::vector<std::uint8_t> from_client = std::vector<std::uint8_t>(1 << 16);
    std::vector<std::uint8_t> from_server = std::vector<std::uint8_t>(1 << 16);
    std::vector<std::uint8_t> held;
  };

  // Runs `f` on the server's thread and waits for it.
  template <typename F>
  void run(F f) {
    run_on(io_, std::move(f));
  }

  void accept() {
    auto pair = std::make_shared<Pair>(io_);
    acceptor_.async_accept(pair->client, [this, pair](const boost::system::error_code& ec) {
      if (ec) return;
      boost::system::error_code connect_ec;
      pair->server.connect(
          boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), target_port_),
          connect_ec);
      if (!connect_ec) {
        ++accepted_;
        pairs_.push_back(pair);
        pump_to_server(pair);
        pump_to_client(pair);
      }
      accept();
    });
  }

  void pump_to_server(const std::shared_ptr<Pair>& p) {
    p->client.async_read_some(boost::asio::buffer(p->from_client),
                              [this, p](const boost::system::error_code& ec, std::size_t n) {
                                boost::system::error_code wec;
                                if (ec) {
                                  p->server.close(wec);
                                  return;
                                }
                                boost::asio::write(
                                    p->server, boost::asio::buffer(p->from_client.data(), n), wec);
                                pump_to_server(p);
                              });
  }

  void pump_to_client(const std::shared_ptr<Pair>& p) {
    p->server.async_read_some(
        boost::asio::buffer(p->from_server),
        [this, p](const boost::system::error_code& ec, std::size_t n) {
          boost::system::error_code wec;
          if (ec) {
            p->client.close(wec);
            return;
          }
          if (holding_) {
            p->held.insert(p->held.end(), p->from_server.begin(),
                           p->from_server.begin() + static_cast<std::ptrdiff_t>(n));
          } else {
            boost::asio::write(p->client, boost::asio::buffer(p->from_server.data(), n), wec);
          }
          pump_to_client(p);
        });
  }

  const std::uint16_t target_port_;
  boost::asio::io_context io_;
  boost::asio::ip::tcp::acceptor acceptor_;
  std::vector<std::shared_ptr<Pair>> pairs_;  // proxy thread
  bool holding_ = false;                      // proxy thread
  std::atomic<int> accepted_{0};
  std::thread thread_;
};

}  // namespace sluice::client::testing
