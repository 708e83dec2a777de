// The client's local layer (docs/CLIENT.md section 10): the blocked-key cache in front of the
// cluster, the breaker per node with its background probe, the failure policies that answer
// when a key's owner cannot, and leases of hot keys.
#include "client/local_layer.h"

#include <algorithm>
#include <chrono>

#include "client/sync_call.h"
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

// ---- the breaker's probe ------------------------------------------------------------------

NodeProber::NodeProber(LocalLayer& layer, MapTracker& maps, NodeHealth& health)
    : health_(health),
      layer_(layer),
      maps_(maps),
      timer_(layer.io()),
      jitter_((reinterpret_cast<std::uintptr_t>(this) ^ monotonic_now_ns()) | 1) {}

void NodeProber::start() {
  health_.probing = true;
  health_.backoff_ns = kFirstProbeNs;
  arm();
}

void NodeProber::on_reply(std::uint32_t, const protocol::Frame&) {
  health_.probing = false;
  health_.failures.store(0, std::memory_order_relaxed);
  if (health_.down.exchange(false, std::memory_order_relaxed)) layer_.node_up();
}

void NodeProber::on_failure(std::uint32_t, const Status&) {
  if (layer_.closed()) {
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
  if (ec || layer_.closed() || !health_.down.load(std::memory_order_relaxed)) {
    health_.probing = false;  // closing, or a call for its keys succeeded meanwhile
    return;
  }
  NodeLink* link = maps_.link_with(health_);
  if (link == nullptr || link->retired) {
    // Out of the map: no key goes to it any more. Taken as up, should it come back.
    health_.probing = false;
    health_.failures.store(0, std::memory_order_relaxed);
    if (health_.down.exchange(false, std::memory_order_relaxed)) layer_.node_left_down();
    return;
  }
  // A quiet client (every other key blocked, or decided locally) would never see the epoch of
  // the map that hands this node's keys to another: each probe also asks a node that answers
  // for its map, which the client adopts if it is newer.
  maps_.refresh_from_other_than(*link);
  if (link->publics.empty()) return on_failure(0, Status());
  const std::uint64_t deadline =
      monotonic_now_ns() + std::min(kProbeTimeoutNs, layer_.timeout_ns());
  const Status queued = start_call(
      *link->publics.front(), *this,
      [](protocol::Bytes& out, std::uint32_t id, const protocol::Framing& framing) {
        protocol::encode_ping(out, id, std::span<const std::uint8_t>(), false, framing);
      },
      deadline);
  if (!queued.ok()) on_failure(0, queued);
}

// ---- the layer ----------------------------------------------------------------------------

LocalLayer::LocalLayer(asio::io_context& io, const ClientOptions& options, MapTracker& maps,
                       const std::atomic<bool>& closing)
    : io_(io),
      options_(options),
      maps_(maps),
      closing_(closing),
      timeout_ns_(static_cast<std::uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(options.timeout).count())),
      clock_(options.clock != nullptr ? *options.clock : SystemClock::instance()),
      active_(options.failure_policy != FailurePolicy::kReport || options.blocked_keys != 0 ||
              options.breaker_failures != 0 || options.metrics ||
              (options.lease_duration.count() != 0 && options.lease_keys != 0)),
      blocked_(options.blocked_keys),
      fallback_(options.fallback_keys, options.gateways),
      lease_clock_(options.clock != nullptr ? *options.clock : MonotonicClock::instance()),
      lease_policy_{
          options.lease_keys == 0
              ? 0
              : static_cast<std::uint64_t>(
                    std::chrono::duration_cast<std::chrono::nanoseconds>(options.lease_duration)
                        .count()),
          std::max<std::uint32_t>(options.lease_threshold, 1), options.gateways},
      leases_(lease_policy_.lease_ns == 0 ? 0 : options.lease_keys),
      lease_timer_(io) {}

std::optional<Decision> LocalLayer::policy_answer(const AcquireRequest& request,
                                                  std::uint64_t fingerprint, std::uint64_t now_ns) {
  const FailurePolicy policy = request.failure_policy.value_or(options_.failure_policy);
  if (policy == FailurePolicy::kReport) return std::nullopt;
  // A rule the owner would have refused is refused here too: no policy makes it valid.
  if (validate(request.rule, request.cost) != RuleError::kOk) return std::nullopt;
  fallback_decisions_.fetch_add(1, std::memory_order_relaxed);
  const Rule& rule = request.rule;
  if (policy == FailurePolicy::kClosed) {
    // Paced, not spun: a caller that retries waits a period.
    return local_denial(rule, rule.limit == 0 ? kNever : rule.period_ms, rule.period_ms,
                        DecisionSource::kLocalFallback);
  }
  return from_local(fallback_.decide(fingerprint, rule, request.cost, request.peek, now_ns), rule);
}

