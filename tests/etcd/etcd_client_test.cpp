// The etcd client against a real etcd (tests/support/etcd_process.h): leases, keys, the
// put-if-absent transaction, watches, endpoints that fail; and its pure parts (endpoint lists,
// base64). Each test runs its coroutines on its own io_context, bounded in time.
#include "etcd/etcd_client.h"

#include "net/asio.h"  // before any other Asio header

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/etcd_process.h"

namespace sluice::etcd {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;

// Runs `op` on `io` until it finishes (at most `limit`) and returns its value.
template <typename T>
T run(asio::io_context& io, asio::awaitable<T> op, std::chrono::milliseconds limit = 10s) {
  std::optional<T> out;
  asio::co_spawn(
      io, [&]() -> asio::awaitable<void> { out.emplace(co_await std::move(op)); }, asio::detached);
  io.restart();
  io.run_for(limit);
  REQUIRE(out.has_value());
  return std::move(*out);
}

Client::Config config_for(const test::EtcdProcess& etcd) {
  Client::Config config;
  config.endpoints = {Endpoint{"127.0.0.1", etcd.client_port()}};
  return config;
}

// A loopback port nothing listens on (bound, then closed).
std::uint16_t closed_port() { return test::free_port_pair(); }

// A socket listening on a free loopback port (set in `port`): its descriptor.
int listen_on_loopback(std::uint16_t& port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  REQUIRE(::listen(fd, 16) == 0);
  socklen_t size = sizeof address;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size) == 0);
  port = ntohs(address.sin_port);
  return fd;
}

// A socket that listens and never accepts: the kernel completes connections into its backlog,
// and nobody ever answers them.
class BlackHole {
 public:
  BlackHole() : fd_(listen_on_loopback(port_)) {}
  ~BlackHole() { ::close(fd_); }
  std::uint16_t port() const { return port_; }

 private:
  std::uint16_t port_ = 0;  // before fd_: listen_on_loopback() sets it
  int fd_ = -1;
};

TEST_CASE("parse_endpoints takes a comma-separated list of http://HOST:PORT and refuses the rest",
          "[etcd]") {
  const auto two = parse_endpoints("http://127.0.0.1:2379,http://etcd-b:32379/");
  REQUIRE(two.has_value());
  CHECK(*two == std::vector<Endpoint>{{"127.0.0.1", 2379}, {"etcd-b", 32379}});
  for (const char* bad :
       {"", "127.0.0.1:2379", "https://h:1", "http://h", "http://h:0", "http://h:65536",
        "http://h:12x", "http://:1", "http://h:1/v3", "http://h:1,"}) {
    INFO(bad);
    const auto parsed = parse_endpoints(bad);
    CHECK_FALSE(parsed.has_value());
    CHECK(parsed.error().find("etcd endpoint") != std::string::npos);
  }
  CHECK(parse_endpoints("http://h:65535").has_value());
}

TEST_CASE("base64 round-trips every byte value at every length and refuses what is not base64",
          "[etcd]") {
  std::string bytes;
  for (int i = 0; i < 256; ++i) bytes += static_cast<char>(i);
  for (std::size_t n = 0; n <= bytes.size(); ++n) {
    const std::string text = base64_encode(bytes.substr(0, n));
    CHECK(text.size() == (n + 2) / 3 * 4);
    CHECK(base64_decode(text) == bytes.substr(0, n));
  }
  CHECK(base64_encode("foo") == "Zm9v");
  CHECK(base64_encode("fo") == "Zm8=");
  CHECK(base64_encode("f") == "Zg==");
  for (const char* bad : {"Zm9", "Zm9v!", "Z===", "Zm=v", "Zg=A", "****"}) {
    INFO(bad);
    CHECK_FALSE(base64_decode(bad).has_value());
  }
}

