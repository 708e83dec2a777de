#include <catch2/catch.hpp>
#include <optional>
#include <string>

#include "client/decision.h"

namespace sluice::client {
namespace {

std::optional<std::string> header(const std::vector<HeaderField>& headers, std::string_view name) {
  for (const HeaderField& h : headers) {
    if (h.name == name) return h.value;
  }
  return std::nullopt;
}

Decision allowed_decision() {
  Decision d;
  d.allowed = true;
  d.limit = 10;
  d.remaining = 7;
  d.reset_after_ms = 1500;
  d.retry_after_ms = 0;
  d.policy_quota = 10;
  d.policy_window_ms = 60'000;
  return d;
}

constexpr std::uint64_t kNowMs = 1'700'000'000'250;  // 2023-11-14T22:13:20.250Z

TEST_CASE("an allowed decision has every header but Retry-After, in a fixed order") {
  const auto headers = allowed_decision().headers(kNowMs);
  const std::vector<HeaderField> expected = {
      {"RateLimit-Limit", "10"},
      {"RateLimit-Remaining", "7"},
      {"RateLimit-Reset", "2"},
      {"RateLimit-Policy", "\"default\";q=10;w=60"},
      {"RateLimit", "\"default\";r=7;t=2"},
      {"X-RateLimit-Limit", "10"},
      {"X-RateLimit-Remaining", "7"},
      {"X-RateLimit-Reset", "1700000002"},
  };
  CHECK(headers == expected);
}

TEST_CASE("reset and retry seconds round up to whole seconds") {
  Decision d = allowed_decision();
  d.reset_after_ms = 0;
  CHECK(d.reset_seconds() == 0);
  d.reset_after_ms = 1;
  CHECK(d.reset_seconds() == 1);
  d.reset_after_ms = 1000;
  CHECK(d.reset_seconds() == 1);
  d.reset_after_ms = 1001;
  CHECK(d.reset_seconds() == 2);

  d.allowed = false;
  d.retry_after_ms = 1;
  CHECK(d.retry_after_seconds() == 1u);
  d.retry_after_ms = 2000;
  CHECK(d.retry_after_seconds() == 2u);
  d.retry_after_ms = 2001;
  CHECK(d.retry_after_seconds() == 3u);
  CHECK(header(d.headers(kNowMs), "Retry-After") == "3");
}

TEST_CASE("a denied decision carries Retry-After as the last header") {
  Decision d = allowed_decision();
  d.allowed = false;
  d.remaining = 0;
  d.retry_after_ms = 5999;
  const auto headers = d.headers(kNowMs);
  REQUIRE(headers.size() == 9);
  CHECK(headers.back() == HeaderField{"Retry-After", "6"});
  CHECK(header(headers, "RateLimit-Remaining") == "0");
  CHECK(header(headers, "RateLimit") == "\"default\";r=0;t=2");
}

TEST_CASE("a denial that no wait can lift has no Retry-After") {
  Decision d = allowed_decision();
  d.allowed = false;
  d.retry_after_ms = kNever;
  CHECK(d.retry_never());
  CHECK_FALSE(d.retry_after_seconds().has_value());
  CHECK_FALSE(header(d.headers(kNowMs), "Retry-After").has_value());
  CHECK(d.headers(kNowMs).size() == 8);
}

TEST_CASE("an allowed decision never has Retry-After, whatever retry_after_ms says") {
  Decision d = allowed_decision();
  d.retry_after_ms = 3000;
  CHECK_FALSE(d.retry_after_seconds().has_value());
}

TEST_CASE("X-RateLimit-Reset is the Unix second of the reset, rounded up") {
  Decision d = allowed_decision();
  d.reset_after_ms = 750;  // reset at ...001.000 exactly
  CHECK(d.reset_epoch_seconds(kNowMs) == 1'700'000'001);
  d.reset_after_ms = 751;
  CHECK(d.reset_epoch_seconds(kNowMs) == 1'700'000'002);
  d.reset_after_ms = 0;
  CHECK(d.reset_epoch_seconds(kNowMs) == 1'700'000'001);
  CHECK(d.reset_epoch_seconds(1'700'000'000'000) == 1'700'000'000);
  d.reset_after_ms = kNever;  // saturates instead of wrapping
  CHECK(d.reset_epoch_seconds(kNowMs) > 1'700'000'000);
}

TEST_CASE("RateLimit-Policy states the quota and the window in seconds, rounded up") {
  Decision d = allowed_decision();
  d.policy_quota = 100;
  d.policy_window_ms = 500;
  CHECK(d.policy_field() == "\"default\";q=100;w=1");
  d.policy_window_ms = 3'600'000;
  CHECK(d.policy_field("hourly") == "\"hourly\";q=100;w=3600");
}

TEST_CASE("policy names are escaped as structured-field strings") {
  Decision d = allowed_decision();
  CHECK(d.policy_field("a\"b\\c") == "\"a\\\"b\\\\c\";q=10;w=60");
  CHECK(d.ratelimit_field("tab\there") == "\"tabhere\";r=7;t=2");
}

TEST_CASE("headers() without a time uses the system clock") {
  const auto headers = allowed_decision().headers();
  const auto reset = header(headers, "X-RateLimit-Reset");
  REQUIRE(reset.has_value());
  CHECK(std::stoull(*reset) > 1'700'000'000ull);
}

}  // namespace
}  // namespace sluice::client
