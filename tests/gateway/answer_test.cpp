#include "tools/gateway/answer.h"

#include <catch2/catch.hpp>
#include <string>

#include "core/verdict.h"

namespace sluice::gateway {
namespace {

client::Decision allowed(std::uint32_t limit, std::uint32_t remaining, std::uint64_t window_ms,
                         std::uint64_t reset_ms) {
  client::Decision d;
  d.allowed = true;
  d.limit = limit;
  d.remaining = remaining;
  d.reset_after_ms = reset_ms;
  d.policy_quota = limit;
  d.policy_window_ms = window_ms;
  return d;
}

client::Decision denied(std::uint32_t limit, std::uint64_t window_ms, std::uint64_t retry_ms) {
  client::Decision d = allowed(limit, 0, window_ms, retry_ms);
  d.allowed = false;
  d.retry_after_ms = retry_ms;
  return d;
}

std::string field(const Answer& answer, std::string_view name) {
  for (const auto& f : answer.headers) {
    if (f.name == name) return f.value;
  }
  return "<absent>";
}

constexpr std::uint64_t kNow = 1'700'000'000'000;

TEST_CASE("one allowed limit gives its own fields and X-Sluice-Decision allowed") {
  const LimitOutcome outcomes[] = {
      {.policy = "per_key", .decision = allowed(5, 4, 60'000, 12'000)}};
  const Answer a = combine(outcomes, kNow);
  CHECK(a.allowed);
  CHECK(a.status == 200);
  CHECK(a.deciding == 0u);
  CHECK(field(a, "RateLimit-Limit") == "5");
  CHECK(field(a, "RateLimit-Remaining") == "4");
  CHECK(field(a, "RateLimit-Reset") == "12");
  CHECK(field(a, "RateLimit-Policy") == R"("per_key";q=5;w=60)");
  CHECK(field(a, "RateLimit") == R"("per_key";r=4;t=12)");
  CHECK(field(a, "X-RateLimit-Reset") == "1700000012");
  CHECK(field(a, "Retry-After") == "<absent>");
  CHECK(a.headers.back().name == "X-Sluice-Decision");
  CHECK(a.headers.back().value == "allowed");
}

TEST_CASE("when all allow the fewest remaining decides and the policy lists every limit") {
  const LimitOutcome outcomes[] = {
      {.policy = "second", .decision = allowed(10, 9, 1'000, 100)},
      {.policy = "hour", .decision = allowed(1000, 3, 3'600'000, 3'000'000)},
      {.policy = "ip", .decision = allowed(100, 50, 60'000, 1'000)},
  };
  const Answer a = combine(outcomes, kNow);
  CHECK(a.allowed);
  CHECK(a.deciding == 1u);
  CHECK(field(a, "RateLimit-Remaining") == "3");
  CHECK(field(a, "RateLimit") == R"("hour";r=3;t=3000)");
  CHECK(field(a, "RateLimit-Policy") ==
        R"("second";q=10;w=1, "hour";q=1000;w=3600, "ip";q=100;w=60)");
}

TEST_CASE("equal remaining: the sooner reset decides then the first in order") {
  const LimitOutcome later[] = {
      {.policy = "a", .decision = allowed(10, 2, 60'000, 9'000)},
      {.policy = "b", .decision = allowed(10, 2, 60'000, 4'000)},
  };
  CHECK(combine(later, kNow).deciding == 1u);
  const LimitOutcome same[] = {
      {.policy = "a", .decision = allowed(10, 2, 60'000, 4'000)},
      {.policy = "b", .decision = allowed(10, 2, 60'000, 4'000)},
  };
  CHECK(combine(same, kNow).deciding == 0u);
}

TEST_CASE("any denial denies and the longest wait decides with Retry-After") {
  const LimitOutcome outcomes[] = {
      {.policy = "second", .decision = denied(10, 1'000, 400)},
      {.policy = "hour", .decision = allowed(1000, 999, 3'600'000, 3'600)},
      {.policy = "minute", .decision = denied(60, 60'000, 30'500)},
  };
  const Answer a = combine(outcomes, kNow);
  CHECK_FALSE(a.allowed);
  CHECK(a.status == 429);
  CHECK(a.deciding == 2u);
  CHECK(field(a, "Retry-After") == "31");
  CHECK(field(a, "RateLimit") == R"("minute";r=0;t=31)");
  CHECK(field(a, "X-Sluice-Decision") == "denied");
}

TEST_CASE("a denial no wait can admit is the most restrictive and sends no Retry-After") {
  const LimitOutcome outcomes[] = {
      {.policy = "minute", .decision = denied(60, 60'000, 30'000)},
      {.policy = "zero", .decision = denied(0, 60'000, kNever)},
  };
  const Answer a = combine(outcomes, kNow);
  CHECK(a.deciding == 1u);
  CHECK(field(a, "Retry-After") == "<absent>");
}

TEST_CASE("a shadow limit never denies gives no fields and is counted") {
  const LimitOutcome outcomes[] = {
      {.policy = "enforced", .decision = allowed(10, 7, 60'000, 18'000)},
      {.policy = "trial", .shadow = true, .decision = denied(1, 60'000, 50'000)},
  };
  const Answer a = combine(outcomes, kNow);
  CHECK(a.allowed);
  CHECK(a.shadow_denials == 1);
  CHECK(a.deciding == 0u);
  CHECK(field(a, "RateLimit-Policy") == R"("enforced";q=10;w=60)");
}

TEST_CASE("a failed call is left out when open and denies with the period when closed") {
  const LimitOutcome open[] = {
      {.policy = "ok", .decision = allowed(10, 7, 60'000, 18'000)},
      {.policy = "broken", .fails_closed = false, .limit = 5, .period_ms = 60'000},
  };
  const Answer a = combine(open, kNow);
  CHECK(a.allowed);
  CHECK(a.deciding == 0u);
  const LimitOutcome closed[] = {
      {.policy = "ok", .decision = allowed(10, 7, 60'000, 18'000)},
      {.policy = "broken", .fails_closed = true, .limit = 5, .period_ms = 60'000},
  };
  const Answer b = combine(closed, kNow);
  CHECK_FALSE(b.allowed);
  CHECK(b.deciding == 1u);
  CHECK(field(b, "Retry-After") == "60");
  CHECK(field(b, "RateLimit-Policy") == R"("ok";q=10;w=60, "broken";q=5;w=60)");
}

TEST_CASE("no limit applies: allowed with no RateLimit fields") {
  const Answer a = combine({}, kNow);
  CHECK(a.allowed);
  CHECK_FALSE(a.deciding.has_value());
  REQUIRE(a.headers.size() == 1);
  CHECK(a.headers[0].name == "X-Sluice-Decision");
  const LimitOutcome only_shadow[] = {
      {.policy = "trial", .shadow = true, .decision = denied(1, 60'000, 50'000)}};
  const Answer b = combine(only_shadow, kNow);
  CHECK(b.allowed);
  CHECK(b.shadow_denials == 1);
  CHECK(b.headers.size() == 1);
}

}  // namespace
}  // namespace sluice::gateway