TEST_CASE("a lease, keys with and without it, ranges of one key and of a prefix, a delete",
          "[etcd]") {
  test::EtcdProcess etcd;
  asio::io_context io;
  Client client(io, config_for(etcd));
  const Expected<Lease> lease = run(io, client.grant(2s));
  REQUIRE(lease.has_value());
  CHECK(lease->id != 0);
  CHECK(lease->ttl_s == 2);
  const Expected<std::int64_t> first = run(io, client.put("/t/members/a", "one", lease->id));
  REQUIRE(first.has_value());
  const Expected<std::int64_t> second =
      run(io, client.put("/t/members/b", std::string("\0\xff", 2)));
  REQUIRE(second.has_value());
  CHECK(*second == *first + 1);
  REQUIRE(run(io, client.put("/t/other", "x")).has_value());

  const Expected<RangeResult> members = run(io, client.range("/t/members/", true));
  REQUIRE(members.has_value());
  CHECK(members->revision == *second + 1);
  REQUIRE(members->kvs.size() == 2);
  CHECK(members->kvs[0].key == "/t/members/a");
  CHECK(members->kvs[0].value == "one");
  CHECK(members->kvs[0].lease == lease->id);
  CHECK(members->kvs[0].create_revision == *first);
  CHECK(members->kvs[1].key == "/t/members/b");
  CHECK(members->kvs[1].value == std::string("\0\xff", 2));
  CHECK(members->kvs[1].lease == 0);

  const Expected<RangeResult> one = run(io, client.range("/t/members/a", false));
  REQUIRE(one.has_value());
  CHECK(one->kvs.size() == 1);
  const Expected<RangeResult> none = run(io, client.range("/t/members/c", false));
  REQUIRE(none.has_value());
  CHECK(none->kvs.empty());

  const Expected<std::int64_t> ttl = run(io, client.keepalive(lease->id));
  REQUIRE(ttl.has_value());
  CHECK(*ttl == 2);
  // Just renewed: 1 or 2 whole seconds left of the 2 granted.
  const auto left = run(io, client.time_to_live(lease->id));
  REQUIRE(left.has_value());
  CHECK(left->granted_s == 2);
  CHECK(left->ttl_s >= 1);
  CHECK(left->ttl_s <= 2);
  CHECK(*run(io, client.del("/t/members/b")) == 1);
  CHECK(*run(io, client.del("/t/members/b")) == 0);
  CHECK(run(io, client.range("/t/members/", true))->kvs.size() == 1);
  // Revoking the lease deletes its key.
  REQUIRE(run(io, client.revoke(lease->id)).has_value());
  CHECK(run(io, client.range("/t/members/", true))->kvs.empty());
  CHECK(*run(io, client.keepalive(lease->id)) == 0);
  const auto gone = run(io, client.time_to_live(lease->id));
  REQUIRE(gone.has_value());
  CHECK(gone->ttl_s == -1);
}

TEST_CASE("put_if_absent writes a key once: a second writer finds it taken", "[etcd]") {
  test::EtcdProcess etcd;
  asio::io_context io;
  Client client(io, config_for(etcd));
  const Expected<Client::PutIfAbsent> mine = run(io, client.put_if_absent("/t/members/a", "mine"));
  REQUIRE(mine.has_value());
  CHECK(mine->written);
  const Expected<Client::PutIfAbsent> theirs =
      run(io, client.put_if_absent("/t/members/a", "theirs"));
  REQUIRE(theirs.has_value());
  CHECK_FALSE(theirs->written);
  CHECK(theirs->revision == mine->revision);
  CHECK(run(io, client.range("/t/members/a", false))->kvs.at(0).value == "mine");
}

TEST_CASE("a watch from a revision gets every change of the prefix in order, then stops",
          "[etcd]") {
  test::EtcdProcess etcd;
  asio::io_context io;
  Client client(io, config_for(etcd));
  const std::int64_t r1 = *run(io, client.put("/t/m/a", "1"));
  const std::int64_t r2 = *run(io, client.put("/t/m/b", "2"));
  REQUIRE(run(io, client.put("/t/n/x", "outside the prefix")).has_value());
  REQUIRE(*run(io, client.del("/t/m/a")) == 1);
  const std::int64_t r4 = r2 + 2;

  std::vector<WatchEvent> events;
  bool created = false;
  const std::string ended = run(io, client.watch("/t/m/", r1, [&](const WatchBatch& batch) {
    created = created || batch.created;
    events.insert(events.end(), batch.events.begin(), batch.events.end());
    return events.size() < 3;
  }));
  CHECK(ended.empty());
  CHECK(created);
  REQUIRE(events.size() == 3);
  CHECK(events[0].type == WatchEvent::Type::kPut);
  CHECK(events[0].kv.key == "/t/m/a");
  CHECK(events[0].kv.value == "1");
  CHECK(events[0].kv.mod_revision == r1);
  CHECK(events[1].kv.key == "/t/m/b");
  CHECK(events[1].kv.mod_revision == r2);
  CHECK(events[2].type == WatchEvent::Type::kDelete);
  CHECK(events[2].kv.key == "/t/m/a");
  CHECK(events[2].kv.mod_revision == r4);
}

