// RuleSet::parse: YAML to a RuleSet, checking every field and reporting every mistake of the
// file (docs/RULES.md, "Errors"). yaml-cpp throws on syntax errors; they are caught here and
// become diagnostics, so nothing leaves the library as an exception.
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "core/units.h"
#include "rules/rule_set.h"

namespace sluice::rules {

namespace {

// A field of a mapping (or an item of a list, whose key is the list's field): the value, and
// the key to point at when the value is missing or empty (yaml-cpp gives an empty value no
// place of its own).
struct Entry {
  YAML::Node key;
  YAML::Node value;
};

std::string join(const std::string& path, std::string_view field) {
  if (path.empty()) return std::string(field);
  return path + "." + std::string(field);
}

std::string in_quotes(std::string_view text) { return "\"" + std::string(text) + "\""; }

// How a value reads in "expected X, got Y".
std::string kind_of(const YAML::Node& node) {
  if (!node.IsDefined() || node.IsNull()) return "nothing";
  if (node.IsSequence()) return "a list";
  if (node.IsMap()) return "a mapping";
  return in_quotes(node.Scalar());
}

bool is_name(std::string_view name) {
  if (name.empty() || name.size() > kMaxNameBytes) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.' || c == '-';
  });
}

// An HTTP token (RFC 9110): what header names and methods are made of.
bool is_token(std::string_view text) {
  static constexpr std::string_view kSymbols = "!#$%&'*+-.^_`|~";
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           kSymbols.find(c) != std::string_view::npos;
  });
}

// "a, b or c".
std::string one_of(std::span<const std::string_view> names) {
  std::string out;
  std::size_t i = 0;
  for (const std::string_view name : names) {
    if (i > 0) out += i + 1 == names.size() ? " or " : ", ";
    out += name;
    ++i;
  }
  return out;
}

constexpr std::string_view kTopFields[] = {"version", "attributes", "policies", "matches"};
constexpr std::string_view kAttributeFields[] = {"api_key", "user", "tier"};
constexpr std::string_view kPolicyFields[] = {"algorithm", "limit",      "period", "burst",
                                              "cost",      "on_failure", "shadow", "description"};
constexpr std::string_view kMatchFields[] = {"name",     "when",  "key",
                                             "policies", "tiers", "overrides"};
constexpr std::string_view kAlgorithms[] = {"fixed_window", "sliding_window", "sliding_log",
                                            "token_bucket", "gcra"};
constexpr std::string_view kKeyParts[] = {"api_key", "user", "tier",     "ip",
                                          "method",  "path", "everyone", "header:NAME"};
constexpr std::string_view kWhenFields[] = {"method", "path", "path_prefix", "headers"};

// Sees where each document of a stream starts, and nothing else.
class DocumentCounter final : public YAML::EventHandler {
 public:
  std::vector<YAML::Mark> starts;

  void OnDocumentStart(const YAML::Mark& mark) override { starts.push_back(mark); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

}  // namespace

class Parser {
 public:
  Parser(std::string_view file, const RuleSetOptions& options) : file_(file), options_(options) {}

  ParseResult run(std::string_view text) {
    try {
      read(text);
    } catch (const YAML::Exception& e) {
      error(e.mark, "YAML syntax error: " + e.msg);
    } catch (const std::exception& e) {
      diagnostics_.push_back(Diagnostic{file_, 0, 0, e.what()});
    }
    if (!diagnostics_.empty()) {
      std::stable_sort(diagnostics_.begin(), diagnostics_.end(),
                       [](const Diagnostic& a, const Diagnostic& b) {
                         return a.line != b.line ? a.line < b.line : a.column < b.column;
                       });
      return Unexpected{std::move(diagnostics_)};
    }
    set_.hash_ = hash_hex(text);
    set_.source_ = file_;
    set_.max_key_bytes_ = std::max(options_.max_key_bytes, kMinMaxKeyBytes);
    return std::move(set_);
  }

 private:
  using Fields = std::vector<std::pair<std::string, Entry>>;

  void error(const YAML::Mark& mark, std::string message) {
    diagnostics_.push_back(Diagnostic{file_, mark.line + 1, mark.column + 1, std::move(message)});
  }
  void error(const Entry& at, const std::string& path, std::string_view message) {
    const bool empty = !at.value.IsDefined() || at.value.IsNull();
    error(empty ? at.key.Mark() : at.value.Mark(),
          (path.empty() ? "" : path + ": ") + std::string(message));
  }
  void expected(const Entry& at, const std::string& path, std::string_view what) {
    error(at, path, "expected " + std::string(what) + ", got " + kind_of(at.value));
  }

