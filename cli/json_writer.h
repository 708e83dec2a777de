// A minimal streaming JSON writer for the tools' --json output (sluice-load's summary,
// sluicectl's string escaping): no dependency, no DOM. Commas and string escaping are handled
// here; the caller supplies a well-formed sequence of calls (a key() before each value inside an
// object, balanced begin/end, nesting depth <= 64).
#pragma once

#include <charconv>
#include <concepts>
#include <cstdint>
#include <string>
#include <string_view>

namespace sluice::cli {

class JsonWriter {
 public:
  JsonWriter& begin_object();
  JsonWriter& end_object();
  JsonWriter& begin_array();
  JsonWriter& end_array();
  JsonWriter& key(std::string_view name);

  JsonWriter& value(std::string_view text);
  JsonWriter& value(const char* text) { return value(std::string_view(text)); }
  JsonWriter& value(bool flag);
  // NaN and infinities have no JSON form: they are written as null.
  JsonWriter& value(double number);
  template <std::integral T>
  requires(!std::same_as<T, bool>) JsonWriter& value(T number) {
    char digits[24];
    const auto result = std::to_chars(digits, digits + sizeof digits, number);
    return raw(std::string_view(digits, static_cast<std::size_t>(result.ptr - digits)));
  }
  JsonWriter& null();

  // key(name) then value(v).
  template <typename T>
  JsonWriter& field(std::string_view name, const T& v) {
    key(name);
    return value(v);
  }

  const std::string& str() const noexcept { return out_; }

  // `text` as a JSON string literal, quotes included, appended to `out`.
  static void append_quoted(std::string& out, std::string_view text);

 private:
  // Writes the separator a new element needs, then `token` verbatim.
  JsonWriter& raw(std::string_view token);
  void separate();
  // A new container (its first element needs no comma), and its end.
  JsonWriter& open(char bracket);
  JsonWriter& close(char bracket);

  std::string out_;
  std::uint64_t has_elements_ = 0;  // bit d: the open container at depth d has an element
  int depth_ = 0;
  bool after_key_ = false;
};

}  // namespace sluice::cli