TEST_CASE("a lease not kept alive expires after its TTL, and a watch sees its key deleted",
          "[etcd]") {
  test::EtcdProcess etcd;
  asio::io_context io;
  Client client(io, config_for(etcd));
  const auto granted = SteadyClock::now();
  const Expected<Lease> lease = run(io, client.grant(2s));
  REQUIRE(lease.has_value());
  const std::int64_t put = *run(io, client.put("/t/members/a", "x", lease->id));
  std::optional<SteadyClock::time_point> deleted;
  const std::string ended =
      run(io,
          client.watch("/t/members/", put + 1,
                       [&](const WatchBatch& batch) {
                         for (const WatchEvent& e : batch.events) {
                           if (e.type == WatchEvent::Type::kDelete && e.kv.key == "/t/members/a") {
                             deleted = SteadyClock::now();
                           }
                         }
                         return !deleted.has_value();
                       }),
          8s);
  CHECK(ended.empty());
  REQUIRE(deleted.has_value());
  const auto after = std::chrono::duration_cast<std::chrono::milliseconds>(*deleted - granted);
  INFO("deleted " << after.count() << " ms after the grant");
  CHECK(after >= 2s);  // never before its TTL
  CHECK(after < 5s);   // etcd checks expiry every 500 ms
  CHECK(*run(io, client.keepalive(lease->id)) == 0);
}

TEST_CASE("a lease kept alive every TTL/4 outlives its TTL", "[etcd]") {
  test::EtcdProcess etcd;
  asio::io_context io;
  Client client(io, config_for(etcd));
  const Expected<Lease> lease = run(io, client.grant(2s));
  REQUIRE(lease.has_value());
  REQUIRE(run(io, client.put("/t/members/a", "x", lease->id)).has_value());
  // Seven renewals 500 ms apart: 3.5 s, past the 2 s TTL.
  const auto renewals = [&]() -> asio::awaitable<int> {
    asio::steady_timer timer(io);
    int kept = 0;
    for (int i = 0; i < 7; ++i) {
      timer.expires_after(500ms);
      co_await timer.async_wait(asio::use_awaitable);
      const Expected<std::int64_t> ttl = co_await client.keepalive(lease->id);
      if (ttl.has_value() && *ttl == 2) ++kept;
    }
    co_return kept;
  };
  CHECK(run(io, renewals()) == 7);
  CHECK(run(io, client.range("/t/members/a", false))->kvs.size() == 1);
}

TEST_CASE("an endpoint that refuses or never answers is passed over within the call's deadline",
          "[etcd]") {
  test::EtcdProcess etcd;
  asio::io_context io;
  const BlackHole hole;
  Client::Config config;
  config.timeout = 1000ms;
  config.endpoints = {Endpoint{"127.0.0.1", closed_port()}, Endpoint{"127.0.0.1", hole.port()},
                      Endpoint{"127.0.0.1", etcd.client_port()}};
  Client client(io, config);
  const auto start = SteadyClock::now();
  const Expected<std::int64_t> put = run(io, client.put("/t/a", "x"));
  CHECK(put.has_value());
  CHECK(SteadyClock::now() - start < 1500ms);

  // None answers: the error names each, and comes by the deadline.
  config.timeout = 400ms;
  config.endpoints = {Endpoint{"127.0.0.1", closed_port()}, Endpoint{"127.0.0.1", hole.port()}};
  Client dead(io, config);
  const auto again = SteadyClock::now();
  const Expected<std::int64_t> failed = run(io, dead.put("/t/a", "x"));
  const auto took = SteadyClock::now() - again;
  REQUIRE_FALSE(failed.has_value());
  INFO(failed.error());
  CHECK(failed.error().find("connect") != std::string::npos);
  CHECK(failed.error().find("no answer in time") != std::string::npos);
  CHECK(took < 1000ms);
  const std::string watched = run(io, dead.watch("/t/", 0, [](const WatchBatch&) { return true; }));
  CHECK_FALSE(watched.empty());
}

// A member that answers every request with one canned HTTP response (a learner, an overloaded
// or leaderless member), on a thread of its own, and counts the requests it answered.
class CannedMember {
 public:
  explicit CannedMember(std::string response)
      : response_(std::move(response)), fd_(listen_on_loopback(port_)) {
    thread_ = std::thread([this] { serve(); });
  }
  ~CannedMember() {
    ::shutdown(fd_, SHUT_RDWR);
    thread_.join();
    ::close(fd_);
  }
  std::uint16_t port() const { return port_; }
  int answered() const { return answered_.load(); }

 private:
  void serve() {
    for (;;) {
      const int peer = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (peer < 0) return;
      // The request's head and its body (Content-Length), then the answer, then close.
      std::string request;
      char buffer[4096];
      std::size_t need = std::string::npos;
      while (request.size() < need) {
        const ssize_t n = ::recv(peer, buffer, sizeof buffer, 0);
        if (n <= 0) break;
        request.append(buffer, static_cast<std::size_t>(n));
        const std::size_t head = request.find("\r\n\r\n");
        if (head != std::string::npos && need == std::string::npos) {
          const std::size_t at = request.find("Content-Length: ");
          const std::size_t length =
              at == std::string::npos ? 0 : std::stoul(request.substr(at + 16));
          need = head + 4 + length;
        }
      }
      // Counted before the answer leaves: the test reads the count once its call has the answer.
      ++answered_;
      ::send(peer, response_.data(), response_.size(), MSG_NOSIGNAL);
      ::close(peer);
    }
  }

