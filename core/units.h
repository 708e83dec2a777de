// Parsing and printing of the values that flags and tools take: counts, sizes, durations and
// HOST:PORT endpoints. The *_flag helpers throw FlagError with the message a user sees.
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

// "250ms", "60s", "5m", "1h", "1d". The unit is required: a bare number ("60": seconds or
// milliseconds?) is nullopt, as is anything else that is not a whole number and a unit.
std::optional<std::uint64_t> parse_duration_ms(std::string_view text);

// The shortest exact text parse_duration_ms reads back: "366d", "90s", "1500ms", "0ms".
std::string format_duration_ms(std::uint64_t ms);

// "127.0.0.1:7420", "[::1]:7420": an IPv6 address (any host containing ':') in brackets, the
// form client::split_host_port reads back.
std::string format_host_port(std::string_view host, std::uint16_t port);

// A command-line flag whose value is refused; what() is the message for the user.
class FlagError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The mains' whole-number flags: parse_count(text) within [min, max], or throws FlagError
// "--FLAG TEXT: must be MIN..MAX" (out of range) or "--FLAG TEXT: expected a whole number
// MIN..MAX" (not a number).
std::uint64_t count_flag(std::string_view flag, std::string_view text, std::uint64_t min,
                         std::uint64_t max);

// The mains' duration flags, in ms: parse_duration_ms(text) within [min_ms, max_ms]. A bare
// "0" is taken where 0 is in range (it means "off" or "none"); any other bare number throws
// FlagError "--FLAG 60: give a unit, e.g. 60s". Out of range: "--FLAG TEXT: must be 1ms..366d"
// (or "0..366d").
std::uint64_t duration_flag(std::string_view flag, std::string_view text, std::uint64_t min_ms,
                            std::uint64_t max_ms);

}  // namespace sluice
