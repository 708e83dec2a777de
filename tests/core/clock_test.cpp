#include <catch2/catch.hpp>

#include "core/clock.h"

namespace sluice {
namespace {

TEST_CASE("system clock reads nanoseconds since the Unix epoch", "[clock]") {
  const std::uint64_t now = SystemClock::instance().now_ns();
  CHECK(now > 1'600'000'000ull * 1'000'000'000);  // after September 2020
  CHECK(now < 4'000'000'000ull * 1'000'000'000);  // before 2096
  CHECK(SystemClock::instance().now_ns() >= now - 1'000'000'000);
}

TEST_CASE("manual clock moves only when told", "[clock]") {
  ManualClock clock(5);
  CHECK(clock.now_ns() == 5);
  clock.advance_ns(10);
  clock.advance_ms(2);
  CHECK(clock.now_ns() == 2'000'015);
  clock.set_ns(0);
  CHECK(clock.now_ns() == 0);
}

}  // namespace
}  // namespace sluice
