#include <catch2/catch.hpp>

#include <string>
#include <string_view>

#include "core/units.h"

namespace sluice {
namespace {

TEST_CASE("parse_count reads whole decimal numbers only", "[units]") {
  CHECK(parse_count("0") == 0u);
  CHECK(parse_count("7420") == 7420u);
  CHECK(parse_count("18446744073709551615") == 18446744073709551615ull);
  CHECK_FALSE(parse_count("18446744073709551616").has_value());  // 2^64
  CHECK_FALSE(parse_count("").has_value());
  CHECK_FALSE(parse_count("-1").has_value());
  CHECK_FALSE(parse_count("+1").has_value());
  CHECK_FALSE(parse_count(" 1").has_value());
  CHECK_FALSE(parse_count("1 ").has_value());
  CHECK_FALSE(parse_count("10k").has_value());
}

TEST_CASE("parse_size reads bytes with binary suffixes", "[units]") {
  CHECK(parse_size("1048576") == 1048576u);
  CHECK(parse_size("0") == 0u);
  CHECK(parse_size("512KiB") == 512u * 1024);
  CHECK(parse_size("64MiB") == 64u * 1024 * 1024);
  CHECK(parse_size("1GiB") == 1ull << 30);
  CHECK(parse_size("1G") == 1ull << 30);
  CHECK(parse_size("2MB") == 2u << 20);
  CHECK(parse_size("3TiB") == 3ull << 40);
  CHECK(parse_size("7B") == 7u);
  CHECK(parse_size("18446744073709551615") == 18446744073709551615ull);
}

TEST_CASE("parse_size rejects junk and overflow", "[units]") {
  for (const char* junk : {"", "MiB", "abc", "-1", "+1", " 1", "1 ", "1.5GiB", "64mib", "64XB",
                           "64MiBs", "18446744073709551616", "17179869184GiB"}) {
    INFO(junk);
    CHECK_FALSE(parse_size(junk).has_value());
  }
  CHECK(parse_size("17179869183GiB") == 17179869183ull << 30);
}

TEST_CASE("parse_duration_ms reads ms, s, m, h and d", "[units]") {
  CHECK(parse_duration_ms("250ms") == 250u);
  CHECK(parse_duration_ms("60s") == 60'000u);
  CHECK(parse_duration_ms("5m") == 300'000u);
  CHECK(parse_duration_ms("1h") == 3'600'000u);
  CHECK(parse_duration_ms("1d") == 86'400'000u);
  CHECK(parse_duration_ms("0s") == 0u);
  CHECK(parse_duration_ms("0ms") == 0u);
}

TEST_CASE("parse_duration_ms refuses a bare number: the unit is not guessed", "[units]") {
  CHECK_FALSE(parse_duration_ms("250").has_value());
  CHECK_FALSE(parse_duration_ms("60").has_value());
  CHECK_FALSE(parse_duration_ms("0").has_value());
}

TEST_CASE("parse_duration_ms rejects junk and overflow", "[units]") {
  for (const char* junk : {"", "s", "ms", "5x", "5 s", "-5s", "1.5s", "5S", "5min", "5sec",
                           "99999999999999999999", "18446744073709551615d"}) {
    INFO(junk);
    CHECK_FALSE(parse_duration_ms(junk).has_value());
  }
}

TEST_CASE("format_duration_ms prints the largest exact unit, which parses back", "[units]") {
  CHECK(format_duration_ms(0) == "0ms");
  CHECK(format_duration_ms(1) == "1ms");
  CHECK(format_duration_ms(1500) == "1500ms");
  CHECK(format_duration_ms(90'000) == "90s");
  CHECK(format_duration_ms(300'000) == "5m");
  CHECK(format_duration_ms(366ull * 86'400'000) == "366d");
  for (std::uint64_t ms : {1ull, 999ull, 1000ull, 61'000ull, 3'600'000ull, 123'456'789ull}) {
    CHECK(parse_duration_ms(format_duration_ms(ms)) == ms);
  }
}

}  // namespace
}  // namespace sluice
