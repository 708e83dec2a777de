// End-to-end runs of the load driver: against an in-process sluiced on 127.0.0.1 (system clock,
// ephemeral ports) and against a fake RESP server that answers scripted replies, so no Redis is
// needed. Every run is bounded by a request count and a duration.
#include "net/asio.h"  // before any other Asio header

#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "server/server.h"
#include "tests/load/load_checks.h"
#include "tests/support/window_clock.h"
#include "tools/load/load_driver.h"

namespace sluice::load {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

class LiveServer {
 public:
  explicit LiveServer(unsigned shards = 2, bool busy_poll = false,
                      const std::string& auth_token = "") {
    server::ServerConfig config;
    config.auth_token = auth_token;
    config.bind = "127.0.0.1";
    config.port = 0;
    config.shards = shards;
    config.busy_poll = busy_poll;
    config.max_memory = 16u << 20;
    config.idle_timeout = std::chrono::milliseconds(0);
    server_ = std::make_unique<server::Server>(config);
    server_->start();
  }
  ~LiveServer() {
    server_->stop();
    server_->wait();
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(server_->port()); }

 private:
  std::unique_ptr<server::Server> server_;
};

LoadOptions bounded(std::string server) {
  LoadOptions o;
  o.servers = {std::move(server)};
  o.connections = 4;
  o.depth = 4;
  o.batch = 1;
  o.keys = 50;
  o.requests = 3000;
  o.duration = std::chrono::seconds(20);  // the request bound ends it long before
  o.rule = Rule{Algorithm::kTokenBucket, 5, 1000, 0};
  o.connect_timeout = std::chrono::seconds(5);
  return o;
}

// An open loop at `rate` decisions/s for half a second, then at most a second for replies.
LoadOptions open_loop(std::string server, double rate) {
  LoadOptions o = bounded(std::move(server));
  o.requests = 0;
  o.rate = rate;
  o.duration = std::chrono::milliseconds(500);
  o.drain_timeout = std::chrono::seconds(1);
  return o;
}

// Runs `o` (an open loop with a duration) and checks that it ended on time: its duration, then
// at most the drain; the rest is connect and start-up slack.
client::Result<LoadReport> run_on_time(const LoadOptions& o) {
  const auto begin = std::chrono::steady_clock::now();
  client::Result<LoadReport> result = run_load(o);
  const auto took = std::chrono::steady_clock::now() - begin;
  CHECK(took < o.duration + o.drain_timeout + std::chrono::milliseconds(500));
  return result;
}

TEST_CASE("a bounded run against sluiced reports consistent counts and no overshoot", "[driver]") {
  LiveServer server;
  LoadOptions o = bounded(server.address());
  o.batch = 3;  // items of one request go to both shards: parts complete independently
  o.audit = true;
  const auto result = run_load(o);
  REQUIRE(result.ok());
  const LoadReport& r = *result;
  CHECK(r.sent == 3000);
  CHECK(r.errors == 0);
  CHECK(r.allowed > 0);
  CHECK(r.denied > 0);  // 50 keys, 5 per second each: most of 3000 are refused
  CHECK(r.shards == 2);
  CHECK(r.connections == 4);
  check_consistent(r);
  REQUIRE(r.audit.has_value());
  CHECK(r.audit->keys_checked > 0);
  CHECK(r.audit->max_overshoot_ratio == 0);
  CHECK(r.latency.count() == 1000);  // one latency per request of 3

  const std::string json = report_json(o, r);
  for (const char* field : {"\"backend\":\"sluice\"", "\"mode\":\"closed\"", "\"sent\":3000",
                            "\"allowed\":", "\"denied\":", "\"errors\":0", "\"duration_s\":",
                            "\"throughput_per_s\":", "\"latency_us\":{\"p50\":", "\"p90\":",
                            "\"p99\":", "\"p999\":", "\"max\":", "\"audit\":{\"keys_checked\":",
                            "\"max_overshoot_ratio\":0", "\"timeline\":[{\"t_ms\":0,"}) {
    CHECK(json.find(field) != std::string::npos);
  }
}

TEST_CASE(
    "an open-loop run sends or counts behind each scheduled request and stops at its duration",
    "[driver]") {
  LiveServer server;
  const LoadOptions o = open_loop(server.address(), 2000);
  const auto result = run_load(o);
  REQUIRE(result.ok());
  // Never more than scheduled; how many went out in time is the machine's speed, not asserted.
  CHECK(result->sent > 0);
  CHECK(result->sent <= 1001);
  CHECK(result->errors == 0);
  check_consistent(*result);
  CHECK(result->intended == 1000);  // 2000/s for 0.5 s
  CHECK(result->behind == result->intended - result->sent);
  CHECK(result->in_flight_max <= std::size_t{result->connections} * o.depth);
  CHECK(report_json(o, *result).find("\"mode\":\"open\"") != std::string::npos);
}

TEST_CASE("an open loop far above capacity still ends at its duration", "[driver]") {
  LiveServer server;
  // Decisions/s far above what one sluiced on a shared machine can answer.
  LoadOptions o = open_loop(server.address(), 1e9);
  o.depth = 2;
  const auto result = run_on_time(o);
  REQUIRE(result.ok());
  const LoadReport& r = *result;
  check_consistent(r);
  // What it meant to send, what it could, and how far behind it fell, all reported.
  CHECK(r.intended == 500'000'000);
  CHECK(r.sent > 0);
  CHECK(r.sent < r.intended);
  CHECK(r.behind == r.intended - r.sent);
  CHECK(r.backlog_max > r.intended / 2);
  // Memory stays bounded: never more than depth requests per connection in flight.
  CHECK(r.in_flight_max >= 1);
  CHECK(r.in_flight_max <= std::size_t{r.connections} * o.depth);
  CHECK(r.latency.count() > 0);
  const std::string json = report_json(o, r);
  for (const char* field : {"\"mode\":\"open\"", "\"intended\":500000000",
                            "\"behind\":", "\"backlog_max\":", "\"in_flight_max\":"}) {
    CHECK(json.find(field) != std::string::npos);
  }
  const std::string text = report_text(o, r);
  CHECK(text.find("open loop: intended 500000000  sent ") != std::string::npos);
  CHECK(text.find("(the rate was not reached)") != std::string::npos);
}

TEST_CASE("busy polling on both sides answers the same run, and both stop", "[driver]") {
  LiveServer server(/*shards=*/2, /*busy_poll=*/true);
  LoadOptions o = bounded(server.address());
  o.busy_poll = true;
  o.audit = true;
  const auto result = run_load(o);
  REQUIRE(result.ok());
  CHECK(result->sent == 3000);
  CHECK(result->errors == 0);
  CHECK(result->allowed > 0);
  CHECK(result->denied > 0);
  check_consistent(*result);
  REQUIRE(result->audit.has_value());
  CHECK(result->audit->max_overshoot_ratio == 0.0);
  // ~LiveServer stops the polling shards: the test ending at all is the check.
}

TEST_CASE(
    "a busy-polling open loop paces from the clock: its schedule is sent or counted "
    "behind and it ends at its duration",
    "[driver]") {
  LiveServer server(/*shards=*/2, /*busy_poll=*/true);
  LoadOptions o = open_loop(server.address(), 2000);
  o.busy_poll = true;
  const auto result = run_on_time(o);
  REQUIRE(result.ok());
  const LoadReport& r = *result;
  check_consistent(r);
  CHECK(r.intended == 1000);
  CHECK(r.sent > 0);
  CHECK(r.sent + r.behind == r.intended);
  CHECK(r.errors == 0);
  CHECK(r.latency.count() == r.sent);
}

TEST_CASE("ping sends the transport floor through the same path", "[driver]") {
  LiveServer server;
  LoadOptions o = bounded(server.address());
  o.op = Operation::kPing;
  o.batch = 8;
  o.threads = 2;
  const auto result = run_load(o);
  REQUIRE(result.ok());
  CHECK(result->sent == 3000);
  CHECK(result->allowed == 3000);
  CHECK(result->errors == 0);
  check_consistent(*result);
}

TEST_CASE("a run with the node's token is served on every connection, without it not at all",
          "[driver][auth]") {
  LiveServer server(2, false, "load-token");
  LoadOptions o = bounded(server.address());
  o.threads = 2;  // two clients, each with connections to both shards
  o.auth_token = "load-token";
  const auto served = run_load(o);
  REQUIRE(served.ok());
  CHECK(served->sent == 3000);
  CHECK(served->errors == 0);
  check_consistent(*served);

  for (const char* wrong : {"load-tokem", ""}) {
    INFO("token \"" << wrong << "\"");
    o.auth_token = wrong;
    const auto refused = run_load(o);
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.code() == client::ErrorCode::kUnauthenticated);
    CHECK_THAT(refused.status().message(), Catch::Contains("wrong or missing token"));
  }
}

