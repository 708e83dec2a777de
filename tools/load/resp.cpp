#include "tools/load/resp.h"

#include <limits>

namespace sluice::load {
namespace {

// Strict decimal: optional '-', then one or more digits, no overflow.
bool parse_int64(std::string_view text, std::int64_t& out) {
  if (text.empty()) return false;
  const char* begin = text.data();
  const char* end = begin + text.size();
  auto [ptr, ec] = std::from_chars(begin, end, out);
  return ec == std::errc() && ptr == end;
}

}  // namespace

void RespWriter::append_length_line(char type, std::size_t length) {
  char line[24];
  line[0] = type;
  const auto result = std::to_chars(line + 1, line + sizeof line - 2, length);
  char* end = result.ptr;
  *end++ = '\r';
  *end++ = '\n';
  buffer_.append(line, static_cast<std::size_t>(end - line));
}

void RespWriter::begin_command(std::size_t argc) {
  append_length_line('*', argc);
  ++commands_;
}

void RespWriter::arg(std::string_view value) {
  append_length_line('$', value.size());
  buffer_.append(value);
  buffer_.append("\r\n", 2);
}

void RespWriter::arg_concat(std::initializer_list<std::string_view> pieces) {
  std::size_t length = 0;
  for (const std::string_view piece : pieces) length += piece.size();
  append_length_line('$', length);
  for (const std::string_view piece : pieces) buffer_.append(piece);
  buffer_.append("\r\n", 2);
}

RespParser::RespParser() : RespParser(Limits{}) {}

RespParser::RespParser(const Limits& limits) : limits_(limits), values_(limits.max_values) {}

std::span<const RespValue> RespParser::elements(const RespValue& array) const noexcept {
  if (array.type != RespType::kArray || array.first > used_ || array.size > used_ - array.first) {
    return {};
  }
  return {values_.data() + array.first, array.size};
}

RespParseResult RespParser::parse(std::string_view input) noexcept {
  used_ = 0;
  RespParseResult result;
  std::size_t pos = 0;
  result.status = parse_value(input, pos, 0, result.value);
  if (result.status == RespStatus::kComplete) result.consumed = pos;
  return result;
}

// A line ends with CRLF; a CR or LF anywhere else is malformed. A line longer than max_line is
// refused without waiting for its end, so a peer cannot make us buffer without bound.
RespStatus RespParser::read_line(std::string_view input, std::size_t& pos,
                                 std::string_view& line) const noexcept {
  const std::size_t start = pos;
  for (std::size_t i = start; i < input.size(); ++i) {
    if (i - start > limits_.max_line) return RespStatus::kTooLarge;
    const char c = input[i];
    if (c == '\n') return RespStatus::kMalformed;
    if (c != '\r') continue;
    if (i + 1 == input.size()) return RespStatus::kNeedMore;
    if (input[i + 1] != '\n') return RespStatus::kMalformed;
    line = input.substr(start, i - start);
    pos = i + 2;
    return RespStatus::kComplete;
  }
  if (input.size() - start > limits_.max_line) return RespStatus::kTooLarge;
  return RespStatus::kNeedMore;
}

RespStatus RespParser::parse_value(std::string_view input, std::size_t& pos, int depth,
                                   RespValue& out) noexcept {
  if (pos >= input.size()) return RespStatus::kNeedMore;
  const char type = input[pos];
  if (type != '+' && type != '-' && type != ':' && type != '$' && type != '*') {
    return RespStatus::kMalformed;
  }
  std::size_t cursor = pos + 1;
  std::string_view line;
  if (const RespStatus status = read_line(input, cursor, line); status != RespStatus::kComplete) {
    return status;
  }

  out = RespValue{};
  switch (type) {
    case '+':
      out.type = RespType::kSimpleString;
      out.text = line;
      break;
    case '-':
      out.type = RespType::kError;
      out.text = line;
      break;
    case ':':
      out.type = RespType::kInteger;
      if (!parse_int64(line, out.integer)) return RespStatus::kMalformed;
      break;
    case '$': {
      std::int64_t length = 0;
      if (!parse_int64(line, length) || length < -1) return RespStatus::kMalformed;
      if (length == -1) {
        out.type = RespType::kNullBulk;
        break;
      }
      if (static_cast<std::uint64_t>(length) > limits_.max_bulk) return RespStatus::kTooLarge;
      const auto size = static_cast<std::size_t>(length);
      if (input.size() - cursor < size + 2) return RespStatus::kNeedMore;
      if (input[cursor + size] != '\r' || input[cursor + size + 1] != '\n') {
        return RespStatus::kMalformed;
      }
      out.type = RespType::kBulkString;
      out.text = input.substr(cursor, size);
      cursor += size + 2;
      break;
    }
    case '*': {
      std::int64_t count = 0;
      if (!parse_int64(line, count) || count < -1) return RespStatus::kMalformed;
      if (count == -1) {
        out.type = RespType::kNullArray;
        break;
      }
      if (depth >= limits_.max_depth) return RespStatus::kTooLarge;
      if (static_cast<std::uint64_t>(count) > limits_.max_values - used_) {
        return RespStatus::kTooLarge;
      }
      // The elements take a contiguous block now; nested arrays take theirs after it.
      const std::uint32_t first = used_;
      const auto size = static_cast<std::uint32_t>(count);
      used_ += size;
      for (std::uint32_t i = 0; i < size; ++i) {
        const RespStatus status = parse_value(input, cursor, depth + 1, values_[first + i]);
        if (status != RespStatus::kComplete) return status;
      }
      out.type = RespType::kArray;
      out.first = first;
      out.size = size;
      break;
    }
  }
  pos = cursor;
  return RespStatus::kComplete;
}

std::string_view resp_type_name(RespType type) {
  switch (type) {
    case RespType::kSimpleString:
      return "simple_string";
    case RespType::kError:
      return "error";
    case RespType::kInteger:
      return "integer";
    case RespType::kBulkString:
      return "bulk_string";
    case RespType::kNullBulk:
      return "null_bulk";
    case RespType::kArray:
      return "array";
    case RespType::kNullArray:
      return "null_array";
  }
  return "unknown";
}

}  // namespace sluice::load
