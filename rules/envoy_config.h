// envoyproxy/ratelimit's configuration files, read unchanged: domains of nested descriptors
// with their limits, and the lookup that finds the limit of a request's descriptor the way that
// service does (docs/GATEWAY.md, "Envoy's Rate Limit Service"). Sluice's own extensions
// (algorithm, unit_multiplier, period, burst, failure_policy) sit beside the peer's fields under
// `rate_limit`. An EnvoyConfig is immutable once built; any number of threads may match() on it.
// Nothing here throws.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/rule.h"
#include "rules/diagnostic.h"

namespace sluice::rules {

enum class OnFailure : std::uint8_t;

// The unit of a limit, with the numbers of Envoy's RateLimitResponse.RateLimit.Unit.
enum class EnvoyUnit : std::uint8_t {
  kUnknown = 0,
  kSecond = 1,
  kMinute = 2,
  kHour = 3,
  kDay = 4,
  kMonth = 5,  // 30 days, as the peer counts it
  kYear = 6,   // 365 days
  kWeek = 7,
};

// "second", "MINUTE", ... (any case); nullopt for anything else, "unknown" included.
std::optional<EnvoyUnit> parse_envoy_unit(std::string_view text);
std::string_view envoy_unit_name(EnvoyUnit unit);  // "SECOND", ...; "UNKNOWN"
std::uint64_t envoy_unit_seconds(EnvoyUnit unit);  // 1, 60, ...; 0 for kUnknown

// One `rate_limit` of a config, or a request's own override.
struct EnvoyLimit {
  std::uint32_t requests_per_unit = 0;
  EnvoyUnit unit = EnvoyUnit::kUnknown;
  bool unlimited = false;  // answered OK with limit_remaining UINT32_MAX, never counted
  std::string name;
  std::vector<std::string> replaces;  // names of limits this one takes the place of
  bool shadow = false;                // shadow_mode: counted, reported OK when over
  bool detailed_metric = false;       // metrics per descriptor value, not per config entry
  // The peer's key for the config entry, e.g. "mongo_cps.database_users": metrics name it.
  std::string stats_key;
  // What the cluster decides: by default a fixed window of requests_per_unit per unit aligned
  // on the UTC clock, as the peer counts; the extensions change it.
  Rule rule;
  bool extended = false;  // an extension field chose the rule (current_limit then approximates)
  OnFailure on_failure{};
};

// One entry of a request's descriptor.
struct EnvoyEntry {
  std::string_view key;
  std::string_view value;
};

// The limit found for one descriptor of a request.
struct EnvoyMatch {
  const EnvoyLimit* limit = nullptr;  // nullptr: no limit applies (answered OK)
  std::string counted_key;            // the cluster's key (empty without a limit)
  std::string stats_key;              // the limit's stats_key, or the detailed one
};

struct EnvoyConfigOptions {
  bool merge_domains = false;  // MERGE_DOMAIN_CONFIG: files of one domain add to it
  std::size_t max_key_bytes = 256;
  std::uint32_t sliding_log_cap = kDefaultSlidingLogCap;
};

class EnvoyConfig {
 public:
  struct Node;
  EnvoyConfig();
  ~EnvoyConfig();
  EnvoyConfig(EnvoyConfig&&) noexcept;
  EnvoyConfig& operator=(EnvoyConfig&&) noexcept;

  // Whether `text` is an envoyproxy/ratelimit config: a YAML mapping with a `domain` or a
  // `descriptors` field (or, when it is not valid YAML, a line that starts with "domain:" or
  // "descriptors:").
  static bool recognizes(std::string_view text);

  // Adds one file's domain; every mistake of the file goes to `errors` (then nothing of the
  // file is kept). Messages are the peer's ("duplicate descriptor composite key 'd.k_v'").
  void add_file(std::string_view yaml_text, std::string_view file_name,
                const EnvoyConfigOptions& options, std::vector<Diagnostic>& errors);

  bool empty() const { return domains_.empty(); }
  bool has_domain(std::string_view domain) const;
  std::size_t domain_count() const { return domains_.size(); }
  std::size_t limit_count() const { return limit_count_; }

  // The limit of `entries` in `domain`, found as envoyproxy/ratelimit finds it: level by level,
  // an entry matches its key and value, else a wildcard value ("prefix*"), else its key alone;
  // the limit counts only when it sits at the descriptor's last entry.
  EnvoyMatch match(std::string_view domain, std::span<const EnvoyEntry> entries) const;

  // The counted key of `entries` in `domain` ("@rls:DOMAIN:k=v|k=v", escaped, cut and hashed to
  // fit max_key_bytes); `shared` gives, per entry, a wildcard value to count under instead of
  // the request's (share_threshold), or empty.
  std::string counted_key(std::string_view domain, std::span<const EnvoyEntry> entries,
                          std::span<const std::string_view> shared = {}) const;

 private:
  std::map<std::string, std::unique_ptr<Node>, std::less<>> domains_;
  std::size_t limit_count_ = 0;
  std::size_t max_key_bytes_ = 256;
};

}  // namespace sluice::rules