TEST_CASE("a server that cannot be reached fails the run before it starts", "[driver]") {
  LoadOptions o = bounded("127.0.0.1:1");
  const auto result = run_load(o);
  CHECK_FALSE(result.ok());
}

TEST_CASE("options that cannot stop or do not fit the backend are refused", "[driver]") {
  LoadOptions o;
  o.duration = std::chrono::milliseconds(0);
  o.requests = 0;
  CHECK_FALSE(validate(o).empty());
  o.requests = 10;
  CHECK(validate(o).empty());
  o.op = Operation::kIncr;
  CHECK_FALSE(validate(o).empty());
  o.backend = BackendKind::kRedis;
  CHECK(validate(o).empty());
  o.op = Operation::kAcquire;
  o.redis_design = RedisDesign::kIncrWindow;
  CHECK_FALSE(validate(o).empty());  // token bucket rule
  o.rule.algorithm = Algorithm::kFixedWindow;
  CHECK(validate(o).empty());
  o.auth_token = "t";  // Redis takes no token
  CHECK(validate(o) ==
        "--auth-token-file is for --backend sluice (sluice-load sends no Redis AUTH)");
  o.backend = BackendKind::kSluice;
  o.op = Operation::kPing;
  CHECK(validate(o).empty());
  o.op = Operation::kAcquire;
  o.auth_token.clear();
  o.descriptors = 3;  // for rls and incr_window only
  CHECK(validate(o) ==
        "--descriptors is for --backend rls and --backend redis --redis-design incr_window");
  o.backend = BackendKind::kRedis;
  o.redis_design = RedisDesign::kIncrWindow;
  CHECK(validate(o).empty());
  o.descriptors = 9;
  CHECK(validate(o) == "--descriptors 9: must be 1..8");
  o.descriptors = 1;
  o.rls_domain = "api";
  CHECK(validate(o) == "--rls-domain is for --backend rls");
}

