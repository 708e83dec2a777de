#include "tools/gateway/gateway.h"

#include <boost/beast/http/field.hpp>
#include <chrono>
#include <optional>
#include <utility>
#include <vector>

#include "tools/gateway/acquire_api.h"
#include "tools/gateway/answer.h"
#include "tools/gateway/attributes.h"

namespace sluice::gateway {
namespace {

using SteadyClock = std::chrono::steady_clock;

std::uint64_t unix_ms() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count());
}

// The target's path and query ("/check?deny=403" -> "/check", "deny=403").
std::pair<std::string_view, std::string_view> split_target(std::string_view target) {
  const std::size_t mark = target.find('?');
  if (mark == std::string_view::npos) return {target, {}};
  return {target.substr(0, mark), target.substr(mark + 1)};
}

bool has_query_item(std::string_view query, std::string_view item) {
  while (!query.empty()) {
    const std::size_t amp = query.find('&');
    if (query.substr(0, amp) == item) return true;
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return false;
}

http::Response json_response(http::Status status, std::string body) {
  http::Response response{status, 11};
  response.set(boost::beast::http::field::content_type, "application/json");
  response.body() = std::move(body);
  return response;
}

// /v1/acquire's own keys: their match part cannot be a match's name (names have no '@').
constexpr std::string_view kApiMatch = "@api";

// The first header that a match of `rules` counts by, or the tier header, that `request` has
// more than once; empty when none. A client that sends its key twice must not choose which one
// is counted (an application behind the proxy may read the other).
std::string repeated_key_header(const rules::RuleSet& rules,
                                const rules::RequestAttributes& request) {
  const auto repeated = [&](std::string_view name) {
    int seen = 0;
    for (const auto& [header, value] : request.headers) {
      if (rules::equal_ignoring_case(header, name) && ++seen > 1) return true;
    }
    return false;
  };
  if (!rules.tier_header().empty() && repeated(rules.tier_header())) {
    return std::string(rules.tier_header());
  }
  for (const rules::Match& match : rules.matches()) {
    for (const rules::KeyPart& part : match.key) {
      if (part.kind == rules::KeyPart::Kind::kHeader && repeated(part.header)) return part.header;
    }
  }
  return "";
}

}  // namespace

// One decision request between its arrival and its answer.
struct Gateway::Pending {
  enum class Kind { kCheck, kAcquire } kind = Kind::kCheck;
  std::shared_ptr<const rules::RuleSet> rules;  // the snapshot the request decides under
  std::vector<rules::Limit> limits;
  std::optional<std::uint32_t> cost;  // instead of each policy's (acquire)
  bool peek = false;
  unsigned deny_status = 429;  // check: 403 when asked with ?deny=403
  SteadyClock::time_point arrived;
  http::Responder responder;

  explicit Pending(http::Responder r) : responder(std::move(r)) {}
};

Gateway::Gateway(client::Client& client, RulesView rules, GatewayMetrics& metrics,
                 GatewayOptions options)
    : client_(client), rules_(std::move(rules)), metrics_(metrics), options_(options) {}

