#include "tools/load/redis_designs.h"

#include <algorithm>
#include <charconv>

namespace sluice::load {
namespace {

// Lua 5.1 numbers are doubles; times are whole microseconds (~1.7e15, exact below 2^53).
// redis.call formats a number argument with %.14g, which would round both the timestamp and
// the tokens, so they are formatted here: integers with %.0f, tokens with %.17g (round-trips).
constexpr std::string_view kTokenBucketScript = R"lua(
local capacity = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local period_us = tonumber(ARGV[3]) * 1000
local cost = tonumber(ARGV[4])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(state[1])
local ts = tonumber(state[2])
if tokens == nil or ts == nil then
  tokens = capacity
  ts = now
elseif now > ts then
  tokens = math.min(capacity, tokens + (now - ts) * limit / period_us)
  ts = now
end
local allowed = 0
local retry_ms = 0
if cost <= tokens then
  tokens = tokens - cost
  allowed = 1
elseif cost > capacity or limit <= 0 then
  retry_ms = -1
else
  retry_ms = math.ceil((cost - tokens) * period_us / limit / 1000)
end
redis.call('HSET', KEYS[1], 'tokens', string.format('%.17g', tokens),
           'ts', string.format('%.0f', ts))
local ttl_ms = period_us / 1000
if limit > 0 then
  ttl_ms = math.ceil((capacity - tokens) * period_us / limit / 1000) + 1
end
redis.call('PEXPIRE', KEYS[1], string.format('%.0f', math.min(ttl_ms, 1e13)))
return {allowed, math.floor(tokens), retry_ms, now}
)lua";

RedisDecision error_decision(std::string_view why) {
  RedisDecision decision;
  decision.outcome = RedisDecision::Outcome::kError;
  decision.error = why;
  return decision;
}

// An integer reply, or the reason it is not one.
bool as_integer(const RespValue& value, std::int64_t& out, RedisDecision& failure) {
  if (value.type == RespType::kInteger) {
    out = value.integer;
    return true;
  }
  failure =
      error_decision(value.type == RespType::kError ? value.text : "expected an integer reply");
  return false;
}

}  // namespace

std::optional<RedisDesign> parse_redis_design(std::string_view name) {
  if (name == "lua_token_bucket") return RedisDesign::kLuaTokenBucket;
  if (name == "incr_window") return RedisDesign::kIncrWindow;
  return std::nullopt;
}

std::string_view redis_design_name(RedisDesign design) {
  switch (design) {
    case RedisDesign::kLuaTokenBucket:
      return "lua_token_bucket";
    case RedisDesign::kIncrWindow:
      return "incr_window";
  }
  return "unknown";
}

std::string_view lua_token_bucket_script() { return kTokenBucketScript; }

void append_script_load(RespWriter& out) { out.command("SCRIPT", "LOAD", kTokenBucketScript); }

std::optional<std::string_view> read_script_sha(const RespValue& reply) {
  if (reply.type != RespType::kBulkString || reply.text.size() != 40) return std::nullopt;
  const bool hex = std::all_of(reply.text.begin(), reply.text.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
  });
  if (!hex) return std::nullopt;
  return reply.text;
}

void append_token_bucket(RespWriter& out, std::string_view sha, std::string_view key,
                         const Rule& rule, std::uint32_t cost) {
  out.command("EVALSHA", sha, 1, key, rule.capacity(), rule.limit, rule.period_ms, cost);
}

RedisDecision read_token_bucket(const RespParser& parser, const RespValue& reply) {
  if (reply.type == RespType::kError) return error_decision(reply.text);
  const auto fields = parser.elements(reply);
  if (reply.type != RespType::kArray || fields.size() != 4) {
    return error_decision("expected an array of 4 integers from the token bucket script");
  }
  std::int64_t values[4] = {};
  RedisDecision failure;
  for (std::size_t i = 0; i < 4; ++i) {
    if (!as_integer(fields[i], values[i], failure)) return failure;
  }
  if ((values[0] != 0 && values[0] != 1) || values[3] < 0) {
    return error_decision("token bucket script returned out-of-range values");
  }
  RedisDecision decision;
  decision.outcome =
      values[0] == 1 ? RedisDecision::Outcome::kAllowed : RedisDecision::Outcome::kDenied;
  decision.remaining = values[1];
  decision.retry_after_ms = values[2];
  decision.server_time_us = static_cast<std::uint64_t>(values[3]);
  return decision;
}