TEST_CASE("the control option takes 0 or 2..1000 and Sluice acquires only", "[driver]") {
  LoadOptions o;
  o.control_every = 2;
  CHECK(validate(o).empty());
  o.control_every = 1000;
  CHECK(validate(o).empty());
  o.control_every = 1;
  CHECK(validate(o) == "--control-every 1: must be 2..1000 (0 = none)");
  o.control_every = 1001;
  CHECK(validate(o) == "--control-every 1001: must be 2..1000 (0 = none)");
  o.control_every = 2;
  o.op = Operation::kPing;
  CHECK(validate(o) == "--control-every is for --backend sluice with --op acquire");
  o.op = Operation::kAcquire;
  o.backend = BackendKind::kRedis;
  CHECK(validate(o) == "--control-every is for --backend sluice with --op acquire");
}

TEST_CASE(
    "a busy-polling open loop with a PING control sends every other request as a PING and "
    "times both apart",
    "[driver]") {
  LiveServer server(/*shards=*/2, /*busy_poll=*/true);
  LoadOptions o = open_loop(server.address(), 2000);
  o.busy_poll = true;
  o.control_every = 2;
  const auto result = run_on_time(o);
  REQUIRE(result.ok());
  const LoadReport& r = *result;
  check_consistent(r);
  CHECK(r.errors == 0);
  CHECK(r.control.errors == 0);
  CHECK(r.control.answered == r.control.sent);
  // Alternating from the first request: as many controls as decision requests, or one fewer.
  CHECK(r.control.sent <= r.sent);
  CHECK(r.control.sent + 1 >= r.sent);
  CHECK(r.sent + r.control.sent > 500);
  // The schedule holds both: the slots not sent are behind.
  CHECK(r.intended == 1000);
  CHECK(r.latency.count() == r.sent);
  CHECK(r.control.latency.count() == r.control.sent);
  // 5 per second over 50 keys in half a second: the controls took no tokens, so decisions were
  // denied only past 5 a key.
  CHECK(r.allowed <= 50 * 5 + 50 * 3);
  CHECK(r.allowed + r.denied == r.sent);
  CHECK(report_json(o, r).find("\"control\":{\"op\":\"ping\",\"every\":2,\"sent\":") !=
        std::string::npos);
  CHECK(report_text(o, r).find("control (a PING in every 2 requests): sent ") != std::string::npos);
}

