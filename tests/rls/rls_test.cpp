// sluice-gateway's Envoy Rate Limit Service front over real gRPC, in-process: RlsServer on
// 127.0.0.1 in front of a real node (manual clock: no window rolls during a test), asked by a
// C++ client built from our .proto (grpc::Channel and the generated stub). The same cases as
// tests/rls/rls_check.py, which asks the sluice-gateway binary from Python.
#include "net/asio.h"  // before any other Asio header

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <csignal>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"
#include "tests/gateway/gateway_support.h"
#include "tests/rls/rls_config.h"
#include "tests/support/child_process.h"
#include "tests/support/ports.h"
#include "tests/support/window_clock.h"
#include "tools/gateway/rls.h"

namespace sluice::gateway::testing {
namespace {

using namespace std::chrono_literals;
using Response = rls::RateLimitResponse;
using Unit = rls::RateLimitResponse::RateLimit::Unit;

using Entries = std::vector<std::pair<std::string, std::string>>;

rls::RateLimitRequest request(std::string domain, const std::vector<Entries>& descriptors,
                              std::uint32_t hits = 0) {
  rls::RateLimitRequest out;
  out.set_domain(std::move(domain));
  out.set_hits_addend(hits);
  for (const Entries& entries : descriptors) {
    auto* descriptor = out.add_descriptors();
    for (const auto& [key, value] : entries) {
      auto* entry = descriptor->add_entries();
      entry->set_key(key);
      entry->set_value(value);
    }
  }
  return out;
}

// The value of a response header, or "<absent>".
std::string header(const Response& r, std::string_view name) {
  for (const auto& h : r.response_headers_to_add()) {
    if (h.key() == name) return h.value();
  }
  return "<absent>";
}

// The seconds left in the current UTC hour, as the peer computes duration_until_reset.
std::int64_t rest_of_hour() {
  const auto now = std::chrono::duration_cast<std::chrono::seconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  return 3600 - now % 3600;
}

struct RlsHarness {
  explicit RlsHarness(RlsOptions options = {}, std::vector<std::string> servers = {},
                      client::FailurePolicy policy = client::FailurePolicy::kOpen)
      : client(connect_client(
            servers.empty() ? std::vector<std::string>{node.address()} : std::move(servers),
            policy)),
        guard(timers.get_executor()),
        timer_thread([this] { timers.run(); }),
        front(*client, box(), metrics, timers, with_policy(options, policy)),
        server(front, timers) {
    server.start("127.0.0.1", 0);
    stub = rls::RateLimitService::NewStub(grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(server.port()), grpc::InsecureChannelCredentials()));
  }
  ~RlsHarness() {
    server.shutdown(1s);
    client.reset();
    guard.reset();
    timer_thread.join();
  }

  // One call; REQUIREs gRPC's OK.
  Response call(const rls::RateLimitRequest& req) {
    Response response;
    const grpc::Status status = call(req, response, 5s);
    INFO("gRPC status " << status.error_code() << ": " << status.error_message());
    REQUIRE(status.ok());
    return response;
  }
  grpc::Status call(const rls::RateLimitRequest& req, Response& response,
                    std::chrono::milliseconds deadline) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + deadline);
    return stub->ShouldRateLimit(&context, req, &response);
  }
  std::string scrape() { return metrics.scrape(ScrapeState{}); }

  client::testing::TestServer node;
  RulesBox rules;
  GatewayMetrics metrics;
  std::unique_ptr<client::Client> client;
  boost::asio::io_context timers;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> guard;
  std::thread timer_thread;
  RlsFront front;
  RlsServer server;
  std::unique_ptr<rls::RateLimitService::Stub> stub;

 private:
  RulesView box() {
    rules.rules = parse_rules(kRlsConfig);
    return rules.view();
  }
  static RlsOptions with_policy(RlsOptions options, client::FailurePolicy policy) {
    options.failure_policy = policy;
    return options;
  }
};

