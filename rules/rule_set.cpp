#include "rules/rule_set.h"

#include <xxhash.h>

#include <algorithm>

#include "rules/read_file.h"

namespace sluice::rules {

namespace {

// Key values escape these so that '|' only joins parts and '#' only marks a cut value.
void append_escaped(std::string& out, std::string_view value) {
  for (const char c : value) {
    switch (c) {
      case '%':
        out += "%25";
        break;
      case '|':
        out += "%7C";
        break;
      case '#':
        out += "%23";
        break;
      default:
        out += c;
    }
  }
}

bool any_equal_ignoring_case(const std::vector<std::string>& options, std::string_view value) {
  return std::any_of(options.begin(), options.end(),
                     [&](const std::string& o) { return equal_ignoring_case(o, value); });
}

bool applies(const Match& m, const RequestAttributes& request, std::string_view path) {
  if (!m.methods.empty() && !any_equal_ignoring_case(m.methods, request.method)) return false;
  if (!m.paths.empty() && std::find(m.paths.begin(), m.paths.end(), path) == m.paths.end()) {
    return false;
  }
  if (!m.path_prefixes.empty() &&
      std::none_of(m.path_prefixes.begin(), m.path_prefixes.end(),
                   [&](const std::string& prefix) { return path.starts_with(prefix); })) {
    return false;
  }
  for (const auto& [name, values] : m.headers) {
    const auto value = request.header(name);
    if (!value || std::find(values.begin(), values.end(), *value) == values.end()) return false;
  }
  return true;
}

// The part's value in `request`; empty when the request lacks it.
std::string_view part_value(const KeyPart& part, const RequestAttributes& request,
                            std::string_view path) {
  switch (part.kind) {
    case KeyPart::Kind::kHeader:
      return request.header(part.header).value_or(std::string_view{});
    case KeyPart::Kind::kClientIp:
      return request.client_ip;
    case KeyPart::Kind::kMethod:
      return request.method;
    case KeyPart::Kind::kPath:
      return path;
    case KeyPart::Kind::kEveryone:
      return "*";
  }
  return {};
}

}  // namespace

std::string Diagnostic::to_string() const {
  if (line <= 0) return file + ": " + message;
  return file + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " + message;
}

bool equal_ignoring_case(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; };
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

std::optional<std::string_view> RequestAttributes::header(std::string_view name) const {
  for (const auto& [n, value] : headers) {
    if (equal_ignoring_case(n, name)) return value;
  }
  return std::nullopt;
}

std::string_view RequestAttributes::path_only() const {
  return path.substr(0, std::min(path.find('?'), path.size()));
}

std::string escape_key_value(std::string_view value) {
  std::string out;
  append_escaped(out, value);
  return out;
}

std::string hash_hex(std::string_view bytes) {
  const XXH128_hash_t h = XXH3_128bits(bytes.data(), bytes.size());
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(32, '0');
  for (int i = 0; i < 16; ++i) {
    out[15 - i] = kDigits[(h.high64 >> (4 * i)) & 0xf];
    out[31 - i] = kDigits[(h.low64 >> (4 * i)) & 0xf];
  }
  return out;
}

std::string RuleSet::counted_key(std::string_view match, std::string_view policy,
                                 std::string_view key_value, std::size_t max_key_bytes) {
  std::string key;
  key.reserve(match.size() + policy.size() + 2 + key_value.size());
  key.append(match).append(1, ':').append(policy).append(1, ':');
  // Names are at most kMaxNameBytes, so the budget leaves room for "x#" and the hash.
  const std::size_t budget = std::max(max_key_bytes, kMinMaxKeyBytes) - key.size();
  if (key_value.size() <= budget) {
    key.append(key_value);
  } else {
    key.append(key_value.substr(0, budget - 33)).append(1, '#').append(hash_hex(key_value));
  }
  return key;
}

void RuleSet::match(const RequestAttributes& request, std::vector<Limit>& out) const {
  out.clear();
  const std::string_view path = request.path_only();
  std::string value;
  for (const Match& m : matches_) {
    if (!applies(m, request, path)) continue;
    value.clear();
    bool complete = true;
    for (std::size_t i = 0; i < m.key.size() && complete; ++i) {
      const std::string_view part = part_value(m.key[i], request, path);
      complete = !part.empty();
      if (i > 0) value += '|';
      append_escaped(value, part);
    }
    if (!complete) continue;  // a request without the key's attribute: the match does not apply

    const PolicyIndices* chosen = &m.policies;
    Via via = Via::kPolicies;
    std::string_view tier;
    if (const auto o = m.overrides.find(value); o != m.overrides.end()) {
      chosen = &o->second;
      via = Via::kOverride;
    } else if (!m.tiers.empty()) {
      if (const auto t = request.header(tier_header_)) {
        if (const auto found = m.tiers.find(*t); found != m.tiers.end()) {
          chosen = &found->second;
          via = Via::kTier;
          tier = found->first;
        }
      }
    }
    for (const std::uint32_t index : *chosen) {
      const Policy& policy = policies_[index];
      out.push_back(Limit{&policy, counted_key(m.name, policy.name, value, max_key_bytes_), m.name,
                          via, tier});
    }
  }
}

std::vector<Limit> RuleSet::match(const RequestAttributes& request) const {
  std::vector<Limit> out;
  match(request, out);
  return out;
}

const Policy* RuleSet::policy(std::string_view name) const {
  const auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &policies_[it->second];
}

ParseResult RuleSet::load(const std::filesystem::path& path, const RuleSetOptions& options) {
  auto files = read_rules(path);
  if (!files) {
    return Unexpected{std::vector<Diagnostic>{
        Diagnostic{path.string(), 0, 0, "cannot read the file: " + files.error()}}};
  }
  if (files->size() == 1 && files->front().name == path.string()) {
    return parse(files->front().bytes, path.string(), options);
  }
  return parse_files(*files, path.string(), options);
}

}  // namespace sluice::rules