  // The fields of the mapping `at`, each checked against `allowed` and seen once; nullopt
  // (after saying so) when `at` is not a mapping.
  std::optional<Fields> fields(const Entry& at, const std::string& path,
                               std::span<const std::string_view> allowed,
                               std::string_view what = "a mapping") {
    if (!at.value.IsMap()) {
      expected(at, path, what);
      return std::nullopt;
    }
    Fields out;
    for (auto it = at.value.begin(); it != at.value.end(); ++it) {
      const Entry entry{it->first, it->second};
      if (!entry.key.IsScalar()) {
        error(entry.key.Mark(), (path.empty() ? "" : path + ": ") + "expected a field name, got " +
                                    kind_of(entry.key));
        continue;
      }
      const std::string name = entry.key.Scalar();
      const std::string field = join(path, name);
      if (std::find(allowed.begin(), allowed.end(), name) == allowed.end()) {
        error(entry.key.Mark(), field + ": unknown field (expected " + one_of(allowed) + ")");
        continue;
      }
      const auto first =
          std::find_if(out.begin(), out.end(), [&](const auto& f) { return f.first == name; });
      if (first != out.end()) {
        error(entry.key.Mark(), field + ": duplicate field (first at line " +
                                    std::to_string(first->second.key.Mark().line + 1) + ")");
        continue;
      }
      out.emplace_back(name, entry);
    }
    return out;
  }

  static const Entry* find(const Fields& fields, std::string_view name) {
    for (const auto& [n, entry] : fields) {
      if (n == name) return &entry;
    }
    return nullptr;
  }

  const Entry* require(const Fields& fields, std::string_view name, const Entry& owner,
                       const std::string& path, std::string_view why = {}) {
    const Entry* entry = find(fields, name);
    if (entry == nullptr) {
      std::string message = "missing field " + in_quotes(name);
      if (!why.empty()) message += " (" + std::string(why) + ")";
      error(owner.key.Mark(), path.empty() ? message : path + ": " + message);
    }
    return entry;
  }

  std::optional<std::string> text(const Entry& at, const std::string& path,
                                  std::string_view what = "a value") {
    if (!at.value.IsScalar()) {
      expected(at, path, what);
      return std::nullopt;
    }
    return at.value.Scalar();
  }

  // One value or a list of them, as entries.
  std::optional<std::vector<Entry>> items(const Entry& at, const std::string& path,
                                          std::string_view what) {
    if (at.value.IsScalar()) return std::vector<Entry>{at};
    if (!at.value.IsSequence()) {
      expected(at, path, what);
      return std::nullopt;
    }
    std::vector<Entry> out;
    for (const YAML::Node& item : at.value) out.push_back(Entry{at.key, item});
    return out;
  }

  std::optional<std::uint32_t> count(const Entry& at, const std::string& path) {
    const auto t = text(at, path, "a whole number");
    if (!t) return std::nullopt;
    const auto n = parse_count(*t);
    if (!n) {
      expected(at, path, "a whole number");
      return std::nullopt;
    }
    if (*n > std::numeric_limits<std::uint32_t>::max()) {
      error(at, path, *t + " is above 4294967295");
      return std::nullopt;
    }
    return static_cast<std::uint32_t>(*n);
  }

