#include "cli/json_writer.h"

#include <cmath>

#include "core/json_text.h"

namespace sluice::cli {

void JsonWriter::separate() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (depth_ == 0) return;
  const std::uint64_t bit = std::uint64_t{1} << (depth_ - 1);
  if (has_elements_ & bit) out_ += ',';
  has_elements_ |= bit;
}

JsonWriter& JsonWriter::raw(std::string_view token) {
  separate();
  out_.append(token);
  return *this;
}

JsonWriter& JsonWriter::open(char bracket) {
  raw(std::string_view(&bracket, 1));
  ++depth_;
  has_elements_ &= ~(std::uint64_t{1} << (depth_ - 1));
  return *this;
}

JsonWriter& JsonWriter::close(char bracket) {
  --depth_;
  out_ += bracket;
  return *this;
}

JsonWriter& JsonWriter::begin_object() { return open('{'); }
JsonWriter& JsonWriter::end_object() { return close('}'); }
JsonWriter& JsonWriter::begin_array() { return open('['); }
JsonWriter& JsonWriter::end_array() { return close(']'); }

JsonWriter& JsonWriter::key(std::string_view name) {
  separate();
  append_quoted(out_, name);
  out_ += ':';
  after_key_ = true;
  return *this;
}

JsonWriter& JsonWriter::value(std::string_view text) {
  separate();
  append_quoted(out_, text);
  return *this;
}

JsonWriter& JsonWriter::value(bool flag) { return raw(flag ? "true" : "false"); }

JsonWriter& JsonWriter::value(double number) {
  if (!std::isfinite(number)) return null();
  char digits[32];
  const auto result = std::to_chars(digits, digits + sizeof digits, number);
  return raw(std::string_view(digits, static_cast<std::size_t>(result.ptr - digits)));
}

JsonWriter& JsonWriter::null() { return raw("null"); }

void JsonWriter::append_quoted(std::string& out, std::string_view text) {
  append_json_string(out, text);
}

}  // namespace sluice::cli
