#include "tools/load/sluice_backend.h"

#include <algorithm>
#include <mutex>
#include <utility>

#include "core/clock.h"

namespace sluice::load {

using client::Result;
using client::Status;

SluiceBackend::SluiceBackend(BackendHost& host, const LoadOptions& options,
                             const KeyFormatter& formatter, SharedAudit* audit,
                             unsigned connections, unsigned shards)
    : host_(host),
      o_(options),
      formatter_(formatter),
      audit_(audit),
      per_shard_(std::max(1u, (connections + shards - 1) / std::max(1u, shards))),
      connections_(per_shard_ * std::max(1u, shards)),
      key_arena_(formatter.max_length() * options.batch),
      acquire_items_(options.batch) {}

Status SluiceBackend::connect() {
  client::ClientOptions copts;
  copts.servers = o_.servers;
  copts.connect_timeout = o_.connect_timeout;
  copts.timeout = o_.drain_timeout;  // a reply later than this counts as an error
  copts.client_name = "sluice-load";
  copts.auth_token = o_.auth_token;
  copts.connections_per_shard = per_shard_;
  copts.failure_policy = o_.failure_policy;
  copts.gateways = o_.gateways;
  copts.blocked_keys = o_.blocked_keys;
  copts.lease_duration = o_.lease_duration;
  // report: the client as before its local layer (nothing copied, settled or counted for it),
  // so that the cluster alone is measured.
  const bool report = o_.failure_policy == client::FailurePolicy::kReport;
  copts.breaker_failures = report ? 0 : client::ClientOptions{}.breaker_failures;
  copts.metrics = false;
  // With no node answering, open and closed answer from the policy (and the client keeps
  // looking for the cluster); report fails as it always did.
  copts.require_cluster_at_connect = report;
  auto connected = client::Client::connect(copts, host_.io());
  if (!connected.ok()) return connected.status();
  client_ = std::move(connected).value();
  connections_ *= static_cast<unsigned>(client_->node_count());
  return Status();
}

unsigned SluiceBackend::nodes() const {
  return client_ ? static_cast<unsigned>(client_->node_count()) : 0;
}

void SluiceBackend::reserve(std::size_t requests) {
  keys_.resize(requests * o_.batch);
  sent_unix_ns_.resize(requests);
}

void SluiceBackend::issue(std::uint32_t r, std::span<const std::uint64_t> keys,
                          std::uint32_t /*lane*/) {
  sent_unix_ns_[r] = audit_ ? SystemClock::instance().now_ns() : 0;
  const std::uint32_t base = r * o_.batch;
  const std::size_t width = formatter_.max_length();
  for (std::size_t j = 0; j < keys.size(); ++j) {
    keys_[base + j] = keys[j];
    acquire_items_[j] = client::AcquireRequest{
        formatter_.format(keys[j], std::span<char>(key_arena_.data() + j * width, width)), o_.rule,
        o_.cost, false};
  }
  const std::span<const client::AcquireRequest> items(acquire_items_.data(), keys.size());
  auto done = [this, r](std::span<const Result<client::Decision>> results) {
    on_results(r, results);
  };
  if (o_.op == Operation::kPing || host_.is_control(r)) {
    client_->probe_batch_async(items, done);
  } else {
    client_->acquire_batch_async(items, done);
  }
}

void SluiceBackend::on_results(std::uint32_t r, std::span<const Result<client::Decision>> results) {
  if (closed_) return;  // close() failing what was in flight: already counted as lost
  const std::uint64_t now_ns = monotonic_now_ns();
  const std::uint64_t now_unix_ns = audit_ ? SystemClock::instance().now_ns() : 0;
  Tally& tally = host_.tally();
  if (host_.is_control(r)) {
    const auto failed = std::find_if(results.begin(), results.end(),
                                     [](const Result<client::Decision>& d) { return !d.ok(); });
    if (failed == results.end()) {
      tally.control_answered();
    } else {
      tally.control_failed(1, "Sluice control PING: " + failed->status().to_string());
    }
    host_.request_done(r, kAnyLane, now_ns);
    host_.handler_done(now_ns);
    return;
  }
  TimelineEntry& t = tally.step(now_ns);
  const std::uint32_t base = r * o_.batch;
  std::unique_lock<std::mutex> lock;
  if (audit_) lock = std::unique_lock(audit_->mu);
  for (std::size_t i = 0; i < results.size(); ++i) {
    const Result<client::Decision>& d = results[i];
    if (!d.ok()) {
      tally.errors(1, t, "Sluice: " + d.status().to_string());
      continue;
    }
    tally.decided_by(d->source);
    if (d->allowed) {
      tally.allowed(t);
      if (audit_) audit_->audit.record(keys_[base + i], sent_unix_ns_[r], now_unix_ns, o_.cost);
    } else {
      tally.denied(t);
    }
  }
  if (lock) lock.unlock();
  host_.request_done(r, kAnyLane, now_ns);
  host_.handler_done(now_ns);
}

void SluiceBackend::close() {
  closed_ = true;
  if (client_) client_->close();
}

}  // namespace sluice::load