  void read(std::string_view text) {
    const std::string bytes(text);
    // Not YAML::LoadAll: yaml-cpp 0.7 never gets past a stray ',' at the start of a document and
    // LoadAll then adds empty documents until memory runs out. Count them, at most three.
    std::istringstream stream(bytes);
    YAML::Parser counter_parser(stream);
    DocumentCounter counter;
    for (int i = 0; i < 3 && counter_parser.HandleNextDocument(counter); ++i) {
    }
    const std::vector<YAML::Mark>& starts = counter.starts;
    for (std::size_t i = 1; i < starts.size(); ++i) {
      if (starts[i].pos == starts[i - 1].pos) {
        const std::size_t at = static_cast<std::size_t>(std::max(starts[i].pos, 0));
        error(starts[i], "YAML syntax error: unexpected " +
                             in_quotes(bytes.substr(std::min(at, bytes.size()), 1)));
        return;
      }
    }
    const YAML::Node document = YAML::Load(bytes);
    if (document.IsNull()) {
      error(YAML::Mark::null_mark(), "the file is empty (expected version, policies and matches)");
      return;
    }
    if (starts.size() > 1) {
      error(starts[1], "a rules file holds one YAML document, this is the second");
    }
    const Entry root{document, document};
    const auto top = fields(root, "", kTopFields, "a mapping with version, policies and matches");
    if (!top) return;

    if (const Entry* version = require(*top, "version", root, "")) {
      const auto v = this->text(*version, "version");
      if (v && *v != "1") {
        error(*version, "version", "unsupported version " + *v + " (this Sluice reads version 1)");
      }
    }
    read_attributes(find(*top, "attributes"));
    if (const Entry* policies = require(*top, "policies", root, "")) read_policies(*policies);
    if (const Entry* matches = require(*top, "matches", root, "")) read_matches(*matches);
  }

  std::optional<std::string> header_name(const Entry& at, const std::string& path) {
    auto name = text(at, path, "a header name");
    if (name && !is_token(*name)) {
      error(at, path, in_quotes(*name) + " is not a header name");
      return std::nullopt;
    }
    return name;
  }

  void read_attributes(const Entry* at) {
    api_key_header_ = "X-API-Key";
    user_header_ = "X-User";
    set_.tier_header_ = "X-Tier";
    if (at == nullptr) return;
    const auto f = fields(*at, "attributes", kAttributeFields);
    if (!f) return;
    for (const auto& [name, entry] : *f) {
      auto header = header_name(entry, join("attributes", name));
      if (!header) continue;
      (name == "api_key" ? api_key_header_
       : name == "user"  ? user_header_
                         : set_.tier_header_) = *header;
    }
  }

  void read_policies(const Entry& at) {
    if (!at.value.IsMap()) {
      expected(at, "policies", "a mapping of policy names to policies");
      return;
    }
    if (at.value.size() == 0) {
      error(at, "policies", "expected at least one policy");
      return;
    }
    for (auto it = at.value.begin(); it != at.value.end(); ++it) {
      const Entry entry{it->first, it->second};
      const std::string name = entry.key.IsScalar() ? entry.key.Scalar() : "";
      const std::string path = join("policies", name);
      if (!is_name(name)) {
        error(entry.key.Mark(), path + ": a policy name is 1 to 64 bytes of A-Z a-z 0-9 _ . -");
        continue;
      }
      if (const auto first = defined_.find(name); first != defined_.end()) {
        error(entry.key.Mark(), path + ": duplicate policy name (first defined at line " +
                                    std::to_string(first->second) + ")");
        continue;
      }
      defined_.emplace(name, entry.key.Mark().line + 1);
      read_policy(name, entry, path);
    }
  }

