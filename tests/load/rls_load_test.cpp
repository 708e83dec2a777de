// The rls backend: what it puts in a ShouldRateLimit call and how it reads the answer, then the
// load driver against a real sluiced and a real sluice-gateway --grpc-listen, both started here
// on loopback ports. Every run is bounded by a request count or a short duration.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "tests/support/child_process.h"
#include "tests/support/ports.h"
#include "tests/support/window_clock.h"
#include "tools/load/load_driver.h"
#include "tools/load/rls_request.h"

namespace sluice::load {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Outcome = RlsAnswer::Outcome;
using Response = rls::RateLimitResponse;

// ---- the messages ---------------------------------------------------------------------------

TEST_CASE("rls request: one entry per descriptor named d0.. with the key as its value", "[rls]") {
  rls::RateLimitRequest request;
  prepare_rls_request(request, "api", 3, 2);
  set_rls_request_key(request, "k:0042");
  CHECK(request.domain() == "api");
  CHECK(request.hits_addend() == 2);
  REQUIRE(request.descriptors_size() == 3);
  for (int i = 0; i < 3; ++i) {
    const auto& descriptor = request.descriptors(i);
    REQUIRE(descriptor.entries_size() == 1);
    CHECK(descriptor.entries(0).key() == "d" + std::to_string(i));
    CHECK(descriptor.entries(0).value() == "k:0042");
    CHECK_FALSE(descriptor.has_limit());
    CHECK_FALSE(descriptor.has_hits_addend());
  }
  // The next call's key replaces the value, and the message goes on the wire as Envoy's.
  set_rls_request_key(request, "k:7");
  rls::RateLimitRequest parsed;
  REQUIRE(parsed.ParseFromString(request.SerializeAsString()));
  CHECK(parsed.descriptors(2).entries(0).value() == "k:7");
  CHECK(parsed.descriptors(2).entries(0).key() == "d2");

  prepare_rls_request(request, "other", 1, 1);  // prepared again: nothing of the old call left
  CHECK(request.domain() == "other");
  CHECK(request.descriptors_size() == 1);
  CHECK(rls_descriptor_key(7) == "d7");
}

Response response(Response::Code overall, std::initializer_list<Response::Code> codes) {
  Response r;
  r.set_overall_code(overall);
  for (const Response::Code code : codes) r.add_statuses()->set_code(code);
  return r;
}

TEST_CASE("rls answer: OK is allowed and OVER_LIMIT denied when the statuses agree", "[rls]") {
  CHECK(read_rls_response(response(Response::OK, {Response::OK, Response::OK, Response::OK}), 3)
            .outcome == Outcome::kAllowed);
  CHECK(read_rls_response(
            response(Response::OVER_LIMIT, {Response::OK, Response::OVER_LIMIT, Response::OK}), 3)
            .outcome == Outcome::kDenied);
  // A limit in shadow mode may say OVER_LIMIT under an overall OK: Envoy lets the request go.
  CHECK(read_rls_response(response(Response::OK, {Response::OVER_LIMIT}), 1).outcome ==
        Outcome::kAllowed);
}

TEST_CASE("rls answer: a response that does not fit the call is an error", "[rls]") {
  const auto error = [](const Response& r, unsigned descriptors) {
    const RlsAnswer answer = read_rls_response(r, descriptors);
    CHECK(answer.outcome == Outcome::kError);
    return std::string(answer.error);
  };
  CHECK(error(response(Response::OK, {Response::OK}), 3) ==
        "a response whose statuses do not match the request's descriptors");
  CHECK(error(response(Response::OVER_LIMIT, {Response::OK}), 1) ==
        "overall_code OVER_LIMIT with no descriptor OVER_LIMIT");
  CHECK(error(response(Response::UNKNOWN, {Response::OK}), 1) ==
        "overall_code neither OK nor OVER_LIMIT");
  CHECK(error(response(Response::OK, {Response::UNKNOWN}), 1) ==
        "a descriptor status that is neither OK nor OVER_LIMIT");
  CHECK(grpc_code_name(14) == "UNAVAILABLE");
  CHECK(grpc_code_name(3) == "INVALID_ARGUMENT");
  CHECK(grpc_code_name(17) == "UNKNOWN_CODE");
  CHECK(grpc_code_name(-1) == "UNKNOWN_CODE");
}

TEST_CASE("rls options that do not fit the backend are refused", "[rls]") {
  LoadOptions o;
  o.backend = BackendKind::kRls;
  o.requests = 10;
  o.descriptors = 3;
  CHECK(validate(o).empty());
  const auto refused = [&](auto change, std::string_view why) {
    LoadOptions bad = o;
    change(bad);
    INFO(why);
    CHECK(validate(bad) == why);
  };
  refused([](LoadOptions& b) { b.batch = 2; },
          "--batch 2: --backend rls sends one ShouldRateLimit call per decision (--batch 1; "
          "--descriptors sets the call's size, --depth the calls in flight)");
  refused([](LoadOptions& b) { b.op = Operation::kPing; },
          "--op ping and incr are not for --backend rls");
  refused([](LoadOptions& b) { b.rls_domain = ""; },
          "--rls-domain : expected a domain name (visible ASCII)");
  refused([](LoadOptions& b) { b.key_prefix = "a b"; },
          "--key-prefix a b: a key goes in a descriptor: visible ASCII only");
  refused([](LoadOptions& b) { b.descriptors = 0; }, "--descriptors 0: must be 1..8");
  refused([](LoadOptions& b) { b.http_path = "/x"; },
          "--path, --key-header and --deny-status are for --backend http");
}

// ---- against sluiced and sluice-gateway ----------------------------------------------------

constexpr std::uint32_t kLimit = 5;  // per hour, per descriptor and key
constexpr std::uint64_t kKeys = 20;

// A throwaway directory with two envoyproxy/ratelimit configs: domain "bench", descriptors d0,
// d1, d2 at kLimit per hour each (one counter per value), and domain "open", d0 at a million
// per second.
struct Configs {
  Configs() : dir(fs::temp_directory_path() / ("sluice-rls-load-" + std::to_string(::getpid()))) {
    fs::remove_all(dir);
    fs::create_directories(dir / "rules");
    std::ofstream bench(dir / "rules" / "bench.yaml");
    bench << "domain: bench\ndescriptors:\n";
    for (int i = 0; i < 3; ++i) {
      bench << "  - key: d" << i << "\n    rate_limit:\n      unit: hour\n"
            << "      requests_per_unit: " << kLimit << "\n";
    }
    std::ofstream(dir / "rules" / "open.yaml")
        << "domain: open\ndescriptors:\n  - key: d0\n    rate_limit:\n      unit: second\n"
           "      requests_per_unit: 1000000\n";
  }
  ~Configs() { fs::remove_all(dir); }
  fs::path dir;
};

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// sluiced with one shard (so the three counters of a call are decided in one frame, in the same
// order for every call), and a gateway serving the RLS front in front of it. The gateway waits
// up to 5 s for the cluster, so that a slow test machine never hands a call to the failure
// policy, which is closed anyway: a fallback could only deny.
class Stack {
 public:
  Stack()
      : sluiced_(SLUICED_PATH,
                 {"--bind", "127.0.0.1", "--port", "0", "--shards", "1", "--max-memory", "64MiB"}) {
    const std::string line = sluiced_.first_line(10s);
    INFO("sluiced's start-up line: " << line);
    const std::uint16_t node = test::listen_port(line);
    REQUIRE(node != 0);
    const std::uint16_t ports = test::free_port_pair();
    grpc_ = "127.0.0.1:" + std::to_string(ports + 1);
    gateway_.emplace(
        GATEWAY_PATH,
        std::vector<std::string>{"--listen", "127.0.0.1:" + std::to_string(ports), "--grpc-listen",
                                 grpc_, "--servers", "127.0.0.1:" + std::to_string(node), "--rules",
                                 (configs_.dir / "rules").string(), "--failure-policy", "closed",
                                 "--rls-deadline", "5s", "--rls-max-descriptors", "3"},
        log().string());
    // Ready when it says it serves the front: the line comes once the gRPC server listens.
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (read_text(log()).find("serving Envoy's Rate Limit Service") == std::string::npos) {
      INFO("gateway log: " << read_text(log()));
      REQUIRE(std::chrono::steady_clock::now() < deadline);
      REQUIRE_FALSE(gateway_->wait_exit(20ms).has_value());
    }
  }

