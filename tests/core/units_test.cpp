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

// What a FlagError says, or "no error".
template <typename F>
std::string flag_message(F&& parse) {
  try {
    parse();
  } catch (const FlagError& e) {
    return e.what();
  }
  return "no error";
}

TEST_CASE("count_flag keeps a whole number within its bounds and states the range otherwise",
          "[units]") {
  CHECK(count_flag("port", "0", 0, 65535) == 0u);
  CHECK(count_flag("port", "65535", 0, 65535) == 65535u);
  const auto message = [](std::string_view text) {
    return flag_message([&] { count_flag("port", text, 1, 65535); });
  };
  CHECK(message("65536") == "--port 65536: must be 1..65535");
  CHECK(message("0") == "--port 0: must be 1..65535");
  CHECK(message("80x") == "--port 80x: expected a whole number 1..65535");
  CHECK(message("") == "--port : expected a whole number 1..65535");
  CHECK(flag_message([] { count_flag("limit", "4294967296", 1, 4294967295); }) ==
        "--limit 4294967296: must be 1..4294967295");
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

TEST_CASE("duration_flag refuses a bare number with the fix, and states the range", "[units]") {
  constexpr std::uint64_t kDay = 86'400'000;
  CHECK(duration_flag("period", "60s", 1, 366 * kDay) == 60'000u);
  CHECK(duration_flag("idle-timeout", "0", 0, 366 * kDay) == 0u);  // 0 = off needs no unit
  CHECK(duration_flag("idle-timeout", "0s", 0, 366 * kDay) == 0u);
  CHECK(flag_message([] { duration_flag("period", "60", 1, 366 * kDay); }) ==
        "--period 60: give a unit, e.g. 60s");
  CHECK(flag_message([] { duration_flag("idle-timeout", "5", 0, 366 * kDay); }) ==
        "--idle-timeout 5: give a unit, e.g. 5s");
  CHECK(flag_message([] { duration_flag("period", "0", 1, 366 * kDay); }) ==
        "--period 0: must be 1ms..366d");
  CHECK(flag_message([] { duration_flag("period", "0s", 1, 366 * kDay); }) ==
        "--period 0s: must be 1ms..366d");
  CHECK(flag_message([] { duration_flag("idle-timeout", "367d", 0, 366 * kDay); }) ==
        "--idle-timeout 367d: must be 0..366d");
  CHECK(flag_message([] { duration_flag("period", "soon", 1, kDay); }) ==
        "--period soon: expected a duration with a unit (ms, s, m, h, d), e.g. 500ms, 60s, 5m");
}

TEST_CASE("format_host_port puts an IPv6 address in brackets", "[units]") {
  CHECK(format_host_port("127.0.0.1", 7420) == "127.0.0.1:7420");
  CHECK(format_host_port("localhost", 80) == "localhost:80");
  CHECK(format_host_port("::1", 7420) == "[::1]:7420");
  CHECK(format_host_port("fe80::1%lo", 1) == "[fe80::1%lo]:1");
  CHECK(format_host_port("::", 0) == "[::]:0");
}

}  // namespace
}  // namespace sluice