// A RESP server with scripted answers: SCRIPT LOAD, EVALSHA (a per-key counter admits the first
// `admit` calls), INCR, PEXPIRE, GET (always absent), PING. `noscript` answers EVALSHA with an
// error instead.
class FakeRedis {
 public:
  explicit FakeRedis(std::int64_t admit, bool noscript = false)
      : admit_(admit), noscript_(noscript) {
    accept();
    thread_ = std::thread([this] { io_.run(); });
  }
  ~FakeRedis() {
    asio::post(io_, [this] {
      acceptor_.close();
      for (Session& s : sessions_) s.socket.close();
    });
    thread_.join();
  }
  std::string address() const {
    return "127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port());
  }
  // The counters INCR and INCRBY created so far, by name, with their values.
  std::map<std::string, std::int64_t> counters() {
    std::promise<std::map<std::string, std::int64_t>> copy;
    asio::post(io_, [&] { copy.set_value(counters_); });
    return copy.get_future().get();
  }

 private:
  struct Session {
    explicit Session(asio::io_context& io) : socket(io) {}
    tcp::socket socket;
    std::string in;
    char buf[4096];
  };

  void accept() {
    sessions_.emplace_back(io_);
    Session& s = sessions_.back();
    acceptor_.async_accept(s.socket, [this, &s](const boost::system::error_code& ec) {
      if (ec) return;
      read(s);
      accept();
    });
  }

  void read(Session& s) {
    s.socket.async_read_some(asio::buffer(s.buf),
                             [this, &s](const boost::system::error_code& ec, std::size_t n) {
                               if (ec) return;
                               s.in.append(s.buf, n);
                               answer(s);
                               read(s);
                             });
  }

  void answer(Session& s) {
    std::string out;
    std::size_t at = 0;
    while (at < s.in.size()) {
      const RespParseResult r = parser_.parse(std::string_view(s.in).substr(at));
      if (r.status != RespStatus::kComplete) break;
      at += r.consumed;
      const auto args = parser_.elements(r.value);
      const std::string_view name = args.empty() ? "" : args[0].text;
      if (name == "SCRIPT") {
        out += "$40\r\n0123456789abcdef0123456789abcdef01234567\r\n";
      } else if (name == "PING") {
        out += "+PONG\r\n";
      } else if (name == "EVALSHA") {
        if (noscript_) {
          out += "-NOSCRIPT No matching script.\r\n";
          continue;
        }
        const bool allowed = ++counters_[std::string(args[3].text)] <= admit_;
        const auto now_us = std::chrono::duration_cast<std::chrono::microseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count();
        out += allowed ? "*4\r\n:1\r\n:0\r\n:0\r\n:" : "*4\r\n:0\r\n:0\r\n:-1\r\n:";
        out += std::to_string(now_us) + "\r\n";
      } else if (name == "INCR" || name == "INCRBY") {
        out += ":" + std::to_string(++counters_[std::string(args[1].text)]) + "\r\n";
      } else if (name == "PEXPIRE") {
        out += ":1\r\n";
      } else if (name == "GET") {
        out += "$-1\r\n";
      } else {
        out += "-ERR unknown command\r\n";
      }
    }
    s.in.erase(0, at);
    boost::system::error_code ignored;
    asio::write(s.socket, asio::buffer(out), ignored);
  }

  asio::io_context io_;
  tcp::acceptor acceptor_{io_, tcp::endpoint(asio::ip::address_v4::loopback(), 0)};
  std::list<Session> sessions_;
  RespParser parser_;
  std::map<std::string, std::int64_t> counters_;
  std::int64_t admit_;
  bool noscript_;
  std::thread thread_;
};

LoadOptions redis_options(const FakeRedis& fake) {
  LoadOptions o = bounded(fake.address());
  o.backend = BackendKind::kRedis;
  o.keys = 20;
  return o;
}

TEST_CASE("the Redis token bucket driver reads EVALSHA replies from a fake server", "[driver]") {
  FakeRedis fake(/*admit=*/5);
  LoadOptions o = redis_options(fake);
  o.batch = 4;
  o.audit = true;
  const auto result = run_load(o);
  REQUIRE(result.ok());
  CHECK(result->sent == 3000);
  CHECK(result->allowed == 20 * 5);
  CHECK(result->denied == 3000 - 100);
  CHECK(result->errors == 0);
  check_consistent(*result);
  REQUIRE(result->audit.has_value());
  CHECK(result->audit->keys_checked == 20);
  CHECK(result->audit->max_overshoot_ratio == 0);
}

TEST_CASE("the Redis incr_window driver reads pipelined INCR, PEXPIRE and GET", "[driver]") {
  FakeRedis fake(0);
  LoadOptions o = redis_options(fake);
  o.redis_design = RedisDesign::kIncrWindow;
  // The driver names each counter by its window on the UTC clock: one window for the whole run
  // (at an edge every key would start a new counter, and the fake answers GET with nothing).
  o.rule = Rule{Algorithm::kSlidingWindow, 7, test::steady_period_ms(), 0};
  o.depth = 2;
  const auto result = run_load(o);
  REQUIRE(result.ok());
  CHECK(result->sent == 3000);
  CHECK(result->errors == 0);
  // The fake's counters never reset: at most 7 per key.
  CHECK(result->allowed <= 20 * 7);
  CHECK(result->allowed > 0);
  check_consistent(*result);
}

