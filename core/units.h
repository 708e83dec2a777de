// Parsing of the sizes and durations that flags and tools accept.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace sluice {

// A whole decimal number: digits only (no sign, space or suffix). nullopt on anything else,
// including an empty string and a value above 2^64-1.
std::optional<std::uint64_t> parse_count(std::string_view text);

// "1048576", "512KiB", "64MiB", "1GiB"; "K"/"KB", "M"/"MB", "G"/"GB" are read as powers of
// 1024 too. nullopt on anything else (empty, negative, unknown suffix, overflow).
std::optional<std::uint64_t> parse_size(std::string_view text);

// "250ms", "60s", "5m", "1h", "1d"; a bare number is milliseconds. nullopt on anything else.
std::optional<std::uint64_t> parse_duration_ms(std::string_view text);

// A command-line flag whose value is refused; what() is the message for the user.
class FlagError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The mains' whole-number flags: parse_count(text) within [min, max], or throws FlagError
// "--FLAG: expected a whole number from MIN to MAX, got 'TEXT'".
std::uint64_t count_flag(std::string_view flag, std::string_view text, std::uint64_t min,
                         std::uint64_t max);

}  // namespace sluice