void check_limit(const Response::DescriptorStatus& s, std::uint32_t per_unit, Unit unit,
                 std::string_view name) {
  REQUIRE(s.has_current_limit());
  CHECK(s.current_limit().requests_per_unit() == per_unit);
  CHECK(s.current_limit().unit() == unit);
  CHECK(s.current_limit().name() == name);
}

// A test that checks duration_until_reset (the wall clock's, not the node's) first waits until
// the UTC hour has this long left, so that the hour cannot turn between the front's reading of
// the clock and rest_of_hour()'s.
constexpr auto kHourRoom = 30s;

// The peer's duration_until_reset of an hourly limit: the rest of the UTC hour (a second of
// slack either side for the clock ticking between its computation and ours).
// REQUIRES: the test began with test::wait_for_window_room(1h, kHourRoom).
void check_reset_in_hour(const Response::DescriptorStatus& s) {
  REQUIRE(s.has_duration_until_reset());
  const std::int64_t expected = rest_of_hour();
  CHECK(s.duration_until_reset().seconds() >= expected - 1);
  CHECK(s.duration_until_reset().seconds() <= std::min<std::int64_t>(3600, expected + 1));
  CHECK(s.duration_until_reset().nanos() == 0);
}

TEST_CASE("rls: a nested descriptor is decided by its own limit, then OVER_LIMIT with the reset") {
  test::wait_for_window_room(1h, kHourRoom);
  RlsHarness h;
  const auto login = request("rls_test", {{{"authenticated", "false"}, {"path", "/login"}}});
  for (std::uint32_t i = 1; i <= 3; ++i) {
    INFO("call " << i);
    const Response r = h.call(login);
    CHECK(r.overall_code() == Response::OK);
    REQUIRE(r.statuses_size() == 1);
    CHECK(r.statuses(0).code() == Response::OK);
    check_limit(r.statuses(0), 3, Response::RateLimit::HOUR, "login");
    CHECK(r.statuses(0).limit_remaining() == 3 - i);
    check_reset_in_hour(r.statuses(0));
  }
  const Response over = h.call(login);
  CHECK(over.overall_code() == Response::OVER_LIMIT);
  REQUIRE(over.statuses_size() == 1);
  CHECK(over.statuses(0).code() == Response::OVER_LIMIT);
  check_limit(over.statuses(0), 3, Response::RateLimit::HOUR, "login");
  CHECK(over.statuses(0).limit_remaining() == 0);
  check_reset_in_hour(over.statuses(0));
  // The draft's fields by default; the legacy trio only when asked for.
  CHECK(header(over, "RateLimit-Policy") == R"("login";q=3;w=3600)");
  CHECK(header(over, "RateLimit").starts_with(R"("login";r=0;t=)"));
  CHECK(std::stoi(header(over, "Retry-After")) >= 1);
  CHECK(header(over, "RateLimit-Limit") == "<absent>");
  // The parent alone (authenticated=false) has no limit of its own.
  const Response parent = h.call(request("rls_test", {{{"authenticated", "false"}}}));
  CHECK(parent.overall_code() == Response::OK);
  REQUIRE(parent.statuses_size() == 1);
  CHECK_FALSE(parent.statuses(0).has_current_limit());
  CHECK(h.scrape().find(
            R"(sluice_gateway_rls_requests_total{code="OVER_LIMIT",domain="rls_test"} 1)") !=
        std::string::npos);
}

TEST_CASE("rls: a key-only entry counts each of its values apart") {
  RlsHarness h;
  const auto from = [](std::string address) {
    return request("rls_test", {{{"remote_address", std::move(address)}}});
  };
  CHECK(h.call(from("10.0.0.1")).statuses(0).limit_remaining() == 1);
  CHECK(h.call(from("10.0.0.1")).statuses(0).limit_remaining() == 0);
  CHECK(h.call(from("10.0.0.1")).overall_code() == Response::OVER_LIMIT);
  const Response other = h.call(from("10.0.0.2"));
  CHECK(other.overall_code() == Response::OK);
  CHECK(other.statuses(0).limit_remaining() == 1);
  check_limit(other.statuses(0), 2, Response::RateLimit::HOUR, "");
}

