#include "tools/load/resp.h"

#include <catch2/catch.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::load {
namespace {

using namespace std::string_view_literals;

TEST_CASE("commands are arrays of bulk strings, byte for byte", "[resp]") {
  RespWriter w;
  w.command("PING");
  CHECK(w.view() == "*1\r\n$4\r\nPING\r\n");
  w.clear();
  CHECK(w.empty());

  w.command("INCR", "{k:01}:42");
  CHECK(w.view() == "*2\r\n$4\r\nINCR\r\n$9\r\n{k:01}:42\r\n");
  w.clear();

  w.command("EXPIRE", "key", 60);
  w.command("PEXPIRE", "key", std::uint64_t{1500});
  CHECK(w.view() ==
        "*3\r\n$6\r\nEXPIRE\r\n$3\r\nkey\r\n$2\r\n60\r\n"
        "*3\r\n$7\r\nPEXPIRE\r\n$3\r\nkey\r\n$4\r\n1500\r\n");
  CHECK(w.commands() == 2);
  w.clear();

  w.command("SCRIPT", "LOAD", "return 1");
  CHECK(w.view() == "*3\r\n$6\r\nSCRIPT\r\n$4\r\nLOAD\r\n$8\r\nreturn 1\r\n");
  w.clear();

  w.command("EVALSHA", "abc", 1, "k", -5, std::string("x"));
  CHECK(w.view() ==
        "*6\r\n$7\r\nEVALSHA\r\n$3\r\nabc\r\n$1\r\n1\r\n$1\r\nk\r\n$2\r\n-5\r\n$1\r\nx\r\n");
}

TEST_CASE("arguments may hold any bytes, CRLF and NUL included", "[resp]") {
  RespWriter w;
  const std::string binary("a\r\n\0b", 5);
  w.command("SET", binary, "");
  CHECK(w.view() == std::string("*3\r\n$3\r\nSET\r\n$5\r\na\r\n\0b\r\n$0\r\n\r\n", 30));
}

TEST_CASE("pieces of one argument are concatenated", "[resp]") {
  RespWriter w;
  w.begin_command(2);
  w.arg("GET");
  w.arg_concat({"{", "user", "}:", "7"});
  CHECK(w.view() == "*2\r\n$3\r\nGET\r\n$8\r\n{user}:7\r\n");
}

TEST_CASE("clear keeps the buffer's capacity", "[resp]") {
  RespWriter w;
  for (int i = 0; i < 100; ++i) w.command("INCR", "some-key");
  const auto* data = w.view().data();
  w.clear();
  for (int i = 0; i < 100; ++i) w.command("INCR", "some-key");
  CHECK(w.view().data() == data);
}

TEST_CASE("each reply type parses", "[resp]") {
  RespParser parser;

  auto r = parser.parse("+OK\r\n");
  REQUIRE(r.status == RespStatus::kComplete);
  CHECK(r.consumed == 5);
  CHECK(r.value.type == RespType::kSimpleString);
  CHECK(r.value.text == "OK");

  r = parser.parse("-ERR unknown command 'FOO'\r\n");
  REQUIRE(r.status == RespStatus::kComplete);
  CHECK(r.value.type == RespType::kError);
  CHECK(r.value.text == "ERR unknown command 'FOO'");

  r = parser.parse(":-9223372036854775808\r\n");
  REQUIRE(r.status == RespStatus::kComplete);
  CHECK(r.value.type == RespType::kInteger);
  CHECK(r.value.integer == INT64_MIN);

  r = parser.parse(":42\r\n");
  CHECK(r.value.integer == 42);

  r = parser.parse("$5\r\nhe\r\no\r\n");
  REQUIRE(r.status == RespStatus::kComplete);
  CHECK(r.value.type == RespType::kBulkString);
  CHECK(r.value.text == "he\r\no");
  CHECK(r.consumed == 11);

  r = parser.parse("$0\r\n\r\n");
  REQUIRE(r.status == RespStatus::kComplete);
  CHECK(r.value.type == RespType::kBulkString);
  CHECK(r.value.text.empty());

  r = parser.parse("$-1\r\n");
  REQUIRE(r.status == RespStatus::kComplete);
  CHECK(r.value.type == RespType::kNullBulk);

  r = parser.parse("*-1\r\n");
  REQUIRE(r.status == RespStatus::kComplete);
  CHECK(r.value.type == RespType::kNullArray);

  r = parser.parse("*0\r\n");
  REQUIRE(r.status == RespStatus::kComplete);
  CHECK(r.value.type == RespType::kArray);
  CHECK(parser.elements(r.value).empty());
}

TEST_CASE("arrays parse, nested ones too", "[resp]") {
  RespParser parser;
  const auto input = "*4\r\n:1\r\n*2\r\n+a\r\n$-1\r\n$3\r\nxyz\r\n*1\r\n-ERR x\r\n"sv;
  const auto r = parser.parse(input);
  REQUIRE(r.status == RespStatus::kComplete);
  CHECK(r.consumed == input.size());
  REQUIRE(r.value.type == RespType::kArray);
  const auto top = parser.elements(r.value);
  REQUIRE(top.size() == 4);
  CHECK(top[0].integer == 1);
  REQUIRE(top[1].type == RespType::kArray);
  const auto inner = parser.elements(top[1]);
  REQUIRE(inner.size() == 2);
  CHECK(inner[0].text == "a");
  CHECK(inner[1].type == RespType::kNullBulk);
  CHECK(top[2].text == "xyz");
  const auto last = parser.elements(top[3]);
  REQUIRE(last.size() == 1);
  CHECK(last[0].type == RespType::kError);
  CHECK(parser.elements(top[0]).empty());
}

TEST_CASE("only the first reply is consumed", "[resp]") {
  RespParser parser;
  const auto r = parser.parse(":1\r\n:2\r\n");
  REQUIRE(r.status == RespStatus::kComplete);
  CHECK(r.consumed == 4);
}

// A pipeline of replies of every type, as Redis would send it.
constexpr std::string_view kStream =
    "+OK\r\n"
    "-NOSCRIPT No matching script. Please use EVAL.\r\n"
    ":1\r\n"
    "$40\r\n0123456789abcdef0123456789abcdef01234567\r\n"
    "$-1\r\n"
    "*4\r\n:1\r\n:9\r\n:0\r\n:1700000000000000\r\n"
    "*2\r\n*1\r\n$0\r\n\r\n*-1\r\n"
    ":-7\r\n";
constexpr int kStreamReplies = 8;

// Parses replies from the front of `input` until one is not complete; returns the statuses
// seen and how many bytes were consumed.
int parse_all(RespParser& parser, std::string_view input, std::size_t& consumed, RespStatus& last) {
  int replies = 0;
  consumed = 0;
  // Bounded: each complete reply consumes at least 3 bytes.
  for (std::size_t guard = 0; guard <= input.size(); ++guard) {
    const auto r = parser.parse(input.substr(consumed));
    last = r.status;
    if (r.status != RespStatus::kComplete) break;
    REQUIRE(r.consumed > 0);
    consumed += r.consumed;
    ++replies;
  }
  return replies;
}

TEST_CASE("every truncation of a pipeline is need-more after the whole replies", "[resp]") {
  RespParser parser;
  std::size_t consumed = 0;
  RespStatus last{};
  REQUIRE(parse_all(parser, kStream, consumed, last) == kStreamReplies);
  REQUIRE(consumed == kStream.size());

  // Reply boundaries, to know how many replies a prefix holds.
  std::vector<std::size_t> ends;
  for (std::size_t at = 0; at < kStream.size();) {
    at += parser.parse(kStream.substr(at)).consumed;
    ends.push_back(at);
  }
  for (std::size_t cut = 0; cut < kStream.size(); ++cut) {
    // A copy of exactly `cut` bytes, so that any read past it would be seen by ASan.
    const std::vector<char> prefix(kStream.begin(), kStream.begin() + static_cast<long>(cut));
    const std::string_view view(prefix.data(), prefix.size());
    int whole = 0;
    while (whole < kStreamReplies && ends[static_cast<std::size_t>(whole)] <= cut) ++whole;
    INFO("cut at " << cut);
    CHECK(parse_all(parser, view, consumed, last) == whole);
    CHECK(last == RespStatus::kNeedMore);
    CHECK(consumed == (whole == 0 ? 0 : ends[static_cast<std::size_t>(whole) - 1]));
  }
}

TEST_CASE("bytes arriving one at a time give the same replies", "[resp]") {
  RespParser parser;
  std::string buffer;
  std::size_t start = 0;
  std::vector<RespType> types;
  for (const char c : kStream) {
    buffer += c;
    const auto r = parser.parse(std::string_view(buffer).substr(start));
    if (r.status == RespStatus::kComplete) {
      types.push_back(r.value.type);
      start += r.consumed;
    } else {
      REQUIRE(r.status == RespStatus::kNeedMore);
    }
  }
  CHECK(start == buffer.size());
  CHECK(types == std::vector<RespType>{RespType::kSimpleString, RespType::kError,
                                       RespType::kInteger, RespType::kBulkString,
                                       RespType::kNullBulk, RespType::kArray, RespType::kArray,
                                       RespType::kInteger});
}

TEST_CASE("malformed input is detected", "[resp]") {
  RespParser parser;
  for (const std::string_view bad :
       {"x\r\n"sv, "OK\r\n"sv, "%1\r\n"sv, "+OK\n"sv, "+O\nK\r\n"sv, "+OK\rX"sv, ":\r\n"sv,
        ":12a\r\n"sv, ":+1\r\n"sv, ":-\r\n"sv, ":99999999999999999999\r\n"sv, "$-2\r\n"sv,
        "$abc\r\n"sv, "$3\r\nabcd\r\n"sv, "$3\r\nab\r\n\r\n"sv, "$ 3\r\nabc\r\n"sv, "*-2\r\n"sv,
        "*1\r\nfoo\r\n"sv, "*2\r\n:1\r\n?\r\n"sv}) {
    INFO(std::string(bad));
    CHECK(parser.parse(bad).status == RespStatus::kMalformed);
  }
}

TEST_CASE("limits are enforced without waiting for the data", "[resp]") {
  RespParser::Limits limits;
  limits.max_bulk = 10;
  limits.max_line = 16;
  limits.max_values = 4;
  limits.max_depth = 2;
  RespParser parser(limits);
  CHECK(parser.parse("$11\r\n").status == RespStatus::kTooLarge);
  CHECK(parser.parse("$10\r\n").status == RespStatus::kNeedMore);
  CHECK(parser.parse("$9223372036854775807\r\n").status == RespStatus::kTooLarge);
  CHECK(parser.parse("+0123456789abcdefXYZ").status == RespStatus::kTooLarge);
  CHECK(parser.parse("*5\r\n").status == RespStatus::kTooLarge);
  CHECK(parser.parse("*3\r\n*2\r\n").status == RespStatus::kTooLarge);        // 5 values
  CHECK(parser.parse("*1\r\n*1\r\n*1\r\n").status == RespStatus::kTooLarge);  // depth 3
  CHECK(parser.parse("*1\r\n*1\r\n:1\r\n").status == RespStatus::kComplete);
}

TEST_CASE("a parser is reusable after any outcome", "[resp]") {
  RespParser parser;
  CHECK(parser.parse("*2\r\n:1\r\n").status == RespStatus::kNeedMore);
  CHECK(parser.parse("?").status == RespStatus::kMalformed);
  const auto r = parser.parse("*2\r\n:1\r\n:2\r\n");
  REQUIRE(r.status == RespStatus::kComplete);
  CHECK(parser.elements(r.value)[1].integer == 2);
  CHECK(parser.parse("").status == RespStatus::kNeedMore);
}

}  // namespace
}  // namespace sluice::load
