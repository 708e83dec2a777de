// RESP2, the Redis serialization protocol: enough of it to drive Redis without a client library.
//
// RespWriter appends commands (arrays of bulk strings) to a reused buffer: once the buffer has
// grown to a batch's size, appending allocates nothing.
//
// RespParser parses one reply from the front of a byte span. It never reads past the span, never
// throws and never allocates after construction. A reply that is not complete yet yields
// kNeedMore; the caller appends more bytes and calls again with the span starting at the same
// reply (the parser keeps no state between calls, so a partial reply is re-scanned; replies
// this tool reads are tens of bytes). Anything that is not RESP2 yields kMalformed, and the
// connection should be dropped: there is no way to resynchronise a byte stream.
#pragma once

#include <charconv>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::load {

class RespWriter {
 public:
  // Appends one command: an array of bulk strings, one per argument. Arguments are string-like
  // (sent as is) or integers (sent in decimal).
  template <typename... Args>
  void command(const Args&... args) {
    begin_command(sizeof...(args));
    (arg(args), ...);
  }

  // The same, an argument at a time. REQUIRES: exactly `argc` arg() calls follow.
  void begin_command(std::size_t argc);
  void arg(std::string_view value);
  // One argument made of several pieces, e.g. {"{", key, "}:", window}: no temporary string.
  void arg_concat(std::initializer_list<std::string_view> pieces);
  template <std::integral T>
  requires(!std::same_as<T, bool> && !std::same_as<T, char>) void arg(T value) {
    char digits[24];
    const auto result = std::to_chars(digits, digits + sizeof digits, value);
    arg(std::string_view(digits, static_cast<std::size_t>(result.ptr - digits)));
  }

  std::string_view view() const noexcept { return buffer_; }
  std::size_t size() const noexcept { return buffer_.size(); }
  bool empty() const noexcept { return buffer_.empty(); }
  // Commands appended since the last clear().
  std::size_t commands() const noexcept { return commands_; }
  // Forgets the contents and keeps the capacity.
  void clear() noexcept {
    buffer_.clear();
    commands_ = 0;
  }
  void reserve(std::size_t bytes) { buffer_.reserve(bytes); }

 private:
  void append_length_line(char type, std::size_t length);

  std::string buffer_;
  std::size_t commands_ = 0;
};

enum class RespType : std::uint8_t {
  kSimpleString,  // +OK
  kError,         // -ERR message
  kInteger,       // :42
  kBulkString,    // $3 abc
  kNullBulk,      // $-1 (GET of a missing key)
  kArray,         // *2 ...
  kNullArray,     // *-1
};

struct RespValue {
  RespType type = RespType::kNullBulk;
  std::int64_t integer = 0;  // kInteger
  std::string_view text;     // kSimpleString, kError (without the '-'), kBulkString
  std::uint32_t size = 0;    // kArray: element count
  std::uint32_t first = 0;   // kArray: index of its first element in the parser's table
};

enum class RespStatus : std::uint8_t {
  kComplete,   // `value` holds the reply, `consumed` bytes of input were used
  kNeedMore,   // the input ends inside the first reply
  kMalformed,  // not RESP2
  kTooLarge,   // over one of RespParser::Limits
};

struct RespParseResult {
  RespStatus status = RespStatus::kNeedMore;
  std::size_t consumed = 0;  // > 0 only when kComplete
  RespValue value;
};

class RespParser {
 public:
  struct Limits {
    std::size_t max_bulk = 64u << 20;  // bytes in one bulk string
    std::size_t max_line = 64u << 10;  // bytes in one line: simple string, error, integer, length
    std::uint32_t max_values = 1024;   // array elements in one reply, all levels together
    int max_depth = 8;                 // array nesting
  };

  RespParser();  // default Limits
  explicit RespParser(const Limits& limits);

  // Parses the reply at the front of `input`. Views in the result point into `input`, and array
  // elements live in this parser: both stay valid until the input bytes change or the next
  // parse() call.
  RespParseResult parse(std::string_view input) noexcept;

  // The elements of an array value returned by the last parse(). Empty for any other type.
  std::span<const RespValue> elements(const RespValue& array) const noexcept;

 private:
  RespStatus parse_value(std::string_view input, std::size_t& pos, int depth,
                         RespValue& out) noexcept;
  RespStatus read_line(std::string_view input, std::size_t& pos,
                       std::string_view& line) const noexcept;

  Limits limits_;
  std::vector<RespValue> values_;  // sized once to limits_.max_values
  std::uint32_t used_ = 0;
};

// "simple_string", "error", ...: for messages and tests.
std::string_view resp_type_name(RespType type);

}  // namespace sluice::load
