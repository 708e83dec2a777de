#include "core/utc_time.h"

#include <catch2/catch.hpp>

namespace {

using std::chrono::milliseconds;
using std::chrono::system_clock;

}  // namespace

TEST_CASE("a log time is UTC in ISO 8601 to the millisecond", "[utc-time]") {
  CHECK(sluice::format_utc_ms(system_clock::time_point{}) == "1970-01-01T00:00:00.000Z");
  // 2026-12-06T01:02:03.456Z
  const system_clock::time_point at{milliseconds(1'796'518'923'456)};
  CHECK(sluice::format_utc_ms(at) == "2026-12-06T01:02:03.456Z");
}

TEST_CASE("a log time drops what is below a millisecond and keeps leap days", "[utc-time]") {
  const system_clock::time_point leap{milliseconds(951'782'399'999) +
                                      std::chrono::microseconds(999)};
  CHECK(sluice::format_utc_ms(leap) == "2000-02-28T23:59:59.999Z");
  CHECK(sluice::format_utc_ms(system_clock::time_point{
            milliseconds(951'782'400'000 + 86'400'000)}) == "2000-03-01T00:00:00.000Z");
}