void Gateway::handle(const http::Request& request, http::Responder responder) {
  const auto [path, query] = split_target(http::as_view(request.target()));
  const auto method = request.method();
  namespace bh = boost::beast::http;
  if (path == "/check") return check(request, std::move(responder));
  if (path == "/v1/acquire") {
    if (method != bh::verb::post) {
      auto response =
          json_response(http::Status::method_not_allowed, error_json("/v1/acquire takes POST"));
      response.set(bh::field::allow, "POST");
      return responder.send(std::move(response));
    }
    return acquire(request, std::move(responder));
  }
  if (path != "/healthz" && path != "/readyz" && path != "/metrics") {
    return responder.send(http::text_response(
        http::Status::not_found, "not found: /check, /v1/acquire, /healthz, /readyz, /metrics\n"));
  }
  if (method != bh::verb::get && method != bh::verb::head) {
    auto response = http::text_response(http::Status::method_not_allowed, "GET or HEAD only\n");
    response.set(bh::field::allow, "GET, HEAD");
    return responder.send(std::move(response));
  }
  http::Response response;
  if (path == "/healthz") {
    response = http::text_response(http::Status::ok, "ok\n");
  } else if (path == "/readyz") {
    const Readiness ready = readiness();
    response = http::text_response(
        ready.ready ? http::Status::ok : http::Status::service_unavailable, ready.why + "\n");
  } else {
    ScrapeState state;
    state.ready = readiness().ready;
    state.client = client_.counters();
    state.breakers = client_.node_breakers();
    if (server_ != nullptr) state.http = server_->counters();
    if (grpc_counters_) state.grpc = grpc_counters_();
    const RulesView::Reloads reloads = rules_.reloads();
    state.reloads_ok = reloads.ok;
    state.reloads_failed = reloads.failed;
    const auto rules = rules_.current();
    state.rules_hash = rules->hash();
    state.rules_source = rules->source();
    state.policies = rules->policies().size();
    response = http::Response{http::Status::ok, 11};
    response.set(bh::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
    response.body() = metrics_.scrape(state);
  }
  // HEAD: the same status and fields, no body (its Content-Length is then 0).
  if (method == bh::verb::head) response.body().clear();
  responder.send(std::move(response));
}

Readiness Gateway::readiness() const {
  const client::ClientCounters counters = client_.counters();
  const std::uint64_t down = counters.nodes_down;
  const std::size_t nodes = client_.node_count();
  if (client_.seeded() && down < nodes) {
    if (down == 0) return {true, "ready: cluster"};
    return {true, "ready: cluster (" + std::to_string(down) + " of " + std::to_string(nodes) +
                      " nodes taken as down: their keys follow the failure policy)"};
  }
  if (options_.failure_policy == client::FailurePolicy::kOpen) {
    return {true, "ready: failure policy open in force (no cluster node answers)"};
  }
  return {false, "not ready: no cluster node answers and the failure policy is closed"};
}

void Gateway::check(const http::Request& request, http::Responder responder) {
  auto pending = std::make_shared<Pending>(std::move(responder));
  pending->arrived = SteadyClock::now();
  pending->kind = Pending::Kind::kCheck;
  const auto [path, query] = split_target(http::as_view(request.target()));
  if (has_query_item(query, "deny=403")) pending->deny_status = 403;
  pending->rules = rules_.current();
  rules::RequestAttributes attributes =
      check_attributes(request, pending->responder.peer(), options_.forwarded_by);
  const std::string normalized = normalize_path(attributes.path);
  attributes.path = normalized;
  if (const std::string header = repeated_key_header(*pending->rules, attributes);
      !header.empty()) {
    return pending->responder.send(http::text_response(
        http::Status::bad_request, "header " + header + " repeated: a key is sent once\n"));
  }
  pending->rules->match(attributes, pending->limits);
  decide(std::move(pending));
}

void Gateway::acquire(const http::Request& request, http::Responder responder) {
  const SteadyClock::time_point arrived = SteadyClock::now();
  auto call = parse_acquire_call(request.body());
  if (!call) {
    return responder.send(json_response(http::Status::bad_request, error_json(call.error())));
  }
  auto pending = std::make_shared<Pending>(std::move(responder));
  pending->arrived = arrived;
  pending->kind = Pending::Kind::kAcquire;
  pending->rules = rules_.current();
  pending->cost = call->cost;
  pending->peek = call->peek;
  if (call->by_policy()) {
    const rules::Policy* policy = pending->rules->policy(call->policy);
    if (policy == nullptr) {
      return pending->responder.send(json_response(
          http::Status::bad_request,
          error_json("policy: no policy named '" + call->policy + "' in the rules in force")));
    }
    rules::Limit limit;
    limit.policy = policy;
    limit.key = rules::RuleSet::counted_key(
        kApiMatch, policy->name, rules::escape_key_value(call->key), options_.max_key_bytes);
    limit.match_name = kApiMatch;
    pending->limits.push_back(std::move(limit));
  } else {
    call->path = normalize_path(call->path);
    pending->rules->match(call->attributes(), pending->limits);
  }
  decide(std::move(pending));
}

bool Gateway::fails_closed(const rules::Policy& policy) const {
  switch (policy.on_failure) {
    case rules::OnFailure::kOpen:
      return false;
    case rules::OnFailure::kClosed:
      return true;
    case rules::OnFailure::kDefault:
      break;
  }
  return options_.failure_policy == client::FailurePolicy::kClosed;
}

void Gateway::decide(std::shared_ptr<Pending> pending) {
  if (pending->limits.empty()) {
    finish(*pending, {});
    return;
  }
  std::vector<client::AcquireRequest> items;
  items.reserve(pending->limits.size());
  for (const rules::Limit& limit : pending->limits) {
    client::AcquireRequest item;
    item.key = limit.key;
    item.rule = limit.policy->rule;
    item.cost = pending->cost.value_or(limit.policy->cost);
    item.peek = pending->peek;
    if (limit.policy->on_failure == rules::OnFailure::kOpen) {
      item.failure_policy = client::FailurePolicy::kOpen;
    } else if (limit.policy->on_failure == rules::OnFailure::kClosed) {
      item.failure_policy = client::FailurePolicy::kClosed;
    }
    items.push_back(item);
  }
  client_.acquire_batch_async(
      items, [this, pending](std::span<const client::Result<client::Decision>> results) {
        finish(*pending, results);
      });
}

void Gateway::finish(Pending& pending, std::span<const client::Result<client::Decision>> results) {
  std::vector<LimitOutcome> outcomes;
  std::vector<LimitReport> reports;
  outcomes.reserve(pending.limits.size());
  reports.reserve(pending.limits.size());
  for (std::size_t i = 0; i < pending.limits.size(); ++i) {
    const rules::Limit& limit = pending.limits[i];
    const rules::Policy& policy = *limit.policy;
    LimitOutcome outcome;
    outcome.policy = policy.name;
    outcome.shadow = policy.shadow;
    outcome.limit = policy.rule.limit;
    outcome.period_ms = policy.rule.period_ms;
    LimitReport report;
    report.policy = policy.name;
    report.key = limit.key;
    report.shadow = policy.shadow;
    const bool answered = i < results.size() && results[i].ok();
    if (answered) {
      outcome.decision = *results[i];
      report.decision = *results[i];
      const client::Decision& d = *results[i];
      if (policy.shadow && !d.allowed) metrics_.shadow_denied(policy.name);
      metrics_.decided(policy.name, d.allowed ? "allowed" : "denied",
                       client::source_name(d.source));
    } else {
      outcome.fails_closed = fails_closed(policy);
      report.error = i < results.size() ? results[i].status().to_string() : "no answer";
      metrics_.decided(policy.name, "error", "");
    }
    outcomes.push_back(outcome);
    reports.push_back(std::move(report));
  }
  const Answer answer = combine(outcomes, unix_ms());
  const bool check = pending.kind == Pending::Kind::kCheck;
  metrics_.answered(check ? "check" : "acquire", answer.allowed,
                    SteadyClock::now() - pending.arrived);
  if (!check) {
    pending.responder.send(json_response(http::Status::ok, acquire_answer_json(answer, reports)));
    return;
  }
  http::Response response{
      answer.allowed ? http::Status::ok : static_cast<http::Status>(pending.deny_status), 11};
  for (const client::HeaderField& field : answer.headers) {
    response.set(boost::beast::string_view(field.name.data(), field.name.size()), field.value);
  }
  pending.responder.send(std::move(response));
}

}  // namespace sluice::gateway
