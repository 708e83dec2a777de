// The client's local layer (docs/CLIENT.md section 10): the blocked-key cache in front of the
// cluster, the breaker per node with its background probe, and the failure policies that
// answer when a key's owner cannot.
#include "net/asio.h"  // before any other Asio header

#include <algorithm>
#include <chrono>

#include "client/local_layer.h"

#include "client/client_impl.h"
#include "core/key_hash.h"

namespace sluice::client {

namespace asio = boost::asio;

namespace {

// A down node is probed first after 50 ms, then ever less often up to every 500 ms (each wait
// jittered by +-25%), so that it takes its traffic back within about 0.6 s of answering again.
constexpr std::uint64_t kFirstProbeNs = 50'000'000;
constexpr std::uint64_t kMaxProbeNs = 500'000'000;
// A probe's PING waits this long at most (or the call timeout, if shorter).
constexpr std::uint64_t kProbeTimeoutNs = 250'000'000;

// A denial made here under `rule`, waiting `retry_after_ms` (and as long for the reset: the
// local layer keeps no more than that).
Decision local_denial(const Rule& rule, std::uint64_t retry_after_ms, std::uint64_t reset_after_ms,
                      DecisionSource source) {
  Decision denied;
  denied.limit = rule.capacity();
  denied.retry_after_ms = retry_after_ms;
  denied.reset_after_ms = reset_after_ms;
  denied.policy_quota = rule.limit;
  denied.policy_window_ms = rule.period_ms;
  denied.source = source;
  return denied;
}

Decision from_local(const sluice::Verdict& d, const Rule& rule) {
  Decision out;
  out.allowed = d.allowed;
  out.limit = d.limit;
  out.remaining = d.remaining;
  out.reset_after_ms = ns_to_ms_ceil(d.reset_after_ns);
  out.retry_after_ms = d.allowed ? 0 : ns_to_ms_ceil(d.retry_after_ns);
  out.policy_quota = rule.limit;
  out.policy_window_ms = rule.period_ms;
  out.source = DecisionSource::kLocalFallback;
  return out;
}

}  // namespace

std::string_view failure_policy_name(FailurePolicy policy) {
  switch (policy) {
    case FailurePolicy::kOpen:
      return "open";
    case FailurePolicy::kClosed:
      return "closed";
    case FailurePolicy::kReport:
      return "report";
  }
  return "unknown";
}

std::optional<FailurePolicy> parse_failure_policy(std::string_view name) {
  if (name == "open") return FailurePolicy::kOpen;
  if (name == "closed") return FailurePolicy::kClosed;
  if (name == "report") return FailurePolicy::kReport;
  return std::nullopt;
}

namespace detail {

NodeProber::NodeProber(Client::Impl& impl, NodeHealth& health)
    : health_(health),
      impl_(impl),
      timer_(impl.io),
      jitter_((reinterpret_cast<std::uintptr_t>(this) ^ monotonic_now_ns()) | 1) {}

void NodeProber::start() {
  health_.probing = true;
  health_.backoff_ns = kFirstProbeNs;
  arm();
}

void NodeProber::on_reply(std::uint32_t, const protocol::Frame&) {
  health_.probing = false;
  health_.failures.store(0, std::memory_order_relaxed);
  if (health_.down.exchange(false, std::memory_order_relaxed)) {
    impl_.node_up_events.fetch_add(1, std::memory_order_relaxed);
  }
}

void NodeProber::on_failure(std::uint32_t, const Status&) {
  if (impl_.closed) {
    health_.probing = false;
    return;
  }
  health_.backoff_ns = std::min(kMaxProbeNs, health_.backoff_ns * 2);
  arm();
}

void NodeProber::arm() {
  // xorshift64, as for the retry pauses: waits differ between clients, nothing more.
  jitter_ ^= jitter_ << 13;
  jitter_ ^= jitter_ >> 7;
  jitter_ ^= jitter_ << 17;
  const std::uint64_t quarter = health_.backoff_ns / 4;
  const std::uint64_t wait = health_.backoff_ns - quarter + jitter_ % (2 * quarter + 1);
  timer_.expires_after(std::chrono::nanoseconds(wait));
  timer_.async_wait([this](const boost::system::error_code& ec) { on_timer(ec); });
}

void NodeProber::on_timer(const boost::system::error_code& ec) {
  if (ec || impl_.closed || !health_.down.load(std::memory_order_relaxed)) {
    health_.probing = false;  // closing, or a call for its keys succeeded meanwhile
    return;
  }
  NodeLink* link = nullptr;
  for (auto& l : impl_.links) {
    if (l->health.get() == &health_) link = l.get();
  }
  if (link == nullptr || link->retired) {
    // Out of the map: no key goes to it any more. Taken as up, should it come back.
    health_.probing = false;
    health_.failures.store(0, std::memory_order_relaxed);
    health_.down.store(false, std::memory_order_relaxed);
    return;
  }
  // A quiet client (every other key blocked, or decided locally) would never see the epoch of
  // the map that hands this node's keys to another: each probe also asks a node that answers
  // for its map, which the client adopts if it is newer.
  if (impl_.current_map) {
    for (auto& other : impl_.links) {
      if (other.get() == link || other->retired || other->publics.empty() ||
          other->health->down.load(std::memory_order_relaxed) || !other->publics.front()->ready()) {
        continue;
      }
      impl_.request_refresh(*other->publics.front());
      break;
    }
  }
  if (link->publics.empty()) return on_failure(0, Status());
  Completion completion;
  completion.sink = this;
  completion.deadline_ns = monotonic_now_ns() + std::min(kProbeTimeoutNs, impl_.timeout_ns);
  Status queued = link->publics.front()->submit(
      [](protocol::Bytes& out, std::uint32_t id, const protocol::Framing& framing) {
        protocol::encode_ping(out, id, std::span<const std::uint8_t>(), false, framing);
      },
      completion);
  if (!queued.ok()) on_failure(0, queued);
}

}  // namespace detail

std::optional<Decision> Client::Impl::policy_answer(const AcquireRequest& request,
                                                    std::uint64_t fingerprint,
                                                    std::uint64_t now_ns) {
  const FailurePolicy policy = request.failure_policy.value_or(options.failure_policy);
  if (policy == FailurePolicy::kReport) return std::nullopt;
  // A rule the owner would have refused is refused here too: no policy makes it valid.
  if (validate(request.rule, request.cost) != RuleError::kOk) return std::nullopt;
  fallback_decisions.fetch_add(1, std::memory_order_relaxed);
  const Rule& rule = request.rule;
  if (policy == FailurePolicy::kClosed) {
    // Paced, not spun: a caller that retries waits a period.
    return local_denial(rule, rule.limit == 0 ? kNever : rule.period_ms, rule.period_ms,
                        DecisionSource::kLocalFallback);
  }
  return from_local(fallback.decide(fingerprint, rule, request.cost, request.peek, now_ns), rule);
}

bool Client::Impl::answers_locally(const AcquireRequest& request, const KeyHash& hash,
                                   const detail::OwnerGroup& owner) {
  if (closing.load(std::memory_order_relaxed)) return true;  // kClosed, on the I/O thread
  if (!local_layer) return false;
  if (owner.health != nullptr && owner.health->down.load(std::memory_order_relaxed)) return true;
  const bool leasing = !request.peek && leases.running() != 0;
  if (blocked.size() == 0 && !leasing) return false;
  const std::uint64_t fingerprint = detail::blocked_fingerprint(hash, request.rule);
  if (blocked.size() != 0 && blocked.blocked_for(fingerprint, clock.now_ns(), request.cost) != 0) {
    return true;
  }
  return leasing && leases.has(fingerprint, request.cost, lease_clock.now_ns());
}

std::optional<Result<Decision>> Client::Impl::local_answer(const AcquireRequest& request,
                                                           const KeyHash& hash,
                                                           const detail::OwnerGroup& owner) {
  // close() wins over every local answer, as over the cluster's.
  if (closing.load(std::memory_order_relaxed)) {
    return Result<Decision>(ErrorCode::kClosed, "client is shutting down");
  }
  if (!local_layer) return std::nullopt;
  const bool down = owner.health != nullptr && owner.health->down.load(std::memory_order_relaxed);
  const bool leasing = !request.peek && leases.running() != 0;
  if (blocked.size() == 0 && !down && !leasing) return std::nullopt;
  const std::uint64_t fingerprint = detail::blocked_fingerprint(hash, request.rule);
  if (const std::uint64_t left =
          blocked.size() == 0 ? 0 : blocked.blocked_for(fingerprint, clock.now_ns(), request.cost);
      left != 0) {
    blocked_hits.fetch_add(1, std::memory_order_relaxed);
    // The reset is at least the wait; the cache keeps no more.
    const std::uint64_t wait_ms = ns_to_ms_ceil(left);
    return Result<Decision>(
        local_denial(request.rule, wait_ms, wait_ms, DecisionSource::kBlockedCache));
  }
  // Units leased from the owner are spent here, even while it is down: they were counted.
  if (leasing) {
    detail::LeaseTake take;
    const std::uint64_t at = lease_clock.now_ns();
    if (leases.take(fingerprint, request.cost, at, take)) {
      lease_decisions.fetch_add(1, std::memory_order_relaxed);
      Decision d;
      d.allowed = true;
      d.limit = request.rule.capacity();
      d.remaining = take.remaining + take.left;
      d.reset_after_ms = take.reset_at_ns > at ? ns_to_ms_ceil(take.reset_at_ns - at) : 0;
      d.policy_quota = request.rule.limit;
      d.policy_window_ms = request.rule.period_ms;
      d.source = DecisionSource::kLease;
      return Result<Decision>(d);
    }
  }
  if (!down) return std::nullopt;
  const std::uint64_t now = clock.now_ns();
  if (std::optional<Decision> policy = policy_answer(request, fingerprint, now)) {
    return Result<Decision>(*policy);
  }
  if (validate(request.rule, request.cost) != RuleError::kOk) return std::nullopt;  // the node's
  // kReport: the error at once, not after a deadline spent on a node taken as down.
  return Result<Decision>(ErrorCode::kUnavailable,
                          owner.node + " is taken as down (its breaker is open after " +
                              std::to_string(options.breaker_failures) +
                              " failed calls); a background probe will find it when it answers");
}

void Client::Impl::note_call(detail::NodeHealth* health, bool failed) {
  if (health == nullptr) return;
  if (!failed) {
    // One relaxed load per answer while the node is healthy.
    if (health->failures.load(std::memory_order_relaxed) == 0) return;
    health->failures.store(0, std::memory_order_relaxed);
    if (health->down.exchange(false, std::memory_order_relaxed)) {
      node_up_events.fetch_add(1, std::memory_order_relaxed);
    }
    return;
  }
  if (options.breaker_failures == 0) return;
  const std::uint32_t failures = health->failures.fetch_add(1, std::memory_order_relaxed) + 1;
  if (failures >= options.breaker_failures &&
      !health->down.exchange(true, std::memory_order_relaxed)) {
    node_down_events.fetch_add(1, std::memory_order_relaxed);
    node_down(*health);
  }
}

// The failures that are the owner's, not the caller's: what a failure policy answers for.
bool Client::Impl::owner_failure(const Status& status) {
  const ErrorCode code = status.code();
  return code == ErrorCode::kTimeout || code == ErrorCode::kConnectionFailed ||
         code == ErrorCode::kUnavailable;
}

void Client::Impl::settle(const AcquireRequest& request, Result<Decision>& result) {
  if (!local_layer && !request.failure_policy) return;
  if (result.ok()) {
    const Decision& d = *result;
    if (d.source != DecisionSource::kCluster) return;
    if (!d.allowed && !request.peek && d.retry_after_ms != 0 && !d.retry_never() &&
        blocked.capacity() != 0) {
      const KeyHash hash = hash_key(request.key);
      const std::uint64_t now = clock.now_ns();
      const std::uint64_t wait_ns = d.retry_after_ms * 1'000'000;
      blocked.block(detail::blocked_fingerprint(hash, request.rule), now + wait_ns, now,
                    detail::blocked_key_tag(hash), request.cost);
    }
    return;
  }
  if (!owner_failure(result.status())) return;
  const KeyHash hash = hash_key(request.key);
  if (std::optional<Decision> local =
          policy_answer(request, detail::blocked_fingerprint(hash, request.rule), clock.now_ns())) {
    result = Result<Decision>(*local);
  }
}

void Client::Impl::finish(const AcquireRequest& request, Result<Decision>& result,
                          std::uint64_t started_ns) {
  settle(request, result);
  count(request, result, started_ns);
}

void Client::Impl::count(const AcquireRequest& request, const Result<Decision>& result,
                         std::uint64_t started_ns) {
  if (!options.metrics) return;
  if (!result.ok()) return metrics.count_error(result.status().code());
  metrics.count_decision(request.rule, *result);
  if (started_ns != 0 && result->source == DecisionSource::kCluster) {
    const std::uint64_t now = monotonic_now_ns();
    if (now > started_ns) metrics.record_latency_ns(now - started_ns);
  }
}

void Client::Impl::node_down(detail::NodeHealth& health) {
  asio::post(io, [this, &health] { schedule_probe(health); });
}

void Client::Impl::schedule_probe(detail::NodeHealth& health) {
  if (closed || health.probing || !health.down.load(std::memory_order_relaxed)) return;
  detail::NodeProber* prober = nullptr;
  for (auto& p : probers) {
    if (&p->health() == &health) prober = p.get();
  }
  if (prober == nullptr) {
    prober = probers.emplace_back(std::make_unique<detail::NodeProber>(*this, health)).get();
  }
  prober->start();
}

void Client::Impl::cancel_probes() {
  for (auto& p : probers) p->cancel();
}

// ---- leases ------------------------------------------------------------------------------

std::uint32_t Client::Impl::lease_request(const AcquireRequest& request, const KeyHash& hash,
                                          const detail::OwnerGroup& owner) {
  // One unit at a time asks; a node before protocol 4 knows no leases.
  if (lease_policy.lease_ns == 0 || request.peek || request.cost != 1 ||
      owner.limits.version < protocol::kFirstLeaseVersion ||
      closing.load(std::memory_order_relaxed)) {
    return 0;
  }
  if (validate(request.rule, request.cost) != RuleError::kOk) return 0;
  const std::uint64_t now = lease_clock.now_ns();
  return leases.want(detail::blocked_fingerprint(hash, request.rule), request.key, request.rule,
                     now, now + timeout_ns, lease_policy);
}

void Client::Impl::on_leased(const AcquireRequest& request, const protocol::AcquireResult& answer,
                             std::uint64_t started_ns, detail::NodeHealth* health) {
  const KeyHash hash = hash_key(request.key);
  const std::uint64_t fingerprint = detail::blocked_fingerprint(hash, request.rule);
  if (answer.status != protocol::ItemStatus::kAllowed || answer.granted == 0) {
    leases.answered(fingerprint);  // the next lease request may go when the key allows one
    return;
  }
  leases_granted.fetch_add(1, std::memory_order_relaxed);
  leased_units.fetch_add(answer.granted, std::memory_order_relaxed);
  const std::uint32_t left = answer.granted > request.cost ? answer.granted - request.cost : 0;
  // Times on the client's clock from when the request left (the owner decided after that): a
  // lease never outlives the fixed window its units came from, by the owner's reckoning.
  const std::uint64_t now = lease_clock.now_ns();
  const std::uint64_t steady = monotonic_now_ns();
  const std::uint64_t flight = started_ns != 0 && steady > started_ns ? steady - started_ns : 0;
  const std::uint64_t sent = now > flight ? now - flight : 0;
  std::uint64_t life = lease_policy.lease_ns;
  if (request.rule.algorithm == Algorithm::kFixedWindow) {
    // reset_after_ms is rounded up: the window may end up to a millisecond sooner.
    const std::uint64_t window_left_ms = answer.reset_after_ms > 0 ? answer.reset_after_ms - 1 : 0;
    life = std::min(life, window_left_ms * 1'000'000);
  }
  leases.install(fingerprint, request.key, request.rule, left, answer.retry_after_ms, sent + life,
                 answer.remaining, sent + answer.reset_after_ms * 1'000'000, now, health,
                 [this](const detail::EndedLease& ended) { give_back(ended); });
  if (leases.running() != 0) arm_lease_timer(sent + life);
}

void Client::Impl::arm_lease_timer(std::uint64_t until_ns) {
  if (closed || (lease_timer_at_ns != 0 && lease_timer_at_ns <= until_ns)) return;
  lease_timer_at_ns = until_ns;
  const std::uint64_t now = lease_clock.now_ns();
  // The client's clock may be a test's, which moves by steps: the timer then looks again at
  // least every lease duration.
  const std::uint64_t wait =
      std::min(until_ns > now ? until_ns - now : 0, lease_policy.lease_ns) + 1'000'000;
  lease_timer.expires_after(std::chrono::nanoseconds(wait));
  lease_timer.async_wait(
      net::in_slot(lease_timer_slot, [this](const boost::system::error_code& ec) {
        if (ec) return;
        lease_timer_at_ns = 0;
        on_lease_timer();
      }));
}

void Client::Impl::on_lease_timer() {
  if (closed) return;
  const std::uint64_t next = leases.end_leases(
      lease_clock.now_ns(), false, [this](const detail::EndedLease& ended) { give_back(ended); });
  if (next != 0) arm_lease_timer(next);
}

void Client::Impl::give_back(const detail::EndedLease& ended) {
  // Units not sent back (closing, another owner, no connection) stay stranded until their
  // window ends or the bucket refills; sent, the owner credits what still counts (a fixed
  // window's units given back after their window credit nothing).
  if (closed) return;
  const KeyHash hash = hash_key(ended.key);
  const std::shared_ptr<const detail::Router> current = current_router();
  const std::size_t owner = current->route(hash);
  if (owner == detail::Router::kNoOwner) return;
  // Only to the node that granted the lease: another owner (the map changed) may never have
  // counted the units, and crediting them there would admit them twice.
  if (ended.owner == nullptr || current->owner(owner).health != ended.owner ||
      current->owner(owner).limits.version < protocol::kFirstLeaseVersion) {
    return;
  }
  detail::NodeConnection* connection = current->connection(owner);
  if (connection == nullptr) return;
  detail::Completion completion;
  completion.sink = &give_back_sink;
  const protocol::AcquireItem item{ended.key, ended.rule, ended.units, false,
                                   false,     true,       ended.stamp};
  const Status sent = connection->submit(
      [&item](protocol::Bytes& out, std::uint32_t id, const protocol::Framing& framing) {
        const std::size_t start = protocol::begin_acquire_request(out, id, framing);
        protocol::add_acquire_item(out, start, item);
        protocol::finish_acquire_request(out, start);
      },
      completion);
  if (sent.ok()) returned_units.fetch_add(ended.units, std::memory_order_relaxed);
}

void Client::Impl::GiveBackSink::on_reply(std::uint32_t, const protocol::Frame& reply) {
  const protocol::AcquireResult* answer = detail::one_acquire_result(reply, scratch_);
  if (answer != nullptr && answer->status == protocol::ItemStatus::kAllowed) {
    impl_.credited_units.fetch_add(answer->granted, std::memory_order_relaxed);
  }
}

}  // namespace sluice::client