TEST_CASE("rls: unlimited answers OK without current_limit and the largest remaining") {
  RlsHarness h;
  const auto health = request("rls_test", {{{"authenticated", "false"}, {"path", "/healthz"}}});
  for (int i = 0; i < 20; ++i) {
    const Response r = h.call(health);
    CHECK(r.overall_code() == Response::OK);
    REQUIRE(r.statuses_size() == 1);
    CHECK_FALSE(r.statuses(0).has_current_limit());
    CHECK(r.statuses(0).limit_remaining() == std::numeric_limits<std::uint32_t>::max());
  }
}

TEST_CASE("rls: shadow_mode answers OK and counts each would-be denial in the metrics") {
  RlsHarness h;
  const auto bulk = request("rls_test", {{{"plan", "bulk"}}});
  for (int i = 0; i < 3; ++i) {
    const Response r = h.call(bulk);
    CHECK(r.overall_code() == Response::OK);
    REQUIRE(r.statuses_size() == 1);
    CHECK(r.statuses(0).code() == Response::OK);
    check_limit(r.statuses(0), 1, Response::RateLimit::HOUR, "bulk_shadow");
  }
  const std::string text = h.scrape();
  INFO(text);
  CHECK(text.find(R"(sluice_gateway_shadow_denials_total{policy="bulk_shadow"} 2)") !=
        std::string::npos);
  CHECK(text.find(R"(sluice_gateway_rls_requests_total{code="OK",domain="rls_test"} 3)") !=
        std::string::npos);
}

TEST_CASE("rls: a matched limit that replaces another leaves the other unapplied") {
  RlsHarness h;
  const auto both = request("rls_test", {{{"tenant", "t1"}}, {{"premium", "p1"}}});
  for (std::uint32_t i = 1; i <= 3; ++i) {
    INFO("call " << i);
    const Response r = h.call(both);
    CHECK(r.overall_code() == Response::OK);
    REQUIRE(r.statuses_size() == 2);
    CHECK(r.statuses(0).code() == Response::OK);
    CHECK_FALSE(r.statuses(0).has_current_limit());  // per_tenant (1 an hour) replaced
    check_limit(r.statuses(1), 5, Response::RateLimit::HOUR, "premium");
    CHECK(r.statuses(1).limit_remaining() == 5 - i);
  }
  // Without the premium descriptor, per_tenant applies.
  const auto alone = request("rls_test", {{{"tenant", "t2"}}});
  CHECK(h.call(alone).overall_code() == Response::OK);
  CHECK(h.call(alone).overall_code() == Response::OVER_LIMIT);
}

TEST_CASE("rls: hits_addend of the request and of a descriptor") {
  RlsHarness h;
  const auto batch = [](std::uint32_t hits) {
    return request("rls_test", {{{"batch", "b1"}}}, hits);
  };
  CHECK(h.call(batch(0)).statuses(0).limit_remaining() == 9);  // 0 means 1
  CHECK(h.call(batch(4)).statuses(0).limit_remaining() == 5);
  // A descriptor's own hits_addend wins over the request's; 0 there asks without counting.
  auto own = batch(1);
  own.mutable_descriptors(0)->mutable_hits_addend()->set_value(0);
  const Response peeked = h.call(own);
  CHECK(peeked.overall_code() == Response::OK);
  CHECK(peeked.statuses(0).limit_remaining() == 5);
  own.mutable_descriptors(0)->mutable_hits_addend()->set_value(5);
  CHECK(h.call(own).statuses(0).limit_remaining() == 0);
  const Response over = h.call(batch(1));
  CHECK(over.overall_code() == Response::OVER_LIMIT);
  CHECK(over.statuses(0).limit_remaining() == 0);
}