bool LocalLayer::answers(const AcquireRequest& request, const KeyHash& hash,
                         const OwnerGroup& owner) {
  if (closing_.load(std::memory_order_relaxed)) return true;  // kClosed, on the I/O thread
  if (!active_) return false;
  if (owner.health != nullptr && owner.health->down.load(std::memory_order_relaxed)) return true;
  const bool leasing = !request.peek && leases_.running() != 0;
  if (blocked_.size() == 0 && !leasing) return false;
  const std::uint64_t fingerprint = blocked_fingerprint(hash, request.rule);
  if (blocked_.size() != 0 &&
      blocked_.blocked_for(fingerprint, clock_.now_ns(), request.cost) != 0) {
    return true;
  }
  return leasing && leases_.has(fingerprint, request.cost, lease_clock_.now_ns());
}

std::optional<Result<Decision>> LocalLayer::answer(const AcquireRequest& request,
                                                   const KeyHash& hash, const OwnerGroup& owner) {
  // close() wins over every local answer, as over the cluster's.
  if (closing_.load(std::memory_order_relaxed)) {
    return Result<Decision>(ErrorCode::kClosed, "client is shutting down");
  }
  if (!active_) return std::nullopt;
  const bool down = owner.health != nullptr && owner.health->down.load(std::memory_order_relaxed);
  const bool leasing = !request.peek && leases_.running() != 0;
  if (blocked_.size() == 0 && !down && !leasing) return std::nullopt;
  const std::uint64_t fingerprint = blocked_fingerprint(hash, request.rule);
  if (const std::uint64_t left =
          blocked_.size() == 0 ? 0
                               : blocked_.blocked_for(fingerprint, clock_.now_ns(), request.cost);
      left != 0) {
    blocked_hits_.fetch_add(1, std::memory_order_relaxed);
    // The reset is at least the wait; the cache keeps no more.
    const std::uint64_t wait_ms = ns_to_ms_ceil(left);
    return Result<Decision>(
        local_denial(request.rule, wait_ms, wait_ms, DecisionSource::kBlockedCache));
  }
  // Units leased from the owner are spent here, even while it is down: they were counted.
  if (leasing) {
    LeaseTake take;
    const std::uint64_t at = lease_clock_.now_ns();
    if (leases_.take(fingerprint, request.cost, at, take)) {
      lease_decisions_.fetch_add(1, std::memory_order_relaxed);
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
  const std::uint64_t now = clock_.now_ns();
  if (std::optional<Decision> policy = policy_answer(request, fingerprint, now)) {
    return Result<Decision>(*policy);
  }
  if (validate(request.rule, request.cost) != RuleError::kOk) return std::nullopt;  // the node's
  // kReport: the error at once, not after a deadline spent on a node taken as down.
  return Result<Decision>(ErrorCode::kUnavailable,
                          owner.node + " is taken as down (its breaker is open after " +
                              std::to_string(options_.breaker_failures) +
                              " failed calls); a background probe will find it when it answers");
}

void LocalLayer::note_call(NodeHealth* health, bool failed) {
  if (health == nullptr) return;
  if (!failed) {
    // One relaxed load per answer while the node is healthy.
    if (health->failures.load(std::memory_order_relaxed) == 0) return;
    health->failures.store(0, std::memory_order_relaxed);
    if (health->down.exchange(false, std::memory_order_relaxed)) node_up();
    return;
  }
  if (options_.breaker_failures == 0) return;
  const std::uint32_t failures = health->failures.fetch_add(1, std::memory_order_relaxed) + 1;
  if (failures >= options_.breaker_failures &&
      !health->down.exchange(true, std::memory_order_relaxed)) {
    node_down_events_.fetch_add(1, std::memory_order_relaxed);
    nodes_down_.fetch_add(1, std::memory_order_relaxed);
    node_down(*health);
  }
}

// The failures that are the owner's, not the caller's: what a failure policy answers for.
bool LocalLayer::owner_failure(const Status& status) {
  const ErrorCode code = status.code();
  return code == ErrorCode::kTimeout || code == ErrorCode::kConnectionFailed ||
         code == ErrorCode::kUnavailable;
}

void LocalLayer::settle(const AcquireRequest& request, Result<Decision>& result) {
  if (!active_ && !request.failure_policy) return;
  if (result.ok()) {
    const Decision& d = *result;
    if (d.source != DecisionSource::kCluster) return;
    if (!d.allowed && !request.peek && d.retry_after_ms != 0 && !d.retry_never() &&
        blocked_.capacity() != 0) {
      const KeyHash hash = hash_key(request.key);
      const std::uint64_t now = clock_.now_ns();
      const std::uint64_t wait_ns = d.retry_after_ms * 1'000'000;
      blocked_.block(blocked_fingerprint(hash, request.rule), now + wait_ns, now,
                     blocked_key_tag(hash), request.cost);
    }
    return;
  }
  if (!owner_failure(result.status())) return;
  const KeyHash hash = hash_key(request.key);
  if (std::optional<Decision> local =
          policy_answer(request, blocked_fingerprint(hash, request.rule), clock_.now_ns())) {
    result = Result<Decision>(*local);
  }
}

void LocalLayer::finish(const AcquireRequest& request, Result<Decision>& result,
                        std::uint64_t started_ns) {
  settle(request, result);
  count(request, result, started_ns);
}

void LocalLayer::count(const AcquireRequest& request, const Result<Decision>& result,
                       std::uint64_t started_ns) {
  if (!options_.metrics) return;
  if (!result.ok()) return metrics_.count_error(result.status().code());
  metrics_.count_decision(request.rule, *result);
  if (started_ns != 0 && result->source == DecisionSource::kCluster) {
    const std::uint64_t now = monotonic_now_ns();
    if (now > started_ns) metrics_.record_latency_ns(now - started_ns);
  }
}

void LocalLayer::forget(std::string_view key, const KeyHash& hash) {
  blocked_.unblock_key(blocked_key_tag(hash));
  leases_.forget_key(key);
}

void LocalLayer::add_counters(ClientCounters& sum) const {
  sum.blocked_cache_hits = blocked_hits_.load(std::memory_order_relaxed);
  sum.fallback_decisions = fallback_decisions_.load(std::memory_order_relaxed);
  sum.node_down_events = node_down_events_.load(std::memory_order_relaxed);
  sum.node_up_events = node_up_events_.load(std::memory_order_relaxed);
  sum.nodes_down = static_cast<std::uint64_t>(
      std::max<std::int64_t>(0, nodes_down_.load(std::memory_order_relaxed)));
  sum.lease_decisions = lease_decisions_.load(std::memory_order_relaxed);
  sum.leases = leases_granted_.load(std::memory_order_relaxed);
  sum.leased_units = leased_units_.load(std::memory_order_relaxed);
  sum.returned_units = returned_units_.load(std::memory_order_relaxed);
  sum.credited_units = credited_units_.load(std::memory_order_relaxed);
}

ClientMetrics LocalLayer::metrics() const {
  ClientMetrics out = metrics_.snapshot();
  out.node_down_events = node_down_events_.load(std::memory_order_relaxed);
  out.node_up_events = node_up_events_.load(std::memory_order_relaxed);
  return out;
}

void LocalLayer::close() {
  closed_ = true;
  lease_timer_.cancel();
  lease_timer_at_ns_ = 0;
  for (auto& p : probers_) p->cancel();
}

void LocalLayer::node_down(NodeHealth& health) {
  asio::post(io_, [this, &health] { schedule_probe(health); });
}

void LocalLayer::schedule_probe(NodeHealth& health) {
  if (closed_ || health.probing || !health.down.load(std::memory_order_relaxed)) return;
  NodeProber* prober = nullptr;
  for (auto& p : probers_) {
    if (&p->health() == &health) prober = p.get();
  }
  if (prober == nullptr) {
    prober = probers_.emplace_back(std::make_unique<NodeProber>(*this, maps_, health)).get();
  }
  prober->start();
}

// ---- leases -------------------------------------------------------------------------------

std::uint32_t LocalLayer::lease_request(const AcquireRequest& request, const KeyHash& hash,
                                        const OwnerGroup& owner) {
  // One unit at a time asks; a node before protocol 4 knows no leases.
  if (lease_policy_.lease_ns == 0 || request.peek || request.cost != 1 ||
      owner.limits.version < protocol::kFirstLeaseVersion ||
      closing_.load(std::memory_order_relaxed)) {
    return 0;
  }
  if (validate(request.rule, request.cost) != RuleError::kOk) return 0;
  const std::uint64_t now = lease_clock_.now_ns();
  return leases_.want(blocked_fingerprint(hash, request.rule), request.key, request.rule, now,
                      now + timeout_ns_, lease_policy_);
}

void LocalLayer::on_leased(const AcquireRequest& request, const protocol::AcquireResult& answer,
                           std::uint64_t started_ns, NodeHealth* health) {
  const KeyHash hash = hash_key(request.key);
  const std::uint64_t fingerprint = blocked_fingerprint(hash, request.rule);
  if (answer.status != protocol::ItemStatus::kAllowed || answer.granted == 0) {
    leases_.answered(fingerprint);  // the next lease request may go when the key allows one
    return;
  }
  leases_granted_.fetch_add(1, std::memory_order_relaxed);
  leased_units_.fetch_add(answer.granted, std::memory_order_relaxed);
  const std::uint32_t left = answer.granted > request.cost ? answer.granted - request.cost : 0;
  // Times on the client's clock from when the request left (the owner decided after that): a
  // lease never outlives the fixed window its units came from, by the owner's reckoning.
  const std::uint64_t now = lease_clock_.now_ns();
  const std::uint64_t steady = monotonic_now_ns();
  const std::uint64_t flight = started_ns != 0 && steady > started_ns ? steady - started_ns : 0;
  const std::uint64_t sent = now > flight ? now - flight : 0;
  std::uint64_t life = lease_policy_.lease_ns;
  if (request.rule.algorithm == Algorithm::kFixedWindow) {
    // reset_after_ms is rounded up: the window may end up to a millisecond sooner.
    const std::uint64_t window_left_ms = answer.reset_after_ms > 0 ? answer.reset_after_ms - 1 : 0;
    life = std::min(life, window_left_ms * 1'000'000);
  }
  leases_.install(fingerprint, request.key, request.rule, left, answer.retry_after_ms, sent + life,
                  answer.remaining, sent + answer.reset_after_ms * 1'000'000, now, health,
                  [this](const EndedLease& ended) { give_back(ended); });
  if (leases_.running() != 0) arm_lease_timer(sent + life);
}

void LocalLayer::arm_lease_timer(std::uint64_t until_ns) {
  if (closed_ || (lease_timer_at_ns_ != 0 && lease_timer_at_ns_ <= until_ns)) return;
  lease_timer_at_ns_ = until_ns;
  const std::uint64_t now = lease_clock_.now_ns();
  // The client's clock may be a test's, which moves by steps: the timer then looks again at
  // least every lease duration.
  const std::uint64_t wait =
      std::min(until_ns > now ? until_ns - now : 0, lease_policy_.lease_ns) + 1'000'000;
  lease_timer_.expires_after(std::chrono::nanoseconds(wait));
  lease_timer_.async_wait(
      net::in_slot(lease_timer_slot_, [this](const boost::system::error_code& ec) {
        if (ec) return;
        lease_timer_at_ns_ = 0;
        on_lease_timer();
      }));
}

void LocalLayer::on_lease_timer() {
  if (closed_) return;
  const std::uint64_t next = leases_.end_leases(
      lease_clock_.now_ns(), false, [this](const EndedLease& ended) { give_back(ended); });
  if (next != 0) arm_lease_timer(next);
}

void LocalLayer::give_back(const EndedLease& ended) {
  // Units not sent back (closing, another owner, no connection) stay stranded until their
  // window ends or the bucket refills; sent, the owner credits what still counts (a fixed
  // window's units given back after their window credit nothing).
  if (closed_) return;
  const KeyHash hash = hash_key(ended.key);
  const std::shared_ptr<const Router> current = maps_.current_router();
  const std::size_t owner = current->route(hash);
  if (owner == Router::kNoOwner) return;
  // Only to the node that granted the lease: another owner (the map changed) may never have
  // counted the units, and crediting them there would admit them twice.
  if (ended.owner == nullptr || current->owner(owner).health != ended.owner ||
      current->owner(owner).limits.version < protocol::kFirstLeaseVersion) {
    return;
  }
  NodeConnection* connection = current->connection(owner);
  if (connection == nullptr) return;
  const protocol::AcquireItem item{ended.key, ended.rule, ended.units, false,
                                   false,     true,       ended.stamp};
  const Status sent =
      start_call(*connection, give_back_sink_,
                 [&item](protocol::Bytes& out, std::uint32_t id, const protocol::Framing& framing) {
                   const std::size_t start = protocol::begin_acquire_request(out, id, framing);
                   protocol::add_acquire_item(out, start, item);
                   protocol::finish_acquire_request(out, start);
                 });
  if (sent.ok()) returned_units_.fetch_add(ended.units, std::memory_order_relaxed);
}

void LocalLayer::GiveBackSink::on_reply(std::uint32_t, const protocol::Frame& reply) {
  const protocol::AcquireResult* answer = one_acquire_result(reply, scratch_);
  if (answer != nullptr && answer->status == protocol::ItemStatus::kAllowed) {
    layer_.credited_units_.fetch_add(answer->granted, std::memory_order_relaxed);
  }
}

}  // namespace detail
}  // namespace sluice::client
