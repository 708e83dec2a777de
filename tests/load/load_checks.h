// Checks a test of sluice-load's driver makes of every report, whatever the backend.
#pragma once

#include <catch2/catch.hpp>

#include "tools/load/load_driver.h"

namespace sluice::load {

// The counts add up (every decision sent was allowed, denied or an error), and the timeline's
// steps sum to them.
inline void check_consistent(const LoadReport& r) {
  CHECK(r.sent == r.allowed + r.denied + r.errors);
  TimelineEntry sum;
  for (const TimelineEntry& e : r.timeline) {
    sum.sent += e.sent;
    sum.allowed += e.allowed;
    sum.denied += e.denied;
    sum.errors += e.errors;
  }
  CHECK(sum.sent == r.sent);
  CHECK(sum.allowed == r.allowed);
  CHECK(sum.denied == r.denied);
  CHECK(sum.errors == r.errors);
}

}  // namespace sluice::load
