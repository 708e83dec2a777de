// libFuzzer target: the rules library's parsers over arbitrary bytes, both formats (a Sluice
// rules file, and an envoyproxy/ratelimit config when the bytes have a top-level `domain`).
// Beyond "no crash, no throw, no read past the input" (AddressSanitizer), it checks:
//  - a refusal has at least one diagnostic, each with a message and a place inside the text
//    (or none, line 0);
//  - parsing is a function of the bytes: the same bytes give the same outcome and hash twice;
//  - a parsed envoy config answers a lookup built from the same bytes without crashing, and
//    every counted key it gives is within the longest key.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "rules/rule_set.h"

namespace {

void check(bool condition) {
  if (!condition) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace sluice::rules;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto first = RuleSet::parse(text, "fuzz.yaml");
  const auto second = RuleSet::parse(text, "fuzz.yaml");
  check(first.has_value() == second.has_value());
  if (!first) {
    check(!first.error().empty());
    check(first.error().size() == second.error().size());
    const int lines = 1 + static_cast<int>(std::count(text.begin(), text.end(), '\n'));
    for (const Diagnostic& d : first.error()) {
      check(!d.message.empty());
      check(d.line >= 0 && d.line <= lines + 1);
    }
    return 0;
  }
  check(first->hash() == second->hash());
  const EnvoyConfig& envoy = first->envoy();
  if (envoy.empty()) return 0;
  // A lookup from the input's own words: every domain name and entry is some slice of it.
  std::vector<EnvoyEntry> entries;
  for (std::size_t at = 0; at + 1 < size && entries.size() < 8; at += 1 + size / 8) {
    const std::string_view word = text.substr(at, std::min<std::size_t>(16, size - at));
    entries.push_back({word.substr(0, word.size() / 2), word.substr(word.size() / 2)});
  }
  for (std::size_t n = 0; n <= entries.size(); ++n) {
    const EnvoyMatch m =
        envoy.match(text.substr(0, std::min<std::size_t>(size, 12)), std::span(entries.data(), n));
    check(m.limit == nullptr || m.counted_key.size() <= kDefaultMaxKeyBytes);
  }
  return 0;
}