  void read_policy(const std::string& name, const Entry& at, const std::string& path) {
    const std::size_t errors_before = diagnostics_.size();
    const auto f = fields(at, path, kPolicyFields);
    if (!f) return;
    Policy policy;
    policy.name = name;
    Rule& rule = policy.rule;

    bool algorithm_ok = false;
    if (const Entry* e = require(*f, "algorithm", at, path)) {
      if (const auto t = text(*e, join(path, "algorithm"))) {
        if (const auto algorithm = parse_algorithm(*t)) {
          rule.algorithm = *algorithm;
          algorithm_ok = true;
        } else {
          error(*e, join(path, "algorithm"),
                "unknown algorithm " + in_quotes(*t) + " (expected " + one_of(kAlgorithms) + ")");
        }
      }
    }
    bool limit_ok = false;
    if (const Entry* e = require(*f, "limit", at, path)) {
      if (const auto n = count(*e, join(path, "limit"))) {
        if (*n == 0) {
          error(*e, join(path, "limit"),
                "must be at least 1 (a limit of 0 would deny every request)");
        } else if (algorithm_ok && rule.algorithm == Algorithm::kSlidingLog &&
                   *n > options_.sliding_log_cap) {
          error(*e, join(path, "limit"),
                std::to_string(*n) + " is above the sliding_log cap of " +
                    std::to_string(options_.sliding_log_cap));
        } else {
          rule.limit = *n;
          limit_ok = true;
        }
      }
    }
    if (const Entry* e = require(*f, "period", at, path)) {
      if (const auto t = text(*e, join(path, "period"), "a duration")) {
        const auto ms = parse_duration_ms(*t);
        if (!ms) {
          error(*e, join(path, "period"),
                in_quotes(*t) + " is not a duration (a whole number and a unit: ms, s, m, h, d)");
        } else if (*ms == 0 || *ms > kMaxPeriodMs) {
          error(*e, join(path, "period"), *t + " is out of range (1ms .. 366d)");
        } else {
          rule.period_ms = *ms;
        }
      }
    }
    bool burst_ok = true;
    if (const Entry* e = find(*f, "burst")) {
      const bool bucket =
          rule.algorithm == Algorithm::kTokenBucket || rule.algorithm == Algorithm::kGcra;
      burst_ok = false;
      if (algorithm_ok && !bucket) {
        error(e->key.Mark(), join(path, "burst") + ": only token_bucket and gcra take a burst");
      } else if (const auto n = count(*e, join(path, "burst"))) {
        if (*n == 0) {
          error(*e, join(path, "burst"), "must be at least 1 (leave burst out to mean the limit)");
        } else {
          rule.burst = *n;
          burst_ok = algorithm_ok;
        }
      }
    }
    if (const Entry* e = find(*f, "cost")) {
      if (const auto n = count(*e, join(path, "cost"))) {
        if (*n == 0) {
          error(*e, join(path, "cost"), "must be at least 1");
        } else if (limit_ok && burst_ok && algorithm_ok && *n > rule.capacity()) {
          error(*e, join(path, "cost"),
                std::to_string(*n) + " is above the policy's capacity of " +
                    std::to_string(rule.capacity()) + " (no request could ever be admitted)");
        } else {
          policy.cost = *n;
        }
      }
    }
    if (const Entry* e = find(*f, "on_failure")) {
      const auto t = text(*e, join(path, "on_failure"), "open or closed");
      if (t && *t == "open") {
        policy.on_failure = OnFailure::kOpen;
      } else if (t && *t == "closed") {
        policy.on_failure = OnFailure::kClosed;
      } else if (t) {
        expected(*e, join(path, "on_failure"), "open or closed");
      }
    }
    if (const Entry* e = find(*f, "shadow")) {
      const auto t = text(*e, join(path, "shadow"), "true or false");
      if (t && (*t == "true" || *t == "false")) {
        policy.shadow = *t == "true";
      } else if (t) {
        expected(*e, join(path, "shadow"), "true or false");
      }
    }
    if (const Entry* e = find(*f, "description")) text(*e, join(path, "description"), "text");

    if (diagnostics_.size() != errors_before) return;
    // The checks above are stricter than core's; this one keeps the two from drifting apart.
    if (const RuleError e = validate(rule, policy.cost, options_.sliding_log_cap);
        e != RuleError::kOk) {
      error(at.key.Mark(), path + ": " + std::string(describe(e)));
      return;
    }
    set_.by_name_.emplace(name, static_cast<std::uint32_t>(set_.policies_.size()));
    set_.policies_.push_back(std::move(policy));
  }

  // A list of policy names (or one name), each known and listed once.
  std::optional<PolicyIndices> policy_list(const Entry& at, const std::string& path) {
    if (!at.value.IsDefined() || at.value.IsNull()) {
      error(at, path, "names no policy (at least one is needed)");
      return std::nullopt;
    }
    const auto list = items(at, path, "a list of policy names");
    if (!list) return std::nullopt;
    if (list->empty()) {
      error(at, path, "names no policy (at least one is needed)");
      return std::nullopt;
    }
    PolicyIndices out;
    std::vector<std::string> seen;
    bool ok = true;
    for (const Entry& item : *list) {
      const auto name = text(item, path, "a policy name");
      if (!name) {
        ok = false;
        continue;
      }
      if (std::find(seen.begin(), seen.end(), *name) != seen.end()) {
        error(item, path, in_quotes(*name) + " is listed twice");
        ok = false;
        continue;
      }
      seen.push_back(*name);
      if (!defined_.contains(*name)) {
        error(item, path, "unknown policy " + in_quotes(*name));
        ok = false;
      } else if (const auto it = set_.by_name_.find(*name); it != set_.by_name_.end()) {
        out.push_back(it->second);
      } else {
        ok = false;  // defined with errors, already reported
      }
    }
    if (!ok) return std::nullopt;
    return out;
  }

