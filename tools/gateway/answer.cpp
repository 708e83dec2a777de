#include "tools/gateway/answer.h"

#include "core/verdict.h"

namespace sluice::gateway {
namespace {

// The decision a limit contributes, or nullopt when it is left out (shadow, or failed open).
std::optional<client::Decision> enforced(const LimitOutcome& outcome) {
  if (outcome.shadow) return std::nullopt;
  if (outcome.decision) return outcome.decision;
  if (!outcome.fails_closed) return std::nullopt;
  client::Decision denied;
  denied.allowed = false;
  denied.limit = outcome.limit;
  denied.policy_quota = outcome.limit;
  denied.retry_after_ms = outcome.period_ms;
  denied.reset_after_ms = outcome.period_ms;
  denied.policy_window_ms = outcome.period_ms;
  return denied;
}

// Whether `a` is more restrictive than `b` (both enforced decisions).
bool more_restrictive(const client::Decision& a, const client::Decision& b) {
  if (a.allowed != b.allowed) return !a.allowed;
  if (!a.allowed) return a.retry_after_ms > b.retry_after_ms;  // kNever is the largest
  if (a.remaining != b.remaining) return a.remaining < b.remaining;
  return a.reset_after_ms < b.reset_after_ms;
}

}  // namespace

Answer combine(std::span<const LimitOutcome> outcomes, std::uint64_t now_unix_ms) {
  Answer answer;
  std::vector<std::optional<client::Decision>> decisions;
  decisions.reserve(outcomes.size());
  for (std::size_t i = 0; i < outcomes.size(); ++i) {
    const LimitOutcome& outcome = outcomes[i];
    if (outcome.shadow && outcome.decision && !outcome.decision->allowed) ++answer.shadow_denials;
    decisions.push_back(enforced(outcome));
    const auto& d = decisions.back();
    if (!d) continue;
    if (!d->allowed) answer.allowed = false;
    if (!answer.deciding || more_restrictive(*d, *decisions[*answer.deciding])) {
      answer.deciding = i;
    }
  }
  answer.status = answer.allowed ? 200 : 429;
  if (!answer.deciding) {
    answer.headers.push_back({"X-Sluice-Decision", answer.allowed ? "allowed" : "denied"});
    return answer;
  }
  const std::size_t at = *answer.deciding;
  answer.headers = decisions[at]->headers(now_unix_ms, outcomes[at].policy);
  std::string policies;
  for (std::size_t i = 0; i < outcomes.size(); ++i) {
    if (!decisions[i]) continue;
    if (!policies.empty()) policies += ", ";
    policies += decisions[i]->policy_field(outcomes[i].policy);
  }
  for (client::HeaderField& field : answer.headers) {
    if (field.name == "RateLimit-Policy") field.value = policies;
  }
  answer.headers.push_back({"X-Sluice-Decision", answer.allowed ? "allowed" : "denied"});
  return answer;
}

}  // namespace sluice::gateway
