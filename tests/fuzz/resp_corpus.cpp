// Writes resp_fuzz's seed corpus (tests/fuzz/corpus/resp_fuzz/): every RESP2 reply type, nested
// arrays, both sides of every limit (the defaults where a seed stays small, tight limits set by
// the config bytes elsewhere), truncations, malformed streams, streams arriving in pieces (split
// between CR and LF, empty reads), and the replies sluice-load's Redis designs get, byte for byte
// as redis-server 7.0.15 sent them to the commands tools/load/redis_designs.cpp builds.
// Each file is resp_fuzz's input: two config bytes, the piece count and sizes, then the stream
// (see resp_fuzz.cpp).
// Usage: resp_corpus DIR  (rewrites DIR's seeds; tools/fuzz.sh --seeds runs it)
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace {

using namespace std::string_literals;

// Config bytes (resp_fuzz.cpp, limits_from): 0 keeps a limit's default. Byte 0: low nibble n
// sets max_line 4n, high nibble n max_bulk 4(n - 1). Byte 1: low nibble n sets max_values
// n - 1, high nibble n max_depth n - 1.
struct Config {
  std::uint8_t lines_and_bulk = 0;
  std::uint8_t values_and_depth = 0;
};
constexpr Config kDefaults{};
constexpr Config kMaxLine16{0x04, 0};
constexpr Config kMaxBulk12{0x40, 0};
constexpr Config kMaxBulk0{0x10, 0};
constexpr Config kMaxValues4{0, 0x05};
constexpr Config kMaxValues0{0, 0x01};
constexpr Config kMaxDepth2{0, 0x30};
constexpr Config kMaxDepth0{0, 0x10};
// A token bucket reply is exactly at these: 4 values, depth 1, a 16-digit timestamp.
constexpr Config kTokenBucketEdge{0x04, 0x25};

struct Seed {
  std::string name;
  Config config;
  std::vector<std::uint8_t> pieces;  // sizes of the first pieces; the rest arrives last
  std::string stream;
};

std::string repeat(std::string_view s, int times) {
  std::string out;
  for (int i = 0; i < times; ++i) out += s;
  return out;
}

// Captured from redis-server 7.0.15 (SHA1 of lua_token_bucket_script(), and the script's
// replies: allowed, denied twice in a row, never, each with Redis's clock in µs).
const std::string kScriptSha = "2704fad6e3c68793d5d7ab0db69623337d77835a";
const std::string kTokenBucketAllowed = "*4\r\n:1\r\n:9\r\n:0\r\n:1796152014304715\r\n";
const std::string kTokenBucketDenied =
    "*4\r\n:1\r\n:0\r\n:0\r\n:1796152014805482\r\n*4\r\n:0\r\n:0\r\n:60000\r\n:"
    "1796152014805568\r\n";
const std::string kTokenBucketNever = "*4\r\n:0\r\n:5\r\n:-1\r\n:1796152015306224\r\n";
// incr_window: INCR (or INCRBY) and PEXPIRE, and GET of the previous window when sliding.
const std::string kIncrWindowFixed = ":1\r\n:1\r\n";
const std::string kIncrWindowSlidingAbsent = ":3\r\n:1\r\n$-1\r\n";
const std::string kIncrWindowSliding = ":4\r\n:1\r\n$2\r\n17\r\n";

// A pipeline of replies of every type.
const std::string kEveryType =
    "+OK\r\n-ERR x\r\n:42\r\n$5\r\nhe\r\no\r\n$0\r\n\r\n$-1\r\n*0\r\n*-1\r\n"
    "*3\r\n:1\r\n*2\r\n+a\r\n$-1\r\n$1\r\nz\r\n";

std::vector<Seed> seeds() {
  std::vector<Seed> s;
  const auto add = [&s](std::string name, Config config, std::string stream,
                        std::vector<std::uint8_t> pieces = {}) {
    s.push_back({std::move(name), config, std::move(pieces), std::move(stream)});
  };

  // Every reply type, and the numbers' edges.
  add("simple_string", kDefaults, "+OK\r\n");
  add("simple_string_empty", kDefaults, "+\r\n");
  add("error", kDefaults, "-ERR x\r\n");
  add("integer", kDefaults, ":42\r\n");
  add("integer_min", kDefaults, ":-9223372036854775808\r\n");
  add("integer_max", kDefaults, ":9223372036854775807\r\n");
  add("integer_non_canonical", kDefaults, ":007\r\n:-0\r\n$03\r\nabc\r\n*01\r\n:1\r\n");
  add("bulk_string", kDefaults, "$5\r\nhe\r\no\r\n");
  add("bulk_string_binary", kDefaults, "$6\r\n\0\r\n\r\r\n\r\n"s);
  add("bulk_string_empty", kDefaults, "$0\r\n\r\n");
  add("null_bulk", kDefaults, "$-1\r\n");
  add("array_empty", kDefaults, "*0\r\n");
  add("null_array", kDefaults, "*-1\r\n");
  add("every_type", kDefaults, kEveryType);

  // Nested arrays, to the default depth of 8 and one past it.
  add("nested", kDefaults, "*4\r\n:1\r\n*2\r\n+a\r\n$-1\r\n$3\r\nxyz\r\n*1\r\n*1\r\n-ERR x\r\n");
  add("depth_8", kDefaults, repeat("*1\r\n", 8) + ":1\r\n");
  add("depth_8_null_below", kDefaults, repeat("*1\r\n", 8) + "*-1\r\n");
  add("depth_9", kDefaults, repeat("*1\r\n", 8) + "*0\r\n");

  // The other default limits, where a seed stays small: 1024 values in one reply or over two
  // levels, 1025, and a bulk length of 64 MiB (waits for the data) or one more byte (refused).
  add("values_1024", kDefaults, "*1024\r\n" + repeat("+\r\n", 1024));
  add("values_1024_nested", kDefaults,
      "*2\r\n*511\r\n" + repeat("+\r\n", 511) + "*511\r\n" + repeat("+\r\n", 511));
  add("values_1025", kDefaults, "*1025\r\n");
  add("values_1025_nested", kDefaults, "*2\r\n*511\r\n" + repeat("+\r\n", 511) + "*512\r\n");
  add("bulk_64mib", kDefaults, "$67108864\r\n");
  add("bulk_over_64mib", kDefaults, "$67108865\r\n");

  // Tight limits, at the edge and one past it.
  add("max_line_16", kMaxLine16, "+0123456789abcdef\r\n:1796152014304715\r\n$-1\r\n");
  add("max_line_17", kMaxLine16, "+0123456789abcdefX\r\n");
  add("max_line_17_integer", kMaxLine16, ":-1796152014304715\r\n");
  add("max_line_17_unterminated", kMaxLine16, "-0123456789abcdefX");
  add("max_bulk_12", kMaxBulk12, "$12\r\n0123456789ab\r\n");
  add("max_bulk_13", kMaxBulk12, "$13\r\n");
  add("max_bulk_0", kMaxBulk0, "$0\r\n\r\n$-1\r\n$1\r\nx\r\n");
  add("max_values_4", kMaxValues4, "*4\r\n:1\r\n:2\r\n:3\r\n:4\r\n*2\r\n*1\r\n:1\r\n*1\r\n:2\r\n");
  add("max_values_5", kMaxValues4, "*3\r\n*2\r\n");
  add("max_values_0", kMaxValues0, "*0\r\n*-1\r\n*1\r\n");
  add("max_depth_2", kMaxDepth2, "*1\r\n*1\r\n:1\r\n*1\r\n*1\r\n*-1\r\n*1\r\n*1\r\n*0\r\n");
  add("max_depth_0", kMaxDepth0, ":1\r\n*-1\r\n*0\r\n");
  add("token_bucket_at_limits", kTokenBucketEdge, kTokenBucketAllowed + kTokenBucketNever);

  // Truncations: between CR and LF, inside a bulk string, before an array's last element, and
  // a pipeline of design replies cut inside its last reply.
  add("truncated_before_lf", kDefaults, "+OK\r");
  add("truncated_bulk", kDefaults, "$5\r\nhel");
  add("truncated_bulk_crlf", kDefaults, "$5\r\nhello\r");
  add("truncated_array", kDefaults, "*2\r\n:1\r\n");
  add("truncated_pipeline", kDefaults,
      (kTokenBucketAllowed + kIncrWindowSliding).substr(0, kTokenBucketAllowed.size() + 12));

  // Malformed: bare CR or LF, an unknown type byte (RESP3 replies, HTTP on the wrong port),
  // numbers that are not strict decimal or overflow, a bulk string without its CRLF, a good
  // reply followed by garbage.
  add("malformed_lines", kDefaults, "+OK\rX");
  add("malformed_bare_lf", kDefaults, "+O\nK\r\n");
  add("malformed_resp3", kDefaults, "%1\r\n+a\r\n:1\r\n_\r\n,1.5\r\n#t\r\n");
  add("malformed_http", kDefaults, "HTTP/1.1 400 Bad Request\r\n\r\n");
  add("malformed_integer", kDefaults, ":12a\r\n");
  add("malformed_integer_overflow", kDefaults, ":9223372036854775808\r\n");
  add("malformed_integer_plus", kDefaults, ":+1\r\n");
  add("malformed_bulk_length", kDefaults, "$-2\r\n");
  add("malformed_bulk_unterminated", kDefaults, "$3\r\nabcd\r\n");
  add("malformed_array_element", kDefaults, "*2\r\n:1\r\nfoo\r\n");
  add("malformed_after_reply", kDefaults, "+OK\r\ngarbage\r\n");

  // Pieces: a reply split between CR and LF, an empty read, a malformed and a refused reply
  // whose bytes arrive a few at a time, and a pipeline arriving in 7 pieces.
  add("pieces_crlf", kDefaults, kTokenBucketAllowed, {3, 6, 0, 20});
  add("pieces_malformed", kDefaults, "+OK\rX", {4});
  add("pieces_too_large", kDefaults, "$67108865\r\n", {2, 2, 5});
  add("pieces_line_limit", kMaxLine16, "+0123456789abcdefX\r\n", {10, 7, 1});
  add("pieces_every_type", kDefaults, kEveryType, {11, 11, 11, 11, 11, 11});

  // What the Redis designs get (redis-server 7.0.15): SCRIPT LOAD's SHA1 and PING in the
  // handshake; lua_token_bucket's EVALSHA replies and errors; incr_window's pipelines; the
  // errors any command can get.
  add("redis_script_load", kDefaults, "$40\r\n" + kScriptSha + "\r\n");
  add("redis_ping", kDefaults, "+PONG\r\n");
  add("redis_token_bucket_allowed", kDefaults, kTokenBucketAllowed);
  add("redis_token_bucket_denied", kDefaults, kTokenBucketDenied);
  add("redis_token_bucket_never", kDefaults, kTokenBucketNever);
  add("redis_noscript", kDefaults, "-NOSCRIPT No matching script. Please use EVAL.\r\n");
  add("redis_script_error", kDefaults,
      "-ERR user_script:4: attempt to perform arithmetic on a nil value script: " + kScriptSha +
          ", on @user_script:4.\r\n");
  add("redis_script_wrongtype", kDefaults,
      "+OK\r\n-WRONGTYPE Operation against a key holding the wrong kind of value script: " +
          kScriptSha + ", on @user_script:8.\r\n");
  add("redis_incr_window_fixed", kDefaults, kIncrWindowFixed);
  add("redis_incr_window_sliding", kDefaults, kIncrWindowSlidingAbsent + kIncrWindowSliding);
  add("redis_incr_errors", kDefaults,
      "-ERR value is not an integer or out of range\r\n:1\r\n"
      "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"
      "-ERR increment or decrement would overflow\r\n:0\r\n");
  add("redis_refusals", kDefaults,
      "-NOAUTH Authentication required.\r\n-ERR max number of clients reached\r\n"
      "-OOM command not allowed when used memory > 'maxmemory'.\r\n"
      "-ERR unknown command 'FOO', with args beginning with: \r\n");
  return s;
}

}  // namespace

int main(int argc, char* argv[]) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  std::filesystem::create_directories(dir);
  for (const Seed& seed : seeds()) {
    if (seed.pieces.size() > 15) {
      std::fprintf(stderr, "%s: more than 15 sized pieces\n", seed.name.c_str());
      return 1;
    }
    std::ofstream file(dir / seed.name, std::ios::binary | std::ios::trunc);
    file.put(static_cast<char>(seed.config.lines_and_bulk));
    file.put(static_cast<char>(seed.config.values_and_depth));
    file.put(static_cast<char>(seed.pieces.size()));
    for (const std::uint8_t size : seed.pieces) file.put(static_cast<char>(size));
    file.write(seed.stream.data(), static_cast<std::streamsize>(seed.stream.size()));
    if (!file) {
      std::fprintf(stderr, "cannot write %s\n", (dir / seed.name).c_str());
      return 1;
    }
  }
  return 0;
}
