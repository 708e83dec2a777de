// Wall-clock instants as log lines show them: UTC, ISO 8601, to the millisecond
// ("2026-12-06T01:02:03.456Z"). Only for people reading logs; decisions never use the wall clock.
#pragma once

#include <chrono>
#include <cstdio>
#include <string>

namespace sluice {

inline std::string format_utc_ms(std::chrono::system_clock::time_point at) {
  using namespace std::chrono;
  const auto ms_since_epoch = floor<milliseconds>(at);
  const auto day = floor<days>(ms_since_epoch);
  const year_month_day date(day);
  const hh_mm_ss time(ms_since_epoch - day);
  char out[32];
  std::snprintf(out, sizeof out, "%04d-%02u-%02uT%02d:%02d:%02d.%03dZ",
                static_cast<int>(date.year()), static_cast<unsigned>(date.month()),
                static_cast<unsigned>(date.day()), static_cast<int>(time.hours().count()),
                static_cast<int>(time.minutes().count()), static_cast<int>(time.seconds().count()),
                static_cast<int>(time.subseconds().count()));
  return out;
}

}  // namespace sluice