  const std::string& grpc() const { return grpc_; }
  fs::path log() const { return configs_.dir / "gateway.log"; }

 private:
  Configs configs_;
  test::Child sluiced_;
  std::optional<test::Child> gateway_;  // stopped before sluiced
  std::string grpc_;
};

LoadOptions rls_run(const std::string& target) {
  LoadOptions o;
  o.backend = BackendKind::kRls;
  o.servers = {target};
  o.rls_domain = "bench";
  o.descriptors = 3;
  o.connections = 2;
  o.depth = 4;
  o.keys = kKeys;
  o.requests = 600;
  o.duration = 30s;  // the request bound ends it long before
  o.rule = Rule{Algorithm::kFixedWindow, kLimit, 3'600'000, 0};
  o.audit = true;
  o.connect_timeout = 5s;
  o.drain_timeout = 10s;
  return o;
}

// The counters of `bench` are sluiced's fixed windows of an hour on the UTC clock (the config's
// unit): a test that counts them first waits until the hour has room for the test, and checks
// at its end that the hour did not turn (every key would have got its limit again).
constexpr auto kHourRoom = 60s;

std::chrono::system_clock::time_point wait_for_room_in_hour() {
  return test::wait_for_window_room(1h, kHourRoom);
}

void check_within(std::chrono::system_clock::time_point hour_end) {
  INFO("the test outlasted its " << kHourRoom.count() << " s and the hour turned");
  CHECK(std::chrono::system_clock::now() < hour_end);
}

TEST_CASE(
    "rls: a closed loop with 3 descriptors admits exactly the limit per key with or without busy "
    "polling",
    "[rls]") {
  test::require_binary(SLUICED_PATH);
  test::require_binary(GATEWAY_PATH);
  // Replies taken by the completion thread, or (--busy-poll) by the worker's polling loop.
  const bool busy_poll = GENERATE(false, true);
  INFO("busy_poll " << busy_poll);
  Stack stack;
  LoadOptions o = rls_run(stack.grpc());
  o.busy_poll = busy_poll;
  const auto hour_end = wait_for_room_in_hour();
  const auto result = run_load(o);
  REQUIRE(result.ok());
  const LoadReport& r = *result;
  INFO("first error: " << r.first_error);
  CHECK(r.sent == 600);
  CHECK(r.errors == 0);
  CHECK(r.allowed + r.denied == 600);
  CHECK(r.connections == 2);
  CHECK(r.in_flight_max == 2 * 4);
  REQUIRE(r.audit.has_value());
  CHECK(r.audit->max_overshoot_ratio == 0);
  CHECK(r.audit->admitted_events == r.allowed);
  // Every key met its limit within one window of the hour: exactly kLimit each.
  CHECK(r.allowed == kKeys * kLimit);
  CHECK(r.audit->keys_checked == kKeys);

  // The same keys again: their windows are spent, every call is OVER_LIMIT.
  const auto again = run_load(o);
  REQUIRE(again.ok());
  CHECK(again->allowed == 0);
  CHECK(again->denied == 600);
  check_within(hour_end);
  const std::string json = report_json(o, r);
  for (const char* field :
       {"\"backend\":\"rls\"", "\"rls_domain\":\"bench\"", "\"descriptors\":3", "\"errors\":0"}) {
    CHECK(json.find(field) != std::string::npos);
  }
  CHECK(report_text(o, r).starts_with(
      "rls ShouldRateLimit domain bench, 3 descriptors (audit rule fixed_window) at "));
}

TEST_CASE("rls: an open loop sends or counts behind each scheduled call and allows every call sent",
          "[rls]") {
  Stack stack;
  LoadOptions o = rls_run(stack.grpc());
  o.rls_domain = "open";
  o.descriptors = 1;
  o.keys = 1000;
  o.requests = 0;
  o.rate = 1000;
  o.duration = 500ms;
  o.rule = Rule{Algorithm::kFixedWindow, 1'000'000, 1000, 0};
  const auto result = run_load(o);
  REQUIRE(result.ok());
  INFO("first error: " << result->first_error);
  CHECK(result->intended == 500);  // 1000/s for 0.5 s
  // Each scheduled call was sent or is counted behind; how many were sent in time is the
  // machine's speed (a sanitized build on a busy machine sent 257), not asserted here.
  CHECK(result->sent + result->behind == result->intended);
  CHECK(result->sent > 0);
  CHECK(result->errors == 0);
  CHECK(result->denied == 0);
  CHECK(result->allowed == result->sent);
  CHECK(result->latency.count() == result->sent);
}

TEST_CASE("rls: a call the service refuses is an error with its gRPC status and the run goes on",
          "[rls]") {
  Stack stack;
  LoadOptions o = rls_run(stack.grpc());
  o.descriptors = 4;  // the gateway takes at most 3 (--rls-max-descriptors)
  o.keys = 1;
  o.requests = 50;
  o.audit = false;
  const auto hour_end = wait_for_room_in_hour();
  const auto result = run_load(o);
  REQUIRE(result.ok());
  CHECK(result->sent == 50);
  CHECK(result->errors == 50);
  CHECK(result->allowed == 0);
  CHECK(result->first_error.starts_with("gRPC INVALID_ARGUMENT: "));
  // Nothing was counted: the one key still has its whole limit.
  o.descriptors = 3;
  o.requests = kLimit + 1;
  const auto after = run_load(o);
  REQUIRE(after.ok());
  CHECK(after->errors == 0);
  CHECK(after->allowed == kLimit);
  CHECK(after->denied == 1);
  check_within(hour_end);
}

TEST_CASE("rls: nothing listening fails the run before it starts", "[rls]") {
  const std::uint16_t port = test::free_port_pair();
  LoadOptions o = rls_run("127.0.0.1:" + std::to_string(port));
  o.connect_timeout = 300ms;
  const auto result = run_load(o);
  REQUIRE_FALSE(result.ok());
  CHECK_THAT(result.status().to_string(),
             Catch::Contains("connect to 127.0.0.1:" + std::to_string(port) + " failed"));
}

}  // namespace
}  // namespace sluice::load
