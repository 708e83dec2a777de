// Parsing and printing of the values that flags, tools and rules take: counts, sizes and
// durations. Text only; the command-line checks built on them are cli/flags.h.
#pragma once

#include <cstdint>
#include <optional>
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

}  // namespace sluice
