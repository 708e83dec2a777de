// RlsFront without gRPC (so that ThreadSanitizer, which cannot see into Debian's libgrpc, checks
// it): the cluster's answer on the client's I/O thread races the deadline on the timers' thread,
// and whichever comes first answers, once. tests/rls/ asks the front over real gRPC.
#include "net/asio.h"  // before any other Asio header

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include "tests/gateway/gateway_support.h"
#include "tools/gateway/rls.h"

namespace sluice::gateway::testing {
namespace {

using namespace std::chrono_literals;
using Response = rls::RateLimitResponse;

TEST_CASE("rls front: the cluster's answer and the deadline race, and each call is answered once") {
  client::testing::TestServer node;
  RulesBox rules;
  rules.rules = parse_rules(R"(domain: race
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 1000000}
)");
  GatewayMetrics metrics;
  auto client = connect_client({node.address()}, client::FailurePolicy::kOpen);
  boost::asio::io_context timers;
  auto guard = boost::asio::make_work_guard(timers);
  std::thread timer_thread([&] { timers.run(); });
  RlsOptions options;
  options.caller_margin = 0ms;
  options.deadline_tick = 20us;  // the deadlines' own precision, below a round trip
  RlsFront front(*client, rules.view(), metrics, timers, options);

  constexpr int kCalls = 300;
  rls::RateLimitRequest request;
  request.set_domain("race");
  auto* entry = request.add_descriptors()->add_entries();
  entry->set_key("k");
  entry->set_value("v");
  std::vector<Response> responses(kCalls);
  std::atomic<int> answers{0};
  int by_cluster = 0;
  int by_deadline = 0;
  for (int i = 0; i < kCalls; ++i) {
    std::promise<RlsStatus> done;
    auto answered = done.get_future();
    // A caller's deadline from 0 to 150 us away, around a round trip to the node: either may
    // come first.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(i % 151);
    front.decide(
        request, responses[static_cast<std::size_t>(i)],
        [&](RlsStatus status) {
          answers.fetch_add(1);
          done.set_value(std::move(status));
        },
        deadline);
    REQUIRE(answered.wait_for(10s) == std::future_status::ready);
    REQUIRE(answered.get().ok());
    const Response& r = responses[static_cast<std::size_t>(i)];
    REQUIRE(r.statuses_size() == 1);
    CHECK(r.overall_code() == Response::OK);
    // The cluster's answer carries the limit; the deadline's (failing open) does not.
    (r.statuses(0).has_current_limit() ? by_cluster : by_deadline) += 1;
  }
  // Every callback that could still come has run: the client's I/O thread is joined, and the
  // timers' thread has run every deadline.
  client.reset();
  guard.reset();
  timer_thread.join();
  CHECK(answers.load() == kCalls);
  CHECK(by_cluster + by_deadline == kCalls);
  // Both paths were taken (the nearest deadlines pass before any reply can come).
  INFO("by the cluster " << by_cluster << ", by the deadline " << by_deadline);
  CHECK(by_deadline > 0);
}

}  // namespace
}  // namespace sluice::gateway::testing
