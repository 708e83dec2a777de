// A rules file, parsed and validated: named policies and the matches that say which of them
// apply to a request and under which key (docs/RULES.md). A RuleSet is immutable once built,
// so any number of threads may match() on it at once; RuleSource (rule_source.h) swaps whole
// sets on reload. Nothing here throws.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/expected.h"
#include "core/rule.h"
#include "rules/diagnostic.h"
#include "rules/envoy_config.h"
#include "rules/read_file.h"
#include "rules/request.h"

namespace sluice::rules {

// What the gateway does with a policy when the cluster cannot answer.
enum class OnFailure : std::uint8_t {
  kDefault,  // the gateway's own --failure-policy
  kOpen,
  kClosed,
};

struct Policy {
  std::string name;
  Rule rule;
  std::uint32_t cost = 1;  // 1 .. rule.capacity()
  OnFailure on_failure = OnFailure::kDefault;
  bool shadow = false;  // counted and reported, never denies
};

// Why a limit's policy was chosen.
enum class Via : std::uint8_t { kPolicies, kTier, kOverride };

// One counter to decide for a request. `policy` and the views point into the RuleSet that
// produced it: keep that set alive while the limit is in use.
struct Limit {
  const Policy* policy = nullptr;
  std::string key;  // "<match>:<policy>:<key value>", at most RuleSetOptions::max_key_bytes
  std::string_view match_name;
  Via via = Via::kPolicies;
  std::string_view tier;  // the tier value, when via == kTier
};

// How a match counts: one part of its key.
struct KeyPart {
  enum class Kind : std::uint8_t { kHeader, kClientIp, kMethod, kPath, kEveryone };
  Kind kind = Kind::kHeader;
  std::string header;  // kHeader: the header's name (api_key, user and tier resolved)
};

using PolicyIndices = std::vector<std::uint32_t>;  // into RuleSet::policies()

// One entry of `matches`, as parsed. Conditions are ANDed; each list holds when any of its
// entries does; an empty list is no condition.
struct Match {
  std::string name;
  std::vector<std::string> methods;
  std::vector<std::string> paths;
  std::vector<std::string> path_prefixes;
  std::vector<std::pair<std::string, std::vector<std::string>>> headers;  // name, values
  std::vector<KeyPart> key;
  PolicyIndices policies;
  std::map<std::string, PolicyIndices, std::less<>> tiers;      // tier value -> policies
  std::map<std::string, PolicyIndices, std::less<>> overrides;  // key value -> policies
};

// The daemon's default --max-key: no key built here is longer, unless told otherwise.
inline constexpr std::size_t kDefaultMaxKeyBytes = 256;
// Two names of at most 64 bytes, two ':', and room for a cut value ("x#" + 32 hex digits).
inline constexpr std::size_t kMinMaxKeyBytes = 164;
inline constexpr std::size_t kMaxNameBytes = 64;

struct RuleSetOptions {
  std::size_t max_key_bytes = kDefaultMaxKeyBytes;        // below kMinMaxKeyBytes reads as that
  std::uint32_t sliding_log_cap = kDefaultSlidingLogCap;  // the daemon's --sliding-log-cap
  // envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG: several files of one domain add up (else a
  // second file of a domain is an error).
  bool merge_envoy_domains = false;
};

class RuleSet;
using ParseResult = Expected<RuleSet, std::vector<Diagnostic>>;

class RuleSet {
 public:
  // Every error of the file on failure, in file order; `file_name` names it in diagnostics
  // and becomes source().
  static ParseResult parse(std::string_view yaml_text, std::string_view file_name,
                           const RuleSetOptions& options = {});
  // Reads `path` and parses it; a file that cannot be read is one diagnostic. A directory is
  // read as parse_files() of its rules files (read_rules()).
  static ParseResult load(const std::filesystem::path& path, const RuleSetOptions& options = {});
  // Several files as one set: envoyproxy/ratelimit configs (a top-level `domain`) make up
  // envoy(), at most one Sluice rules file gives the policies and matches (none: no match).
  // `source` names the set (its directory). The hash is of every file's name and bytes.
  static ParseResult parse_files(std::span<const SourceText> files, std::string_view source,
                                 const RuleSetOptions& options = {});

  // Replaces `out` with every limit that applies to `request`: matches in file order, each
  // match's policies in their listed order. Reuses `out`'s capacity.
  void match(const RequestAttributes& request, std::vector<Limit>& out) const;
  std::vector<Limit> match(const RequestAttributes& request) const;

  const Policy* policy(std::string_view name) const;  // nullptr when there is none
  std::span<const Policy> policies() const { return policies_; }
  std::span<const Match> matches() const { return matches_; }
  std::string_view hash() const { return hash_; }      // XXH3-128 of the bytes, 32 hex digits
  std::string_view source() const { return source_; }  // the path (or name) it came from
  std::string_view tier_header() const { return tier_header_; }  // attributes.tier
  // The envoyproxy/ratelimit domains of the set (empty when it has none).
  const EnvoyConfig& envoy() const { return envoy_; }

  // The counted key of `policy` in `match` for `key_value` (already escaped and joined): the
  // format of docs/RULES.md, "Counted keys", cut and hashed to fit max_key_bytes.
  static std::string counted_key(std::string_view match, std::string_view policy,
                                 std::string_view key_value, std::size_t max_key_bytes);

 private:
  friend class Parser;
  RuleSet() = default;

  std::vector<Policy> policies_;
  std::vector<Match> matches_;
  std::map<std::string, std::uint32_t, std::less<>> by_name_;
  std::string hash_;
  std::string source_;
  std::string tier_header_;
  EnvoyConfig envoy_;
  std::size_t max_key_bytes_ = kDefaultMaxKeyBytes;
};

// A key value as counted keys carry it: '%', '|' and '#' written as %25, %7C and %23 (for keys
// built outside a match, e.g. the gateway's /v1/acquire).
std::string escape_key_value(std::string_view value);

// XXH3-128 of `bytes` as 32 lower-case hex digits.
std::string hash_hex(std::string_view bytes);

}  // namespace sluice::rules