TEST_CASE("incr_window with 3 descriptors increments 3 counters per decision in one pipeline",
          "[driver]") {
  FakeRedis fake(0);
  LoadOptions o = redis_options(fake);
  o.redis_design = RedisDesign::kIncrWindow;
  o.rule = Rule{Algorithm::kFixedWindow, 7, test::steady_period_ms(), 0};  // one window, as above
  o.descriptors = 3;
  o.requests = 600;
  o.depth = 2;
  const auto result = run_load(o);
  REQUIRE(result.ok());
  CHECK(result->sent == 600);
  CHECK(result->errors == 0);
  check_consistent(*result);
  // Every decision went to its key's 3 counters of the window: they add up to 3 per decision
  // sent for it.
  const auto counters = fake.counters();
  std::int64_t total = 0;
  std::map<std::string, std::int64_t> per_descriptor;
  for (const auto& [name, value] : counters) {
    total += value;
    const auto close = name.find('}');
    REQUIRE(close != std::string::npos);
    const std::string rest = name.substr(close + 1);
    per_descriptor[rest.starts_with(":d") ? rest.substr(0, 3) : std::string("d0")] += value;
  }
  CHECK(total == 3 * 600);
  CHECK(per_descriptor ==
        std::map<std::string, std::int64_t>{{":d1", 600}, {":d2", 600}, {"d0", 600}});
  // The fake's counters never reset and the 3 of a key move together: at most 7 per key.
  CHECK(result->allowed <= 20 * 7);
  CHECK(result->allowed > 0);
}

TEST_CASE("a Redis open loop far above capacity keeps depth per connection and ends on time",
          "[driver]") {
  FakeRedis fake(/*admit=*/5);
  LoadOptions o = redis_options(fake);
  o.requests = 0;
  o.rate = 1e9;
  o.depth = 3;
  o.duration = std::chrono::milliseconds(300);
  o.drain_timeout = std::chrono::seconds(1);
  const auto result = run_on_time(o);
  REQUIRE(result.ok());
  check_consistent(*result);
  CHECK(result->errors == 0);
  CHECK(result->intended == 300'000'000);
  CHECK(result->behind == result->intended - result->sent);
  CHECK(result->backlog_max > 0);
  CHECK(result->in_flight_max <= std::size_t{result->connections} * o.depth);
}

TEST_CASE("Redis error replies count as errors and the totals still add up", "[driver]") {
  FakeRedis fake(5, /*noscript=*/true);
  LoadOptions o = redis_options(fake);
  o.requests = 500;
  const auto result = run_load(o);
  REQUIRE(result.ok());
  CHECK(result->errors == 500);
  CHECK(result->first_error.find("NOSCRIPT") != std::string::npos);
  check_consistent(*result);
}

TEST_CASE("bare INCR and PING against the fake count every reply as allowed", "[driver]") {
  FakeRedis fake(0);
  for (Operation op : {Operation::kIncr, Operation::kPing}) {
    LoadOptions o = redis_options(fake);
    o.op = op;
    o.batch = 16;
    o.threads = 2;
    const auto result = run_load(o);
    REQUIRE(result.ok());
    CHECK(result->allowed == 3000);
    check_consistent(*result);
  }
}

TEST_CASE("the error window spans the timeline steps with errors, first to last", "[driver]") {
  LoadReport r;
  CHECK_FALSE(error_window(r).has_value());
  r.timeline.resize(40);
  CHECK_FALSE(error_window(r).has_value());
  r.timeline[12].errors = 5;  // 1.2 s
  r.timeline[13].errors = 9;
  r.timeline[35].errors = 1;  // to the end of 3.5 s, with error-free steps between
  r.errors = 15;
  const auto window = error_window(r);
  REQUIRE(window.has_value());
  CHECK(window->first_ms == 1200);
  CHECK(window->end_ms == 3600);
  LoadOptions o;
  o.servers = {"127.0.0.1:7420"};
  CHECK(
      report_text(o, r).find("errors from 1.2 s to 3.6 s into the run (2400 ms of 100 ms steps)") !=
      std::string::npos);
}

}  // namespace
}  // namespace sluice::load
