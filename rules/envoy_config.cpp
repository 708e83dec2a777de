// Reading envoyproxy/ratelimit's YAML and looking limits up in it. The checks and their messages
// follow the peer's src/config/config_impl.go, each with the file, line and column yaml-cpp
// gives; yaml-cpp's exceptions are caught here and become diagnostics.
#include "rules/envoy_config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <limits>
#include <utility>

#include "core/units.h"
#include "rules/rule_set.h"

namespace sluice::rules {

namespace {

constexpr std::string_view kTopKeys[] = {"domain", "descriptors"};
constexpr std::string_view kDescriptorKeys[] = {
    "key",        "value",           "rate_limit",      "descriptors",     "shadow_mode",
    "quota_mode", "detailed_metric", "value_to_metric", "share_threshold", "metadata"};
// The peer's fields of a rate_limit, then Sluice's extensions.
constexpr std::string_view kRateLimitKeys[] = {
    "unit",      "requests_per_unit", "unlimited", "name",  "replaces",
    "algorithm", "unit_multiplier",   "period",    "burst", "failure_policy"};
constexpr std::string_view kReplacesKeys[] = {"name"};

bool contains(std::span<const std::string_view> names, std::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

// Keys escape the characters that join their parts.
void append_escaped(std::string& out, std::string_view text) {
  for (const char c : text) {
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
      case '=':
        out += "%3D";
        break;
      case ':':
        out += "%3A";
        break;
      default:
        out += c;
    }
  }
}

// Whether `value` matches `pattern`, where each '*' stands for any run of bytes (none too).
bool wildcard_match(std::string_view pattern, std::string_view value) {
  const std::size_t star = pattern.find('*');
  if (star == std::string_view::npos) return pattern == value;
  const std::string_view head = pattern.substr(0, star);
  if (!value.starts_with(head)) return false;
  value.remove_prefix(head.size());
  pattern.remove_prefix(star + 1);
  // The last literal part must end the value; the ones between match leftmost in order.
  const std::size_t last_star = pattern.rfind('*');
  const std::string_view tail =
      last_star == std::string_view::npos ? pattern : pattern.substr(last_star + 1);
  if (value.size() < tail.size() || !value.ends_with(tail)) return false;
  value.remove_suffix(tail.size());
  std::string_view middle =
      last_star == std::string_view::npos ? std::string_view() : pattern.substr(0, last_star);
  while (!middle.empty()) {
    const std::size_t next = middle.find('*');
    const std::string_view part = middle.substr(0, next);
    if (!part.empty()) {
      const std::size_t at = value.find(part);
      if (at == std::string_view::npos) return false;
      value.remove_prefix(at + part.size());
    }
    if (next == std::string_view::npos) break;
    middle.remove_prefix(next + 1);
  }
  return true;
}

}  // namespace

struct EnvoyConfig::Node {
  std::optional<EnvoyLimit> limit;
  bool share_threshold = false;  // requests matched by this wildcard share one counter
  std::string value;             // the value this node was configured with ("" for key-only)
  // Children by "key" (key only) or "key_value" (the peer's composite key), and the wildcard
  // ones again in file order.
  std::map<std::string, std::unique_ptr<Node>, std::less<>> children;
  std::vector<std::pair<std::string, const Node*>> wildcards;  // key, node (value has a '*')
  std::vector<std::string> wildcard_keys;                      // the entry keys of `wildcards`
};

std::optional<EnvoyUnit> parse_envoy_unit(std::string_view text) {
  std::string l;
  for (const char c : text) l += lower(c);
  if (l == "second") return EnvoyUnit::kSecond;
  if (l == "minute") return EnvoyUnit::kMinute;
  if (l == "hour") return EnvoyUnit::kHour;
  if (l == "day") return EnvoyUnit::kDay;
  if (l == "week") return EnvoyUnit::kWeek;
  if (l == "month") return EnvoyUnit::kMonth;
  if (l == "year") return EnvoyUnit::kYear;
  return std::nullopt;
}

std::string_view envoy_unit_name(EnvoyUnit unit) {
  switch (unit) {
    case EnvoyUnit::kSecond:
      return "SECOND";
    case EnvoyUnit::kMinute:
      return "MINUTE";
    case EnvoyUnit::kHour:
      return "HOUR";
    case EnvoyUnit::kDay:
      return "DAY";
    case EnvoyUnit::kWeek:
      return "WEEK";
    case EnvoyUnit::kMonth:
      return "MONTH";
    case EnvoyUnit::kYear:
      return "YEAR";
    case EnvoyUnit::kUnknown:
      break;
  }
  return "UNKNOWN";
}

std::uint64_t envoy_unit_seconds(EnvoyUnit unit) {
  switch (unit) {
    case EnvoyUnit::kSecond:
      return 1;
    case EnvoyUnit::kMinute:
      return 60;
    case EnvoyUnit::kHour:
      return 3600;
    case EnvoyUnit::kDay:
      return 86'400;
    case EnvoyUnit::kWeek:
      return 7 * 86'400;
    case EnvoyUnit::kMonth:
      return 30 * 86'400;
    case EnvoyUnit::kYear:
      return 365 * 86'400;
    case EnvoyUnit::kUnknown:
      break;
  }
  return 0;
}

EnvoyConfig::EnvoyConfig() = default;
EnvoyConfig::~EnvoyConfig() = default;
EnvoyConfig::EnvoyConfig(EnvoyConfig&&) noexcept = default;
EnvoyConfig& EnvoyConfig::operator=(EnvoyConfig&&) noexcept = default;

bool EnvoyConfig::recognizes(std::string_view text) {
  try {
    const YAML::Node root = YAML::Load(std::string(text));
    return root.IsMap() && (root["domain"].IsDefined() || root["descriptors"].IsDefined());
  } catch (const std::exception&) {
    // Not YAML: still the peer's when a line starts with "domain:", so the error the user sees
    // is the peer's "error loading config file" rather than one about Sluice's own fields.
    for (std::size_t at = 0; at < text.size();) {
      const std::string_view line = text.substr(at);
      if (line.starts_with("domain:") || line.starts_with("descriptors:")) return true;
      const std::size_t end = text.find('\n', at);
      if (end == std::string_view::npos) break;
      at = end + 1;
    }
    return false;
  }
}

bool EnvoyConfig::has_domain(std::string_view domain) const {
  return domains_.find(domain) != domains_.end();
}

namespace {

// Reads one file into a domain's tree; every mistake becomes a diagnostic.
class EnvoyReader {
 public:
  EnvoyReader(std::string_view file, const EnvoyConfigOptions& options,
              std::vector<Diagnostic>& errors)
      : file_(file), options_(options), errors_(errors) {}

