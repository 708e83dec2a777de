// When a node that holds an etcd lease may still act as primary (issue 14; docs/ARCHITECTURE.md,
// "Fencing and failover with etcd"). Pure logic on times the caller reads from a monotonic
// clock, so tests give exact instants.
//
// etcd expires a lease no earlier than its TTL after the last keepalive it received, and that
// keepalive arrived after the node sent it. So once a keepalive sent at S is answered with TTL T,
// the lease is alive at least until S + T, whatever happens to later keepalives; the node stops
// serving at S + T - margin, the margin covering the two clocks' drift over T and the time a
// shard takes between its check and its last decision of a batch. A lost or late answer only
// leaves the deadline where it was; an answer that says the lease is gone (TTL 0) ends it now.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace sluice::cluster {

class LeaseFence {
 public:
  using Nanos = std::chrono::nanoseconds;

  explicit LeaseFence(Nanos margin) : margin_(margin) {}

  // A grant or keepalive sent at `sent` was answered: the lease has `ttl` from its arrival.
  // ttl <= 0: the lease no longer exists; the deadline is gone (a new lease starts over).
  void on_answer(Nanos sent, std::chrono::seconds ttl) {
    if (ttl.count() <= 0) {
      deadline_ = Nanos::zero();
      return;
    }
    deadline_ = std::max(deadline_, sent + ttl - margin_);
  }
  // The lease is given up or known lost (its key was deleted): no deadline until a new answer.
  void lose() { deadline_ = Nanos::zero(); }

  // The instant up to which the node may act as primary (zero: not at all).
  Nanos deadline() const { return deadline_; }
  bool alive_at(Nanos now) const { return now < deadline_; }

 private:
  Nanos margin_;
  Nanos deadline_{0};
};

}  // namespace sluice::cluster
