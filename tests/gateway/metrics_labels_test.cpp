// GatewayMetrics on its own: each count under the labels it was given, the same series found
// again on later counts, the bounds on policy and domain labels at their edges (kMaxPolicyLabels
// names: the names seen first keep their own series, later ones are counted as "other";
// kMaxLabelBytes: a longer name is "other"), and counts from several threads during scrapes.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/prometheus_scrape.h"
#include "tools/gateway/gateway_metrics.h"

namespace sluice::gateway {
namespace {

using namespace std::chrono_literals;

std::map<std::string, double> samples(GatewayMetrics& metrics) {
  return test::parse_samples(metrics.scrape(ScrapeState{}));
}

std::string decisions(const std::string& policy, const std::string& outcome,
                      const std::string& source) {
  return "sluice_gateway_decisions_total{outcome=\"" + outcome + "\",policy=\"" + policy +
         "\",source=\"" + source + "\"}";
}

TEST_CASE("gateway metrics: counts land under their labels, the same series each time") {
  GatewayMetrics metrics;
  for (int i = 0; i < 3; ++i) metrics.decided("a", "allowed", "cluster");
  metrics.decided("a", "denied", "cluster");
  metrics.decided("b", "allowed", "lease");
  metrics.decided("a", "error", "");
  metrics.shadow_denied("a");
  metrics.answered("check", true, 50us);
  metrics.answered("check", false, 2ms);
  metrics.rls_answered("d", "OK", 80us);
  metrics.rls_answered("d", "OVER_LIMIT", 90us);
  metrics.rls_answered("", "INVALID_ARGUMENT", 0ns);
  const auto s = samples(metrics);
  CHECK(s.at(decisions("a", "allowed", "cluster")) == 3);
  CHECK(s.at(decisions("a", "denied", "cluster")) == 1);
  CHECK(s.at(decisions("b", "allowed", "lease")) == 1);
  CHECK(s.at(decisions("a", "error", "")) == 1);
  CHECK(s.at("sluice_gateway_shadow_denials_total{policy=\"a\"}") == 1);
  CHECK(s.at("sluice_gateway_requests_total{endpoint=\"check\",outcome=\"allowed\"}") == 1);
  CHECK(s.at("sluice_gateway_requests_total{endpoint=\"check\",outcome=\"denied\"}") == 1);
  CHECK(s.at("sluice_gateway_requests_total{endpoint=\"rls\",outcome=\"allowed\"}") == 1);
  CHECK(s.at("sluice_gateway_requests_total{endpoint=\"rls\",outcome=\"denied\"}") == 1);
  CHECK(s.at("sluice_gateway_decision_duration_seconds_count{endpoint=\"check\"}") == 2);
  CHECK(s.at("sluice_gateway_decision_duration_seconds_bucket{endpoint=\"check\",le=\"0.0001\"}") ==
        1);
  CHECK(s.at("sluice_gateway_decision_duration_seconds_count{endpoint=\"rls\"}") == 2);
  CHECK(s.at("sluice_gateway_rls_requests_total{code=\"OK\",domain=\"d\"}") == 1);
  CHECK(s.at("sluice_gateway_rls_requests_total{code=\"OVER_LIMIT\",domain=\"d\"}") == 1);
  CHECK(s.at("sluice_gateway_rls_requests_total{code=\"INVALID_ARGUMENT\",domain=\"\"}") == 1);
}

TEST_CASE("gateway metrics: past kMaxPolicyLabels names, policies and domains count as other") {
  GatewayMetrics metrics;
  for (std::size_t i = 0; i < kMaxPolicyLabels; ++i) {
    metrics.decided("p" + std::to_string(i), "allowed", "cluster");
    metrics.rls_answered("d" + std::to_string(i), "OK", 1us);
  }
  // One past the bound, and a name seen before, which keeps its series.
  metrics.decided("late", "allowed", "cluster");
  metrics.decided("later", "allowed", "cluster");
  metrics.shadow_denied("late");
  metrics.decided("p0", "allowed", "cluster");
  metrics.rls_answered("late", "OK", 1us);
  metrics.rls_answered("d0", "OK", 1us);
  const auto s = samples(metrics);
  const std::string last = "p" + std::to_string(kMaxPolicyLabels - 1);
  CHECK(s.at(decisions(last, "allowed", "cluster")) == 1);
  CHECK(s.at(decisions("p0", "allowed", "cluster")) == 2);
  CHECK(s.at(decisions("other", "allowed", "cluster")) == 2);
  CHECK(s.count(decisions("late", "allowed", "cluster")) == 0);
  CHECK(s.at("sluice_gateway_shadow_denials_total{policy=\"other\"}") == 1);
  CHECK(s.at("sluice_gateway_rls_requests_total{code=\"OK\",domain=\"d" +
             std::to_string(kMaxPolicyLabels - 1) + "\"}") == 1);
  CHECK(s.at("sluice_gateway_rls_requests_total{code=\"OK\",domain=\"d0\"}") == 2);
  CHECK(s.at("sluice_gateway_rls_requests_total{code=\"OK\",domain=\"other\"}") == 1);
  CHECK(s.count("sluice_gateway_rls_requests_total{code=\"OK\",domain=\"late\"}") == 0);
}

TEST_CASE("gateway metrics: a policy or domain name over kMaxLabelBytes counts as other") {
  GatewayMetrics metrics;
  const std::string longest(kMaxLabelBytes, 'p');
  const std::string over(kMaxLabelBytes + 1, 'p');
  metrics.decided(longest, "allowed", "cluster");
  metrics.decided(over, "allowed", "cluster");
  metrics.rls_answered(std::string(kMaxLabelBytes, 'd'), "OK", 1us);
  metrics.rls_answered(std::string(kMaxLabelBytes + 1, 'd'), "OK", 1us);
  const auto s = samples(metrics);
  CHECK(s.at(decisions(longest, "allowed", "cluster")) == 1);
  CHECK(s.at(decisions("other", "allowed", "cluster")) == 1);
  CHECK(s.count(decisions(over, "allowed", "cluster")) == 0);
  CHECK(s.at("sluice_gateway_rls_requests_total{code=\"OK\",domain=\"" +
             std::string(kMaxLabelBytes, 'd') + "\"}") == 1);
  CHECK(s.at("sluice_gateway_rls_requests_total{code=\"OK\",domain=\"other\"}") == 1);
}

TEST_CASE("gateway metrics: counts from four threads while another scrapes, none lost") {
  GatewayMetrics metrics;
  constexpr int kThreads = 4;
  constexpr int kEach = 2000;
  std::atomic<bool> done{false};
  std::atomic<int> scrapes{0};
  std::atomic<int> empty_scrapes{0};
  std::thread scraper([&] {  // no Catch2 assertion off the test's thread: counted, checked after
    do {
      if (metrics.scrape(ScrapeState{}).empty()) ++empty_scrapes;
      ++scrapes;
    } while (!done.load());
  });
  std::vector<std::thread> counters;
  for (int t = 0; t < kThreads; ++t) {
    counters.emplace_back([&metrics, t] {
      const std::string own = "policy-" + std::to_string(t);
      for (int i = 0; i < kEach; ++i) {
        metrics.decided(own, "allowed", "cluster");
        metrics.decided("shared", i % 2 == 0 ? "allowed" : "denied", "cluster");
        metrics.rls_answered("d", "OK", 10us);
      }
    });
  }
  for (auto& t : counters) t.join();
  done = true;
  scraper.join();
  CHECK(scrapes.load() >= 1);
  CHECK(empty_scrapes.load() == 0);
  const auto s = samples(metrics);
  for (int t = 0; t < kThreads; ++t) {
    CHECK(s.at(decisions("policy-" + std::to_string(t), "allowed", "cluster")) == kEach);
  }
  CHECK(s.at(decisions("shared", "allowed", "cluster")) == kThreads * kEach / 2);
  CHECK(s.at(decisions("shared", "denied", "cluster")) == kThreads * kEach / 2);
  CHECK(s.at("sluice_gateway_rls_requests_total{code=\"OK\",domain=\"d\"}") == kThreads * kEach);
  CHECK(s.at("sluice_gateway_decision_duration_seconds_count{endpoint=\"rls\"}") ==
        kThreads * kEach);
}

}  // namespace
}  // namespace sluice::gateway