TEST_CASE("rls: one status per descriptor in request order, OVER_LIMIT only where it is") {
  RlsHarness h;
  REQUIRE(h.call(request("rls_test", {{{"remote_address", "10.9.9.9"}}})).overall_code() ==
          Response::OK);
  REQUIRE(h.call(request("rls_test", {{{"remote_address", "10.9.9.9"}}})).overall_code() ==
          Response::OK);
  const Response r =
      h.call(request("rls_test", {{{"batch", "order"}},
                                  {{"nothing", "matches"}},
                                  {{"remote_address", "10.9.9.9"}},
                                  {{"authenticated", "false"}, {"path", "/login"}}}));
  CHECK(r.overall_code() == Response::OVER_LIMIT);
  REQUIRE(r.statuses_size() == 4);
  CHECK(r.statuses(0).code() == Response::OK);
  check_limit(r.statuses(0), 10, Response::RateLimit::HOUR, "");
  CHECK(r.statuses(0).limit_remaining() == 9);
  CHECK(r.statuses(1).code() == Response::OK);
  CHECK_FALSE(r.statuses(1).has_current_limit());
  CHECK_FALSE(r.statuses(1).has_duration_until_reset());
  CHECK(r.statuses(2).code() == Response::OVER_LIMIT);
  check_limit(r.statuses(2), 2, Response::RateLimit::HOUR, "");
  CHECK(r.statuses(3).code() == Response::OK);
  check_limit(r.statuses(3), 3, Response::RateLimit::HOUR, "login");
  CHECK(r.statuses(3).limit_remaining() == 2);
}

TEST_CASE("rls: an unknown domain answers OK for every descriptor without a limit") {
  RlsHarness h;
  const Response r = h.call(request("no_such_domain", {{{"remote_address", "10.0.0.1"}}, {}}));
  CHECK(r.overall_code() == Response::OK);
  REQUIRE(r.statuses_size() == 2);
  for (const auto& s : r.statuses()) {
    CHECK(s.code() == Response::OK);
    CHECK_FALSE(s.has_current_limit());
  }
  CHECK(h.scrape().find(R"(sluice_gateway_rls_requests_total{code="OK",domain="unknown"} 1)") !=
        std::string::npos);
}

TEST_CASE("rls: a descriptor's own limit override is counted under its entries") {
  RlsHarness h;
  auto own = request("rls_test", {{{"route", "/upload"}}});
  own.mutable_descriptors(0)->mutable_limit()->set_requests_per_unit(2);
  own.mutable_descriptors(0)->mutable_limit()->set_unit(envoy::type::v3::MINUTE);
  const Response first = h.call(own);
  check_limit(first.statuses(0), 2, Response::RateLimit::MINUTE, "");
  CHECK(first.statuses(0).limit_remaining() == 1);
  CHECK(h.call(own).overall_code() == Response::OK);
  CHECK(h.call(own).overall_code() == Response::OVER_LIMIT);
}

TEST_CASE("rls: malformed requests are refused with INVALID_ARGUMENT and a message") {
  RlsOptions options;
  options.max_descriptors = 2;
  options.max_entries = 2;
  RlsHarness h(options);
  const auto refused = [&](const rls::RateLimitRequest& req) {
    Response response;
    const grpc::Status status = h.call(req, response, 5s);
    CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    return status.error_message();
  };
  CHECK(refused(request("", {{{"a", "b"}}})) == "rate limit domain must not be empty");
  CHECK(refused(request("rls_test", {})) == "rate limit descriptor list must not be empty");
  CHECK(refused(request("rls_test", {{{"a", "1"}}, {{"a", "2"}}, {{"a", "3"}}})) ==
        "more than 2 descriptors in one request");
  CHECK(refused(request("rls_test", {{{"a", "1"}, {"b", "2"}, {"c", "3"}}})) ==
        "descriptor 0: more than 2 entries");
  auto no_unit = request("rls_test", {{{"a", "1"}}});
  no_unit.mutable_descriptors(0)->mutable_limit()->set_requests_per_unit(5);
  CHECK(refused(no_unit) == "descriptor 0: limit override without a unit");
  // The front carries on.
  CHECK(h.call(request("rls_test", {{{"batch", "after"}}})).overall_code() == Response::OK);
  CHECK(h.scrape().find(
            R"(sluice_gateway_rls_requests_total{code="INVALID_ARGUMENT",domain=""} 5)") !=
        std::string::npos);
}

