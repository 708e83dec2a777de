// The two ways people build a rate limiter on Redis, as command builders and reply readers, so
// sluice-load can drive Redis with the same traffic it sends to Sluice (docs/BENCHMARKS.md).
//
//  - lua_token_bucket: one EVALSHA per decision of the script below (HMGET tokens/ts, refill
//    by elapsed server time, take `cost` if enough, HSET, PEXPIRE). Loaded once with SCRIPT LOAD.
//  - incr_window: a counter per key and window, "{key}:<window>", window = floor(now / period)
//    on the client's clock. Per decision, pipelined: INCR (INCRBY when cost > 1) and PEXPIRE;
//    for the sliding window counter also GET of the previous window's counter. As deployed,
//    INCR counts refused requests too, so a refused request with cost > 1 can refuse later
//    cheaper ones in the same window (never the other way round). With D descriptors (the work
//    envoyproxy/ratelimit does for a ShouldRateLimit call of D descriptors) a decision is D such
//    groups in one pipeline, descriptor i > 0 on the counter "{key}:d<i>:<window>", and it is
//    allowed only when every one is.
//
// Builders append to a RespWriter and allocate nothing once its buffer has grown. Readers take
// the parsed replies and never throw; an unexpected reply is an error outcome, not a crash.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "core/rule.h"
#include "tools/load/resp.h"

namespace sluice::load {

enum class RedisDesign : std::uint8_t { kLuaTokenBucket, kIncrWindow };

// The most descriptors one incr_window decision (or one ShouldRateLimit call) carries.
inline constexpr unsigned kMaxDescriptors = 8;

// "lua_token_bucket", "incr_window".
std::optional<RedisDesign> parse_redis_design(std::string_view name);
std::string_view redis_design_name(RedisDesign design);

struct RedisDecision {
  enum class Outcome : std::uint8_t { kAllowed, kDenied, kError };
  Outcome outcome = Outcome::kError;
  std::int64_t remaining = 0;        // whole units left after this request
  std::int64_t retry_after_ms = 0;   // 0 when allowed; -1 when waiting never helps
  std::uint64_t server_time_us = 0;  // Redis's clock at the decision (lua_token_bucket); else 0
  std::string_view error;            // kError: Redis's message, or what was wrong with the reply
};

// ---- lua_token_bucket ----------------------------------------------------------------------

// The script. KEYS[1] = the bucket; ARGV = capacity, limit, period_ms, cost. Refills
// limit/period_ms tokens per millisecond up to capacity, on Redis's clock (TIME). Returns
// {allowed 0|1, remaining, retry_after_ms (-1 = never), now_us}; now_us lets the accuracy audit
// use the time the decision was made.
std::string_view lua_token_bucket_script();

// SCRIPT LOAD <script>; the reply is the SHA1 to pass to append_token_bucket().
void append_script_load(RespWriter& out);
// The SHA1 from SCRIPT LOAD's reply (40 hex digits), or nullopt.
std::optional<std::string_view> read_script_sha(const RespValue& reply);

// EVALSHA <sha> 1 <key> <capacity> <limit> <period_ms> <cost>: one reply per decision.
void append_token_bucket(RespWriter& out, std::string_view sha, std::string_view key,
                         const Rule& rule, std::uint32_t cost);
RedisDecision read_token_bucket(const RespParser& parser, const RespValue& reply);

// ---- incr_window ---------------------------------------------------------------------------

// What reading an incr_window decision needs: keep one per decision in flight.
struct IncrWindowPending {
  std::uint64_t window = 0;      // floor(now_ms / period_ms)
  std::uint64_t elapsed_ms = 0;  // now_ms - window start
  // Replies this decision takes: per descriptor 2 (fixed) or 3 (sliding), times descriptors.
  std::uint8_t replies = 0;
  std::uint8_t descriptors = 1;
};

// Appends the commands for one decision of `descriptors` counters at client time `now_ms`.
// REQUIRES: rule.algorithm is kFixedWindow or kSlidingWindow, rule.period_ms >= 1,
// 1 <= descriptors <= kMaxDescriptors.
IncrWindowPending append_incr_window(RespWriter& out, std::string_view key, const Rule& rule,
                                     std::uint32_t cost, std::uint64_t now_ms,
                                     unsigned descriptors = 1);

// Reads the decision from its `pending.replies` replies, in order, per descriptor: the counter
// after INCR, the PEXPIRE result, and for the sliding window the previous window's counter
// (null when absent). Fixed window: a counter is within its limit when counter <= limit.
// Sliding window counter: when previous * (period - elapsed) / period + counter <= limit (the
// previous window weighted by the part of it that the sliding period still covers). Allowed
// when every descriptor's counter is within the limit; `remaining` is the smallest. An error
// reply anywhere makes the decision an error. REQUIRES: scalar replies (views into the read
// buffer still valid).
RedisDecision read_incr_window(const Rule& rule, const IncrWindowPending& pending,
                               std::span<const RespValue> replies);

}  // namespace sluice::load