  void error(const YAML::Node& at, std::string message) {
    const YAML::Mark mark = at.Mark();
    errors_.push_back(Diagnostic{file_, mark.line + 1, mark.column + 1, std::move(message)});
  }
  void error(const YAML::Mark& mark, std::string message) {
    errors_.push_back(Diagnostic{file_, mark.line + 1, mark.column + 1, std::move(message)});
  }
  std::size_t error_count() const { return errors_.size(); }

  // The peer's key check: every key a string and known where it stands; lists hold maps.
  bool check_keys(const YAML::Node& map, std::span<const std::string_view> allowed) {
    bool ok = true;
    for (auto it = map.begin(); it != map.end(); ++it) {
      if (!it->first.IsScalar()) {
        error(it->first, "config error, key is not of type string");
        ok = false;
        continue;
      }
      const std::string& name = it->first.Scalar();
      if (!contains(allowed, name)) {
        error(it->first, "config error, unknown key '" + name + "'");
        ok = false;
      }
    }
    return ok;
  }

  std::optional<std::string> scalar(const YAML::Node& map, std::string_view field) {
    const YAML::Node node = map[std::string(field)];
    if (!node.IsDefined() || node.IsNull()) return std::string();
    if (!node.IsScalar()) {
      error(node, "config error, '" + std::string(field) + "' is not a value");
      return std::nullopt;
    }
    return node.Scalar();
  }

  std::optional<bool> flag(const YAML::Node& map, std::string_view field) {
    const YAML::Node node = map[std::string(field)];
    if (!node.IsDefined() || node.IsNull()) return false;
    bool value = false;
    if (!node.IsScalar() || !YAML::convert<bool>::decode(node, value)) {
      error(node, "config error, '" + std::string(field) + "' is not true or false");
      return std::nullopt;
    }
    return value;
  }

