#include "core/units.h"

#include <charconv>
#include <limits>
#include <utility>

namespace sluice {
namespace {

// Splits "64MiB" into 64 and "MiB". nullopt when there is no leading number.
std::optional<std::pair<std::uint64_t, std::string_view>> split_number(std::string_view text) {
  std::uint64_t value = 0;
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec != std::errc() || ptr == begin) return std::nullopt;
  return std::pair{value, std::string_view(ptr, static_cast<std::size_t>(end - ptr))};
}

std::optional<std::uint64_t> scale(std::uint64_t value, std::uint64_t unit) {
  if (value > std::numeric_limits<std::uint64_t>::max() / unit) return std::nullopt;
  return value * unit;
}

}  // namespace

std::optional<std::uint64_t> parse_count(std::string_view text) {
  auto parts = split_number(text);
  if (!parts || !parts->second.empty()) return std::nullopt;
  return parts->first;
}

std::optional<std::uint64_t> parse_size(std::string_view text) {
  auto parts = split_number(text);
  if (!parts) return std::nullopt;
  auto [value, suffix] = *parts;
  struct Unit {
    std::string_view name;
    std::uint64_t bytes;
  };
  static constexpr Unit kUnits[] = {
      {"", 1},
      {"B", 1},
      {"K", 1ull << 10},
      {"KB", 1ull << 10},
      {"KiB", 1ull << 10},
      {"M", 1ull << 20},
      {"MB", 1ull << 20},
      {"MiB", 1ull << 20},
      {"G", 1ull << 30},
      {"GB", 1ull << 30},
      {"GiB", 1ull << 30},
      {"T", 1ull << 40},
      {"TB", 1ull << 40},
      {"TiB", 1ull << 40},
  };
  for (const Unit& unit : kUnits) {
    if (suffix == unit.name) return scale(value, unit.bytes);
  }
  return std::nullopt;
}

namespace {

struct DurationUnit {
  std::string_view name;
  std::uint64_t ms;
};
// Largest first: format_duration_ms picks the largest unit that divides exactly.
constexpr DurationUnit kDurationUnits[] = {
    {"d", 86'400'000}, {"h", 3'600'000}, {"m", 60'000}, {"s", 1000}, {"ms", 1},
};

}  // namespace

std::optional<std::uint64_t> parse_duration_ms(std::string_view text) {
  auto parts = split_number(text);
  if (!parts) return std::nullopt;
  auto [value, suffix] = *parts;
  for (const DurationUnit& unit : kDurationUnits) {
    if (suffix == unit.name) return scale(value, unit.ms);
  }
  return std::nullopt;
}

std::string format_duration_ms(std::uint64_t ms) {
  for (const DurationUnit& unit : kDurationUnits) {
    if (ms != 0 && ms % unit.ms == 0) return std::to_string(ms / unit.ms) + std::string(unit.name);
  }
  return std::to_string(ms) + "ms";
}

}  // namespace sluice