IncrWindowPending append_incr_window(RespWriter& out, std::string_view key, const Rule& rule,
                                     std::uint32_t cost, std::uint64_t now_ms,
                                     unsigned descriptors) {
  IncrWindowPending pending;
  const std::uint64_t period = std::max<std::uint64_t>(rule.period_ms, 1);
  pending.window = now_ms / period;
  pending.elapsed_ms = now_ms % period;
  const bool sliding = rule.algorithm == Algorithm::kSlidingWindow;
  descriptors = std::clamp(descriptors, 1u, kMaxDescriptors);
  pending.descriptors = static_cast<std::uint8_t>(descriptors);
  pending.replies = static_cast<std::uint8_t>((sliding ? 3 : 2) * descriptors);

  char window[24];
  const auto window_end = std::to_chars(window, window + sizeof window, pending.window).ptr;
  const std::string_view window_text(window, static_cast<std::size_t>(window_end - window));
  char previous[24];
  const auto previous_end =
      std::to_chars(previous, previous + sizeof previous, pending.window - 1).ptr;
  const std::string_view previous_text(previous, static_cast<std::size_t>(previous_end - previous));

  for (unsigned d = 0; d < descriptors; ++d) {
    // Descriptor 0 keeps the one-descriptor name; the others add ":d<i>" after the hash tag.
    char tag[8] = {':', 'd'};
    const auto tag_end = std::to_chars(tag + 2, tag + sizeof tag, d).ptr;
    const std::string_view descriptor =
        d == 0 ? std::string_view()
               : std::string_view(tag, static_cast<std::size_t>(tag_end - tag));

    // The hash tag {key} keeps every window of a key in one Redis Cluster slot.
    if (cost == 1) {
      out.begin_command(2);
      out.arg("INCR");
    } else {
      out.begin_command(3);
      out.arg("INCRBY");
    }
    out.arg_concat({"{", key, "}", descriptor, ":", window_text});
    if (cost != 1) out.arg(cost);

    // A counter must outlive its window, and for the sliding window the next one too.
    out.begin_command(3);
    out.arg("PEXPIRE");
    out.arg_concat({"{", key, "}", descriptor, ":", window_text});
    out.arg(sliding ? 2 * period : period);

    if (sliding) {
      out.begin_command(2);
      out.arg("GET");
      out.arg_concat({"{", key, "}", descriptor, ":", previous_text});
    }
  }
  return pending;
}

namespace {

// One descriptor's counter: its units used, scaled by the period (see read_incr_window()), or
// an error decision in `failure`.
bool read_counter(const Rule& rule, const IncrWindowPending& pending,
                  std::span<const RespValue> replies, unsigned __int128& used,
                  RedisDecision& failure) {
  std::int64_t counter = 0;
  std::int64_t expire_result = 0;
  if (!as_integer(replies[0], counter, failure)) return false;
  if (!as_integer(replies[1], expire_result, failure)) return false;
  if (counter < 0) {
    failure = error_decision("negative counter");
    return false;
  }
  const std::uint64_t period = std::max<std::uint64_t>(rule.period_ms, 1);
  // Weighted sum, scaled by the period to stay in integers: previous * (period - elapsed) +
  // counter * period, compared with limit * period. 128 bits: no overflow for any u64 counter.
  used = static_cast<unsigned __int128>(counter) * period;
  if (replies.size() == 3) {
    std::uint64_t previous = 0;
    const RespValue& get = replies[2];
    if (get.type == RespType::kError) {
      failure = error_decision(get.text);
      return false;
    }
    if (get.type == RespType::kBulkString) {
      const char* end = get.text.data() + get.text.size();
      auto [ptr, ec] = std::from_chars(get.text.data(), end, previous);
      if (ec != std::errc() || ptr != end) {
        failure = error_decision("previous counter is not a number");
        return false;
      }
    } else if (get.type != RespType::kNullBulk) {
      failure = error_decision("expected a bulk string or null from GET");
      return false;
    }
    used += static_cast<unsigned __int128>(previous) * (period - pending.elapsed_ms);
  }
  return true;
}

}  // namespace

RedisDecision read_incr_window(const Rule& rule, const IncrWindowPending& pending,
                               std::span<const RespValue> replies) {
  const std::size_t descriptors = std::max<std::size_t>(pending.descriptors, 1);
  const std::size_t per = pending.replies / descriptors;
  if (replies.size() != pending.replies || per < 2 || per > 3 ||
      per * descriptors != pending.replies) {
    return error_decision("wrong number of replies for an incr_window decision");
  }
  const std::uint64_t period = std::max<std::uint64_t>(rule.period_ms, 1);
  const unsigned __int128 allowed_scaled = static_cast<unsigned __int128>(rule.limit) * period;
  unsigned __int128 most_used = 0;
  for (std::size_t d = 0; d < descriptors; ++d) {
    unsigned __int128 used = 0;
    RedisDecision failure;
    if (!read_counter(rule, pending, replies.subspan(d * per, per), used, failure)) return failure;
    most_used = std::max(most_used, used);
  }

  RedisDecision decision;
  if (most_used <= allowed_scaled) {
    decision.outcome = RedisDecision::Outcome::kAllowed;
    decision.remaining = static_cast<std::int64_t>((allowed_scaled - most_used) / period);
  } else {
    decision.outcome = RedisDecision::Outcome::kDenied;
    // Until the next window: exact for the fixed window, an upper bound for the sliding one.
    decision.retry_after_ms = static_cast<std::int64_t>(period - pending.elapsed_ms);
  }
  return decision;
}

}  // namespace sluice::load