  std::optional<std::uint64_t> number(const YAML::Node& map, std::string_view field,
                                      std::uint64_t max) {
    const YAML::Node node = map[std::string(field)];
    if (!node.IsDefined() || node.IsNull()) return 0;
    const auto n = node.IsScalar() ? parse_count(node.Scalar()) : std::nullopt;
    if (!n || *n > max) {
      error(node, "config error, '" + std::string(field) + "' is not a whole number up to " +
                      std::to_string(max));
      return std::nullopt;
    }
    return *n;
  }

  std::optional<EnvoyLimit> rate_limit(const YAML::Node& node, const std::string& full_key,
                                       bool shadow, bool detailed) {
    if (!node.IsMap()) {
      error(node, "config error, rate_limit is not a mapping");
      return std::nullopt;
    }
    if (!check_keys(node, kRateLimitKeys)) return std::nullopt;
    const std::size_t before = error_count();
    EnvoyLimit limit;
    limit.stats_key = full_key;
    limit.shadow = shadow;
    limit.detailed_metric = detailed;
    const auto unlimited = flag(node, "unlimited");
    const auto unit_text = scalar(node, "unit");
    const auto requests =
        number(node, "requests_per_unit", std::numeric_limits<std::uint32_t>::max());
    const auto name = scalar(node, "name");
    if (!unlimited || !unit_text || !requests || !name) return std::nullopt;
    limit.unlimited = *unlimited;
    limit.requests_per_unit = static_cast<std::uint32_t>(*requests);
    limit.name = *name;
    const auto unit = parse_envoy_unit(*unit_text);
    const YAML::Node at_unit = node["unit"].IsDefined() ? node["unit"] : node;
    if (limit.unlimited) {
      if (unit) error(at_unit, "should not specify rate limit unit when unlimited");
    } else if (!unit) {
      error(at_unit, "invalid rate limit unit '" + *unit_text + "'");
    } else {
      limit.unit = *unit;
    }
    if (const YAML::Node replaces = node["replaces"]; replaces.IsDefined() && !replaces.IsNull()) {
      if (!replaces.IsSequence()) {
        error(replaces, "config error, replaces is not a list");
      } else {
        for (const YAML::Node& item : replaces) {
          if (!item.IsMap()) {
            error(item, "config error, yaml file contains list of type other than map");
            continue;
          }
          if (!check_keys(item, kReplacesKeys)) continue;
          const auto replaced = scalar(item, "name");
          if (!replaced) continue;
          if (replaced->empty()) {
            error(item, "should not have an empty replaces entry");
          } else if (*replaced == limit.name) {
            error(item, "replaces should not contain name of same descriptor");
          } else {
            limit.replaces.push_back(*replaced);
          }
        }
      }
    }
    extensions(node, limit);
    if (error_count() != before) return std::nullopt;
    return limit;
  }

  // Sluice's fields: the rule the cluster decides by, and the failure policy.
  void extensions(const YAML::Node& node, EnvoyLimit& limit) {
    Rule rule;
    rule.algorithm = Algorithm::kFixedWindow;
    rule.limit = limit.requests_per_unit;
    const std::uint64_t unit_ms = envoy_unit_seconds(limit.unit) * 1000;
    rule.period_ms = unit_ms;
    if (const YAML::Node a = node["algorithm"]; a.IsDefined()) {
      const auto algorithm = a.IsScalar() ? parse_algorithm(a.Scalar()) : std::nullopt;
      if (!algorithm) {
        error(a,
              "algorithm: expected fixed_window, sliding_window, sliding_log, token_bucket or "
              "gcra");
      } else {
        rule.algorithm = *algorithm;
      }
      limit.extended = true;
    }
    const YAML::Node multiplier = node["unit_multiplier"];
    const YAML::Node period = node["period"];
    if (multiplier.IsDefined() && period.IsDefined()) {
      error(period, "period: give either unit_multiplier or period, not both");
    } else if (multiplier.IsDefined()) {
      const auto m = number(node, "unit_multiplier", 1'000'000);
      if (m && *m == 0) error(multiplier, "unit_multiplier: must be at least 1");
      if (m && *m > 0) rule.period_ms = unit_ms * *m;
      limit.extended = true;
    } else if (period.IsDefined()) {
      const auto ms = period.IsScalar() ? parse_duration_ms(period.Scalar()) : std::nullopt;
      if (!ms || *ms == 0) {
        error(period, "period: expected a duration such as 90s, 5m or 1h");
      } else {
        rule.period_ms = *ms;
      }
      limit.extended = true;
    }
    if (node["burst"].IsDefined()) {
      if (const auto b = number(node, "burst", std::numeric_limits<std::uint32_t>::max())) {
        rule.burst = static_cast<std::uint32_t>(*b);
      }
      limit.extended = true;
    }
    if (const YAML::Node f = node["failure_policy"]; f.IsDefined()) {
      const std::string text = f.IsScalar() ? f.Scalar() : "";
      if (text == "open") {
        limit.on_failure = OnFailure::kOpen;
      } else if (text == "closed") {
        limit.on_failure = OnFailure::kClosed;
      } else {
        error(f, "failure_policy: expected open or closed");
      }
    }
    if (limit.unlimited) {
      if (limit.extended) error(node, "rate_limit: an unlimited limit has no algorithm or period");
      return;
    }
    if (limit.unit == EnvoyUnit::kUnknown) return;  // reported already
    if (rule.period_ms > kMaxPeriodMs) {
      error(node, "rate_limit: the period is longer than 366 days");
      return;
    }
    if (const RuleError e = validate(rule, 1, options_.sliding_log_cap);
        e != RuleError::kOk && rule.limit > 0) {
      error(node, "rate_limit: " + std::string(describe(e)));
      return;
    }
    limit.rule = rule;
  }