TEST_CASE("rls: the legacy header trio when asked for, beside the draft's fields") {
  RlsOptions options;
  options.legacy_headers = true;
  RlsHarness h(options);
  const Response r = h.call(request("rls_test", {{{"batch", "headers"}}}));
  CHECK(header(r, "RateLimit-Limit") == "10");
  CHECK(header(r, "RateLimit-Remaining") == "9");
  CHECK(header(r, "RateLimit-Reset") != "<absent>");
  CHECK(header(r, "RateLimit-Policy") == R"("rls_test.batch";q=10;w=3600)");
}

// A real sluiced that the test stops with SIGSTOP: its connections stay up and nothing comes
// back, so only the front's deadline can answer (the client's own timeout is 2 s).
struct SilentNode {
  SilentNode()
      : port(test::free_port_block(2)),
        process(SLUICED_PATH, {"--bind", "127.0.0.1", "--port", std::to_string(port), "--shards",
                               "1", "--max-memory", "64MiB"}) {
    REQUIRE(test::listen_port(process.first_line(10s)) == port);
  }
  ~SilentNode() { process.send_signal(SIGCONT); }  // so that it can stop
  std::string address() const { return "127.0.0.1:" + std::to_string(port); }
  std::uint16_t port;
  test::Child process;
};

// The first call goes through (the client connects), then the route goes silent.
void go_silent(RlsHarness& h, SilentNode& silent) {
  REQUIRE(h.call(request("rls_test", {{{"batch", "warm"}}})).statuses(0).has_current_limit());
  REQUIRE(silent.process.freeze(5s));
}

TEST_CASE("rls: a silent cluster is answered by each limit's failure policy within the deadline") {
  test::wait_for_window_room(1h, kHourRoom);
  SilentNode silent;
  RlsOptions options;
  options.deadline = 50ms;
  RlsHarness h(options, {silent.address()});
  go_silent(h, silent);
  const auto started = std::chrono::steady_clock::now();
  // `batch` follows the gateway's policy (open): as if no limit applied; `card` fails closed.
  const Response r = h.call(request("rls_test", {{{"batch", "b"}}, {{"card", "c"}}}));
  const auto took = std::chrono::steady_clock::now() - started;
  CHECK(took < 1500ms);  // the client's own timeout is 2 s: the front's deadline answered
  CHECK(r.overall_code() == Response::OVER_LIMIT);
  REQUIRE(r.statuses_size() == 2);
  CHECK(r.statuses(0).code() == Response::OK);
  CHECK_FALSE(r.statuses(0).has_current_limit());
  CHECK(r.statuses(1).code() == Response::OVER_LIMIT);
  check_limit(r.statuses(1), 1, Response::RateLimit::HOUR, "");
  check_reset_in_hour(r.statuses(1));
  const std::string text = h.scrape();
  INFO(text);
  CHECK(text.find(R"(outcome="error",policy="rls_test.batch",source="deadline"} 1)") !=
        std::string::npos);
  CHECK(text.find(R"(outcome="error",policy="rls_test.card",source="deadline"} 1)") !=
        std::string::npos);
}

TEST_CASE("rls: a caller's deadline shorter than the front's is answered before it passes") {
  SilentNode silent;
  RlsOptions options;
  options.deadline = 1000ms;      // past the caller's: the caller's deadline answers
  options.caller_margin = 300ms;  // by default 2 ms: wide here, for a loaded or sanitized run
  RlsHarness h(options, {silent.address()});
  go_silent(h, silent);
  Response response;
  const auto started = std::chrono::steady_clock::now();
  const grpc::Status status = h.call(request("rls_test", {{{"batch", "b"}}}), response, 600ms);
  const auto took = std::chrono::steady_clock::now() - started;
  INFO("gRPC status " << status.error_code() << ": " << status.error_message());
  REQUIRE(status.ok());
  CHECK(took >= 250ms);  // the caller's deadline less the margin, not sooner
  CHECK(response.overall_code() == Response::OK);
  CHECK_FALSE(response.statuses(0).has_current_limit());
}

}  // namespace
}  // namespace sluice::gateway::testing