  // tiers and overrides: value -> policies.
  void read_choices(const Entry& at, const std::string& path, std::string_view what,
                    std::map<std::string, PolicyIndices, std::less<>>& out) {
    if (!at.value.IsMap()) {
      expected(at, path, "a mapping of " + std::string(what) + " values to policy lists");
      return;
    }
    std::map<std::string, int, std::less<>> lines;
    for (auto it = at.value.begin(); it != at.value.end(); ++it) {
      const Entry entry{it->first, it->second};
      if (!entry.key.IsScalar() || entry.key.Scalar().empty()) {
        error(entry.key.Mark(),
              path + ": expected a " + std::string(what) + " value, got " + kind_of(entry.key));
        continue;
      }
      const std::string value = entry.key.Scalar();
      const std::string field = join(path, value);
      if (const auto first = lines.find(value); first != lines.end()) {
        error(entry.key.Mark(), field + ": duplicate " + std::string(what) + " (first at line " +
                                    std::to_string(first->second) + ")");
        continue;
      }
      lines.emplace(value, entry.key.Mark().line + 1);
      if (auto list = policy_list(entry, field)) out.emplace(value, std::move(*list));
    }
  }

  void read_when(const Entry& at, const std::string& path, Match& m) {
    const auto f = fields(at, path, kWhenFields);
    if (!f) return;
    for (const auto& [name, entry] : *f) {
      const std::string field = join(path, name);
      if (name == "headers") {
        if (!entry.value.IsMap()) {
          expected(entry, field, "a mapping of header names to values");
          continue;
        }
        for (auto it = entry.value.begin(); it != entry.value.end(); ++it) {
          const Entry header{it->first, it->second};
          const std::string header_path =
              join(field, header.key.IsScalar() ? header.key.Scalar() : "?");
          const auto header_name = this->header_name(Entry{header.key, header.key}, header_path);
          const auto values = items(header, header_path, "a value or a list of values");
          if (!header_name || !values) continue;
          std::vector<std::string> texts;
          for (const Entry& v : *values) {
            if (auto t = text(v, header_path)) texts.push_back(std::move(*t));
          }
          m.headers.emplace_back(*header_name, std::move(texts));
        }
        continue;
      }
      const auto values = items(entry, field, "a value or a list of values");
      if (!values) continue;
      for (const Entry& v : *values) {
        auto t = text(v, field);
        if (!t) continue;
        if (name == "method") {
          if (!is_token(*t)) {
            error(v, field, in_quotes(*t) + " is not a method");
            continue;
          }
          m.methods.push_back(std::move(*t));
        } else if (t->empty() || t->front() != '/') {
          error(v, field, in_quotes(*t) + " must start with /");
        } else {
          (name == "path" ? m.paths : m.path_prefixes).push_back(std::move(*t));
        }
      }
    }
  }

  void read_key(const Entry& at, const std::string& path, Match& m) {
    const auto parts = items(at, path, "a key part or a list of them");
    if (!parts) return;
    if (parts->empty()) {
      error(at, path, "expected at least one key part");
      return;
    }
    for (const Entry& part : *parts) {
      const auto t = text(part, path, "a key part");
      if (!t) continue;
      KeyPart k;
      if (*t == "api_key" || *t == "user" || *t == "tier") {
        k.header = *t == "api_key" ? api_key_header_
                   : *t == "user"  ? user_header_
                                   : set_.tier_header_;
      } else if (*t == "ip") {
        k.kind = KeyPart::Kind::kClientIp;
      } else if (*t == "method") {
        k.kind = KeyPart::Kind::kMethod;
      } else if (*t == "path") {
        k.kind = KeyPart::Kind::kPath;
      } else if (*t == "everyone") {
        k.kind = KeyPart::Kind::kEveryone;
        if (parts->size() > 1) {
          error(part, path, "everyone cannot be combined with other key parts");
          continue;
        }
      } else if (t->starts_with("header:")) {
        k.header = t->substr(7);
        if (!is_token(k.header)) {
          error(part, path,
                in_quotes(*t) + (k.header.empty() ? " names no header (header:NAME)"
                                                  : " does not name a header (header:NAME)"));
          continue;
        }
      } else {
        error(part, path,
              "unknown key part " + in_quotes(*t) + " (expected " + one_of(kKeyParts) + ")");
        continue;
      }
      m.key.push_back(std::move(k));
    }
  }