  // The peer's loadDescriptors: `parent` gets the children listed in `list`.
  void descriptors(const YAML::Node& list, const std::string& parent_key, EnvoyConfig::Node& parent,
                   std::size_t& limits) {
    if (!list.IsDefined() || list.IsNull()) return;
    if (!list.IsSequence()) {
      error(list, "config error, descriptors is not a list");
      return;
    }
    for (const YAML::Node& item : list) {
      if (!item.IsMap()) {
        error(item, "config error, yaml file contains list of type other than map");
        continue;
      }
      if (!check_keys(item, kDescriptorKeys)) continue;
      const auto key = scalar(item, "key");
      const auto value = scalar(item, "value");
      const auto shadow = flag(item, "shadow_mode");
      const auto detailed = flag(item, "detailed_metric");
      const auto share = flag(item, "share_threshold");
      const auto quota = flag(item, "quota_mode");
      const auto value_to_metric = flag(item, "value_to_metric");
      if (!key || !value || !shadow || !detailed || !share || !quota || !value_to_metric) continue;
      if (key->empty()) {
        error(item, "descriptor has empty key");
        continue;
      }
      if (*quota) {
        error(item["quota_mode"], "quota_mode is not supported by Sluice");
        continue;
      }
      std::string final_key = *key;
      if (!value->empty()) final_key += "_" + *value;
      const std::string full_key = parent_key + final_key;
      if (parent.children.find(final_key) != parent.children.end()) {
        error(item, "duplicate descriptor composite key '" + full_key + "'");
        continue;
      }
      const bool wildcard = value->find('*') != std::string::npos;
      if (*share && !wildcard) {
        error(item["share_threshold"],
              "share_threshold can only be used with wildcard values (containing '*'), but found "
              "key '" +
                  final_key + "'");
        continue;
      }
      auto node = std::make_unique<EnvoyConfig::Node>();
      node->value = *value;
      node->share_threshold = *share;
      if (const YAML::Node r = item["rate_limit"]; r.IsDefined() && !r.IsNull()) {
        // A bad limit is reported; the entry stays, so a duplicate of it is reported too.
        if (auto limit = rate_limit(r, full_key, *shadow, *detailed)) {
          node->limit = std::move(limit);
          ++limits;
        }
      }
      descriptors(item["descriptors"], full_key + ".", *node, limits);
      if (wildcard) {
        parent.wildcards.emplace_back(*value, node.get());
        parent.wildcard_keys.push_back(*key);
      }
      parent.children.emplace(final_key, std::move(node));
    }
  }