  std::string response_;
  std::uint16_t port_ = 0;  // before fd_: listen_on_loopback() sets it
  int fd_ = -1;
  std::atomic<int> answered_{0};
  std::thread thread_;
};

std::string http_answer(int status, const std::string& reason, const std::string& body) {
  return "HTTP/1.1 " + std::to_string(status) + " " + reason +
         "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\nConnection: close\r\n\r\n" + body;
}

TEST_CASE("member_specific tells a member's own errors from the cluster's answers", "[etcd]") {
  CHECK(member_specific(503, 0, "etcdserver: rpc not supported for learner"));
  CHECK(member_specific(429, 0, "etcdserver: too many requests"));
  CHECK(member_specific(504, 0, ""));
  CHECK(member_specific(200, 14, "etcdserver: no leader"));      // a streamed answer
  CHECK(member_specific(200, 0, "etcdserver: leader changed"));  // codes lost
  CHECK(member_specific(200, 4, "context deadline exceeded"));   // DeadlineExceeded
  CHECK_FALSE(member_specific(200, 5, "etcdserver: requested lease not found"));  // NotFound
  CHECK_FALSE(member_specific(400, 3, "etcdserver: key is not provided"));
  CHECK_FALSE(member_specific(404, 0, ""));
}

TEST_CASE(
    "a member's own error moves the call to the next member, which later calls start at, "
    "the cluster's answer is final",
    "[etcd]") {
  test::EtcdProcess etcd;
  asio::io_context io;
  // A learner answers unary calls with 503, a leaderless member a streamed call with 200 and an
  // error of gRPC code 14 (Unavailable).
  CannedMember learner(http_answer(
      503, "Service Unavailable",
      R"({"error":"etcdserver: rpc not supported for learner","code":14,"message":"etcdserver: rpc not supported for learner"})"));
  CannedMember leaderless(http_answer(
      200, "OK",
      R"({"error":{"grpc_code":14,"http_code":503,"message":"etcdserver: no leader","http_status":"Service Unavailable"}})"));
  Client::Config config;
  config.endpoints = {Endpoint{"127.0.0.1", learner.port()},
                      Endpoint{"127.0.0.1", leaderless.port()},
                      Endpoint{"127.0.0.1", etcd.client_port()}};
  Client client(io, config);
  CHECK(client.current_endpoint() == "127.0.0.1:" + std::to_string(learner.port()));
  const Expected<std::int64_t> put = run(io, client.put("/t/a", "x"));
  INFO((put ? "" : put.error()));
  REQUIRE(put.has_value());
  CHECK(learner.answered() == 1);
  CHECK(leaderless.answered() == 1);
  CHECK(client.current_endpoint() == "127.0.0.1:" + std::to_string(etcd.client_port()));
  // The next calls go straight to the member that answered.
  const Expected<RangeResult> read = run(io, client.range("/t/a", false));
  REQUIRE(read.has_value());
  REQUIRE(read->kvs.size() == 1);
  CHECK(learner.answered() == 1);
  CHECK(leaderless.answered() == 1);

  // An answer that is the cluster's (a bad request) is not taken to another member.
  CannedMember refusing(http_answer(
      400, "Bad Request",
      R"({"error":"etcdserver: key is not provided","code":3,"message":"etcdserver: key is not provided"})"));
  config.endpoints = {Endpoint{"127.0.0.1", refusing.port()},
                      Endpoint{"127.0.0.1", etcd.client_port()}};
  Client strict(io, config);
  const Expected<std::int64_t> refused = run(io, strict.put("/t/b", "y"));
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().find("key is not provided") != std::string::npos);
  CHECK(refusing.answered() == 1);
  const Expected<RangeResult> absent = run(io, client.range("/t/b", false));
  REQUIRE(absent.has_value());
  CHECK(absent->kvs.empty());  // etcd never saw the put
}

TEST_CASE("stop_watches ends a watch that is waiting for changes", "[etcd]") {
  test::EtcdProcess etcd;
  asio::io_context io;
  Client client(io, config_for(etcd));
  bool created = false;
  asio::steady_timer stop(io);
  const std::string ended = run(io, client.watch("/t/", 0, [&](const WatchBatch& batch) {
    if (batch.created && !created) {
      created = true;
      stop.expires_after(50ms);
      stop.async_wait([&](const boost::system::error_code&) { client.stop_watches(); });
    }
    return true;
  }));
  CHECK(created);
  CHECK(ended == "stopped");
}

}  // namespace
}  // namespace sluice::etcd
