#include "tools/load/redis_designs.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

namespace sluice::load {
namespace {

using Outcome = RedisDecision::Outcome;
constexpr std::string_view kSha = "0123456789abcdef0123456789abcdef01234567";

Rule make_rule(Algorithm algorithm, std::uint32_t limit, std::uint64_t period_ms,
               std::uint32_t burst = 0) {
  Rule rule;
  rule.algorithm = algorithm;
  rule.limit = limit;
  rule.period_ms = period_ms;
  rule.burst = burst;
  return rule;
}

// Parses every reply in `input` into `out` (scalars only), views pointing into `input`.
void parse_replies(RespParser& parser, std::string_view input, std::vector<RespValue>& out) {
  out.clear();
  for (std::size_t at = 0; at < input.size();) {
    const auto r = parser.parse(input.substr(at));
    REQUIRE(r.status == RespStatus::kComplete);
    out.push_back(r.value);
    at += r.consumed;
  }
}

TEST_CASE("design names parse", "[redis]") {
  CHECK(parse_redis_design("lua_token_bucket") == RedisDesign::kLuaTokenBucket);
  CHECK(parse_redis_design("incr_window") == RedisDesign::kIncrWindow);
  CHECK_FALSE(parse_redis_design("lua"));
  CHECK(redis_design_name(RedisDesign::kIncrWindow) == "incr_window");
}

TEST_CASE("the token bucket script is loaded and called by SHA", "[redis]") {
  const std::string_view script = lua_token_bucket_script();
  for (const char* needle : {"HMGET", "HSET", "PEXPIRE", "TIME", "KEYS[1]", "ARGV[4]"}) {
    CHECK(script.find(needle) != std::string_view::npos);
  }
  RespWriter w;
  append_script_load(w);
  CHECK(w.view() == "*3\r\n$6\r\nSCRIPT\r\n$4\r\nLOAD\r\n$" + std::to_string(script.size()) +
                        "\r\n" + std::string(script) + "\r\n");

  RespParser parser;
  auto r = parser.parse("$40\r\n0123456789abcdef0123456789abcdef01234567\r\n");
  CHECK(read_script_sha(r.value) == kSha);
  r = parser.parse("$3\r\nabc\r\n");
  CHECK_FALSE(read_script_sha(r.value));
  r = parser.parse("-ERR Error compiling script\r\n");
  CHECK_FALSE(read_script_sha(r.value));
}

TEST_CASE("a token bucket decision is one EVALSHA", "[redis]") {
  RespWriter w;
  append_token_bucket(w, kSha, "k:0042", make_rule(Algorithm::kTokenBucket, 100, 1000, 150), 2);
  CHECK(w.view() ==
        "*8\r\n$7\r\nEVALSHA\r\n$40\r\n0123456789abcdef0123456789abcdef01234567\r\n"
        "$1\r\n1\r\n$6\r\nk:0042\r\n$3\r\n150\r\n$3\r\n100\r\n$4\r\n1000\r\n$1\r\n2\r\n");
  // Without a burst the capacity is the limit.
  w.clear();
  append_token_bucket(w, kSha, "k", make_rule(Algorithm::kTokenBucket, 10, 60000), 1);
  CHECK(w.view().find("$2\r\n10\r\n$2\r\n10\r\n$5\r\n60000\r\n") != std::string_view::npos);
}

TEST_CASE("token bucket replies become decisions", "[redis]") {
  RespParser parser;
  auto r = parser.parse("*4\r\n:1\r\n:9\r\n:0\r\n:1700000000123456\r\n");
  auto d = read_token_bucket(parser, r.value);
  CHECK(d.outcome == Outcome::kAllowed);
  CHECK(d.remaining == 9);
  CHECK(d.retry_after_ms == 0);
  CHECK(d.server_time_us == 1700000000123456);

  r = parser.parse("*4\r\n:0\r\n:0\r\n:250\r\n:1\r\n");
  d = read_token_bucket(parser, r.value);
  CHECK(d.outcome == Outcome::kDenied);
  CHECK(d.retry_after_ms == 250);

  r = parser.parse("*4\r\n:0\r\n:0\r\n:-1\r\n:1\r\n");
  CHECK(read_token_bucket(parser, r.value).retry_after_ms == -1);

  r = parser.parse("-NOSCRIPT No matching script. Please use EVAL.\r\n");
  d = read_token_bucket(parser, r.value);
  CHECK(d.outcome == Outcome::kError);
  CHECK(d.error == "NOSCRIPT No matching script. Please use EVAL.");

  for (const char* odd :
       {":1\r\n", "*3\r\n:1\r\n:9\r\n:0\r\n", "*4\r\n:1\r\n:9\r\n:0\r\n$1\r\n1\r\n",
        "*4\r\n:2\r\n:9\r\n:0\r\n:1\r\n", "*-1\r\n"}) {
    INFO(odd);
    r = parser.parse(odd);
    REQUIRE(r.status == RespStatus::kComplete);
    CHECK(read_token_bucket(parser, r.value).outcome == Outcome::kError);
  }
}

TEST_CASE("fixed window: INCR and PEXPIRE on the window's key", "[redis]") {
  const Rule rule = make_rule(Algorithm::kFixedWindow, 3, 1000);
  RespWriter w;
  const auto pending = append_incr_window(w, "k:7", rule, 1, 1'700'000'000'250);
  CHECK(pending.window == 1'700'000'000);
  CHECK(pending.elapsed_ms == 250);
  CHECK(pending.replies == 2);
  CHECK(w.commands() == 2);
  CHECK(w.view() ==
        "*2\r\n$4\r\nINCR\r\n$16\r\n{k:7}:1700000000\r\n"
        "*3\r\n$7\r\nPEXPIRE\r\n$16\r\n{k:7}:1700000000\r\n$4\r\n1000\r\n");

  w.clear();
  append_incr_window(w, "k:7", rule, 5, 0);
  CHECK(w.view() ==
        "*3\r\n$6\r\nINCRBY\r\n$7\r\n{k:7}:0\r\n$1\r\n5\r\n"
        "*3\r\n$7\r\nPEXPIRE\r\n$7\r\n{k:7}:0\r\n$4\r\n1000\r\n");
}

TEST_CASE("fixed window: allowed while the counter is within the limit", "[redis]") {
  const Rule rule = make_rule(Algorithm::kFixedWindow, 3, 1000);
  RespWriter w;
  const auto pending = append_incr_window(w, "k", rule, 1, 10'400);
  RespParser parser;
  std::vector<RespValue> replies;

  parse_replies(parser, ":3\r\n:1\r\n", replies);
  auto d = read_incr_window(rule, pending, replies);
  CHECK(d.outcome == Outcome::kAllowed);
  CHECK(d.remaining == 0);

  parse_replies(parser, ":4\r\n:1\r\n", replies);
  d = read_incr_window(rule, pending, replies);
  CHECK(d.outcome == Outcome::kDenied);
  CHECK(d.retry_after_ms == 600);

  parse_replies(parser, "-WRONGTYPE Operation against a key\r\n:1\r\n", replies);
  d = read_incr_window(rule, pending, replies);
  CHECK(d.outcome == Outcome::kError);
  CHECK(d.error == "WRONGTYPE Operation against a key");

  parse_replies(parser, ":1\r\n", replies);
  CHECK(read_incr_window(rule, pending, replies).outcome == Outcome::kError);
}

TEST_CASE("sliding window: the previous window's counter is fetched in the pipeline", "[redis]") {
  const Rule rule = make_rule(Algorithm::kSlidingWindow, 10, 60'000);
  RespWriter w;
  const auto pending = append_incr_window(w, "u", rule, 1, 60'000 * 5 + 15'000);
  CHECK(pending.replies == 3);
  CHECK(pending.window == 5);
  CHECK(pending.elapsed_ms == 15'000);
  CHECK(w.view() ==
        "*2\r\n$4\r\nINCR\r\n$5\r\n{u}:5\r\n"
        "*3\r\n$7\r\nPEXPIRE\r\n$5\r\n{u}:5\r\n$6\r\n120000\r\n"
        "*2\r\n$3\r\nGET\r\n$5\r\n{u}:4\r\n");
}

TEST_CASE("sliding window: the previous window weighs by its remaining overlap", "[redis]") {
  const Rule rule = make_rule(Algorithm::kSlidingWindow, 10, 60'000);
  RespParser parser;
  std::vector<RespValue> replies;
  // 15 s into the window: the previous one weighs 3/4. 8 * 3/4 + 4 = 10 <= 10.
  IncrWindowPending pending{5, 15'000, 3};
  parse_replies(parser, ":4\r\n:1\r\n$1\r\n8\r\n", replies);
  auto d = read_incr_window(rule, pending, replies);
  CHECK(d.outcome == Outcome::kAllowed);
  CHECK(d.remaining == 0);
  // One more is over: 8 * 3/4 + 5 = 11.
  parse_replies(parser, ":5\r\n:1\r\n$1\r\n8\r\n", replies);
  CHECK(read_incr_window(rule, pending, replies).outcome == Outcome::kDenied);
  // No previous window: only the counter counts.
  parse_replies(parser, ":10\r\n:1\r\n$-1\r\n", replies);
  CHECK(read_incr_window(rule, pending, replies).outcome == Outcome::kAllowed);
  // The weighted count rounds up, as in core: 7 * 3/4 + 1 = 6.25 counts as 7, so 3 are left.
  parse_replies(parser, ":1\r\n:1\r\n$1\r\n7\r\n", replies);
  CHECK(read_incr_window(rule, pending, replies).remaining == 3);
  // A previous counter that is not a number is an error.
  parse_replies(parser, ":1\r\n:1\r\n$2\r\nx1\r\n", replies);
  CHECK(read_incr_window(rule, pending, replies).outcome == Outcome::kError);
}

TEST_CASE("fixed window with 3 descriptors: an INCR and PEXPIRE pair per descriptor's counter",
          "[redis]") {
  const Rule rule = make_rule(Algorithm::kFixedWindow, 3, 1000);
  RespWriter w;
  const auto pending = append_incr_window(w, "k:7", rule, 1, 2'250, 3);
  CHECK(pending.window == 2);
  CHECK(pending.descriptors == 3);
  CHECK(pending.replies == 6);
  CHECK(w.commands() == 6);
  CHECK(w.view() ==
        "*2\r\n$4\r\nINCR\r\n$7\r\n{k:7}:2\r\n"
        "*3\r\n$7\r\nPEXPIRE\r\n$7\r\n{k:7}:2\r\n$4\r\n1000\r\n"
        "*2\r\n$4\r\nINCR\r\n$10\r\n{k:7}:d1:2\r\n"
        "*3\r\n$7\r\nPEXPIRE\r\n$10\r\n{k:7}:d1:2\r\n$4\r\n1000\r\n"
        "*2\r\n$4\r\nINCR\r\n$10\r\n{k:7}:d2:2\r\n"
        "*3\r\n$7\r\nPEXPIRE\r\n$10\r\n{k:7}:d2:2\r\n$4\r\n1000\r\n");
}

TEST_CASE("fixed window with 3 descriptors: allowed only when every counter is within the limit",
          "[redis]") {
  const Rule rule = make_rule(Algorithm::kFixedWindow, 3, 1000);
  RespWriter w;
  const auto pending = append_incr_window(w, "k", rule, 1, 10'400, 3);
  RespParser parser;
  std::vector<RespValue> replies;

  parse_replies(parser, ":1\r\n:1\r\n:3\r\n:1\r\n:2\r\n:1\r\n", replies);
  auto d = read_incr_window(rule, pending, replies);
  CHECK(d.outcome == Outcome::kAllowed);
  CHECK(d.remaining == 0);  // the fullest counter's

  parse_replies(parser, ":1\r\n:1\r\n:2\r\n:1\r\n:4\r\n:1\r\n", replies);
  d = read_incr_window(rule, pending, replies);
  CHECK(d.outcome == Outcome::kDenied);
  CHECK(d.retry_after_ms == 600);

  parse_replies(parser, ":1\r\n:1\r\n-OOM no memory\r\n:1\r\n:1\r\n:1\r\n", replies);
  d = read_incr_window(rule, pending, replies);
  CHECK(d.outcome == Outcome::kError);
  CHECK(d.error == "OOM no memory");

  parse_replies(parser, ":1\r\n:1\r\n:1\r\n:1\r\n", replies);  // two descriptors' worth
  CHECK(read_incr_window(rule, pending, replies).outcome == Outcome::kError);
}

TEST_CASE("sliding window with 2 descriptors: each fetches its own previous window", "[redis]") {
  const Rule rule = make_rule(Algorithm::kSlidingWindow, 10, 60'000);
  RespWriter w;
  const auto pending = append_incr_window(w, "u", rule, 1, 60'000 * 5 + 15'000, 2);
  CHECK(pending.replies == 6);
  CHECK(w.view() ==
        "*2\r\n$4\r\nINCR\r\n$5\r\n{u}:5\r\n"
        "*3\r\n$7\r\nPEXPIRE\r\n$5\r\n{u}:5\r\n$6\r\n120000\r\n"
        "*2\r\n$3\r\nGET\r\n$5\r\n{u}:4\r\n"
        "*2\r\n$4\r\nINCR\r\n$8\r\n{u}:d1:5\r\n"
        "*3\r\n$7\r\nPEXPIRE\r\n$8\r\n{u}:d1:5\r\n$6\r\n120000\r\n"
        "*2\r\n$3\r\nGET\r\n$8\r\n{u}:d1:4\r\n");
  RespParser parser;
  std::vector<RespValue> replies;
  // The first is within (8 * 3/4 + 4 = 10), the second over (8 * 3/4 + 5 = 11).
  parse_replies(parser, ":4\r\n:1\r\n$1\r\n8\r\n:5\r\n:1\r\n$1\r\n8\r\n", replies);
  CHECK(read_incr_window(rule, pending, replies).outcome == Outcome::kDenied);
  parse_replies(parser, ":4\r\n:1\r\n$1\r\n8\r\n:4\r\n:1\r\n$-1\r\n", replies);
  CHECK(read_incr_window(rule, pending, replies).outcome == Outcome::kAllowed);
}

}  // namespace
}  // namespace sluice::load