 private:
  std::string file_;
  const EnvoyConfigOptions& options_;
  std::vector<Diagnostic>& errors_;
};

}  // namespace

void EnvoyConfig::add_file(std::string_view yaml_text, std::string_view file_name,
                           const EnvoyConfigOptions& options, std::vector<Diagnostic>& errors) {
  max_key_bytes_ = std::max(options.max_key_bytes, kMinMaxKeyBytes);
  const std::size_t before = errors.size();
  EnvoyReader reader(file_name, options, errors);
  try {
    const YAML::Node root = YAML::Load(std::string(yaml_text));
    if (!root.IsMap()) {
      reader.error(root, "config error, expected a mapping with domain and descriptors");
      return;
    }
    if (!reader.check_keys(root, kTopKeys)) return;
    const auto domain = reader.scalar(root, "domain");
    if (!domain) return;
    if (domain->empty()) {
      reader.error(root["domain"].IsDefined() ? root["domain"] : root,
                   "config file cannot have empty domain");
      return;
    }
    const auto existing = domains_.find(*domain);
    if (existing != domains_.end() && !options.merge_domains) {
      reader.error(root["domain"], "duplicate domain '" + *domain + "' in config file");
      return;
    }
    // Merging into a domain that exists: read into a copy of nothing but the new entries
    // first, so a file with an error leaves the domain as it was.
    auto fresh = std::make_unique<Node>();
    std::size_t limits = 0;
    Node& target = existing != domains_.end() ? *existing->second : *fresh;
    // Duplicates against the entries already there are errors too (the peer's merge).
    Node staged;
    for (const auto& [k, child] : target.children) staged.children.emplace(k, nullptr);
    reader.descriptors(root["descriptors"], *domain + ".", staged, limits);
    if (errors.size() != before) return;
    for (auto& [k, child] : staged.children) {
      if (child) target.children.emplace(k, std::move(child));
    }
    for (std::size_t i = 0; i < staged.wildcards.size(); ++i) {
      target.wildcards.push_back(staged.wildcards[i]);
      target.wildcard_keys.push_back(staged.wildcard_keys[i]);
    }
    if (existing == domains_.end()) domains_.emplace(*domain, std::move(fresh));
    limit_count_ += limits;
  } catch (const YAML::Exception& e) {
    reader.error(e.mark, "error loading config file: " + e.msg);
  }
}

std::string EnvoyConfig::counted_key(std::string_view domain, std::span<const EnvoyEntry> entries,
                                     std::span<const std::string_view> shared) const {
  std::string tail;
  append_escaped(tail, domain);
  tail += ':';
  for (std::size_t i = 0; i < entries.size(); ++i) {
    if (i > 0) tail += '|';
    append_escaped(tail, entries[i].key);
    tail += '=';
    append_escaped(tail, i < shared.size() && !shared[i].empty() ? shared[i] : entries[i].value);
  }
  return RuleSet::counted_key("@rls", "envoy", tail, max_key_bytes_);
}

EnvoyMatch EnvoyConfig::match(std::string_view domain, std::span<const EnvoyEntry> entries) const {
  EnvoyMatch out;
  const auto found = domains_.find(domain);
  if (found == domains_.end() || entries.empty()) return out;
  const Node* level = found->second.get();
  std::vector<std::string_view> shared;  // sized at the first wildcard that shares its counter
  std::string composite;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const EnvoyEntry& entry = entries[i];
    composite.assign(entry.key).append(1, '_').append(entry.value);
    const Node* next = nullptr;
    if (const auto exact = level->children.find(composite); exact != level->children.end()) {
      next = exact->second.get();
    }
    if (next == nullptr) {
      for (std::size_t w = 0; w < level->wildcards.size(); ++w) {
        if (level->wildcard_keys[w] == entry.key &&
            wildcard_match(level->wildcards[w].first, entry.value)) {
          next = level->wildcards[w].second;
          if (next->share_threshold) {
            shared.resize(entries.size());
            shared[i] = next->value;
          }
          break;
        }
      }
    }
    if (next == nullptr) {
      if (const auto key_only = level->children.find(entry.key);
          key_only != level->children.end()) {
        next = key_only->second.get();
      }
    }
    if (next == nullptr) break;
    if (next->limit && i + 1 == entries.size()) out.limit = &*next->limit;
    if (next->children.empty()) break;
    level = next;
  }
  if (out.limit == nullptr) return out;
  out.counted_key = counted_key(domain, entries, shared);
  if (out.limit->detailed_metric) {
    // A limit is only found on the last entry, so every entry is in its name.
    out.stats_key.assign(domain);
    for (const EnvoyEntry& entry : entries) {
      out.stats_key.append(1, '.').append(entry.key).append(1, '_').append(entry.value);
    }
  } else {
    out.stats_key = out.limit->stats_key;
  }
  return out;
}

}  // namespace sluice::rules