  void read_matches(const Entry& at) {
    if (!at.value.IsSequence()) {
      expected(at, "matches", "a list of matches");
      return;
    }
    if (at.value.size() == 0) {
      error(at, "matches", "expected at least one match");
      return;
    }
    std::map<std::string, int, std::less<>> names;
    std::size_t index = 0;
    for (const YAML::Node& node : at.value) {
      const std::string path = "matches[" + std::to_string(index++) + "]";
      // A list item has no key of its own: its place is where the item starts.
      const Entry item{node, node};
      const auto f = fields(item, path, kMatchFields);
      if (!f) continue;
      Match m;
      if (const Entry* e = require(*f, "name", item, path)) {
        if (const auto name = text(*e, join(path, "name"), "a name")) {
          if (!is_name(*name)) {
            error(*e, join(path, "name"),
                  in_quotes(*name) + ": a match name is 1 to 64 bytes of A-Z a-z 0-9 _ . -");
          } else if (const auto first = names.find(*name); first != names.end()) {
            error(*e, join(path, "name"),
                  "duplicate match name " + in_quotes(*name) + " (first at line " +
                      std::to_string(first->second) + ")");
          } else {
            names.emplace(*name, e->value.Mark().line + 1);
            m.name = *name;
          }
        }
      }
      if (const Entry* e = find(*f, "when")) read_when(*e, join(path, "when"), m);
      if (const Entry* e = require(*f, "key", item, path)) read_key(*e, join(path, "key"), m);
      if (const Entry* e = require(*f, "policies", item, path, "a match names at least one")) {
        if (auto list = policy_list(*e, join(path, "policies"))) m.policies = std::move(*list);
      }
      if (const Entry* e = find(*f, "tiers")) {
        read_choices(*e, join(path, "tiers"), "tier", m.tiers);
      }
      if (const Entry* e = find(*f, "overrides")) {
        read_choices(*e, join(path, "overrides"), "override", m.overrides);
      }
      set_.matches_.push_back(std::move(m));  // only kept when the whole file is good
    }
  }

  std::string file_;
  RuleSetOptions options_;
  std::vector<Diagnostic> diagnostics_;
  RuleSet set_;
  std::map<std::string, int, std::less<>> defined_;  // every policy name seen -> its line
  std::string api_key_header_;
  std::string user_header_;
};

ParseResult RuleSet::parse(std::string_view yaml_text, std::string_view file_name,
                           const RuleSetOptions& options) {
  if (EnvoyConfig::recognizes(yaml_text)) {
    const SourceText one{std::string(file_name), std::string(yaml_text)};
    return parse_files(std::span(&one, 1), file_name, options);
  }
  return Parser(file_name, options).run(yaml_text);
}

ParseResult RuleSet::parse_files(std::span<const SourceText> files, std::string_view source,
                                 const RuleSetOptions& options) {
  std::vector<Diagnostic> errors;
  std::optional<RuleSet> own;
  std::string own_file;
  EnvoyConfig envoy;
  const EnvoyConfigOptions envoy_options{.merge_domains = options.merge_envoy_domains,
                                         .max_key_bytes = options.max_key_bytes,
                                         .sliding_log_cap = options.sliding_log_cap};
  for (const SourceText& file : files) {
    if (EnvoyConfig::recognizes(file.bytes)) {
      envoy.add_file(file.bytes, file.name, envoy_options, errors);
      continue;
    }
    if (own) {
      errors.push_back(Diagnostic{file.name, 0, 0,
                                  "a second Sluice rules file (the first is " + own_file +
                                      "): a set holds one, beside any envoy configs"});
      continue;
    }
    auto parsed = Parser(file.name, options).run(file.bytes);
    if (!parsed) {
      errors.insert(errors.end(), parsed.error().begin(), parsed.error().end());
      continue;
    }
    own.emplace(std::move(parsed).value());
    own_file = file.name;
  }
  if (!errors.empty()) return Unexpected{std::move(errors)};
  RuleSet set = own ? std::move(*own) : RuleSet();
  set.envoy_ = std::move(envoy);
  set.hash_ = rules_hash(files, source);
  set.source_ = source;
  set.max_key_bytes_ = std::max(options.max_key_bytes, kMinMaxKeyBytes);
  return set;
}

}  // namespace sluice::rules
