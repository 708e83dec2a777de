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
#include <string_view>

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

// How long a node may trust its member map (issue 23). A watch on an etcd member that froze
// delivers nothing and reports nothing, so the map it feeds may be stale while the lease, kept
// alive through another member, is fine. The node confirms its map with a read of the member
// set (linearizable: etcd's set as of the read's arrival) every TTL/4; a read sent at S that
// shows the node's set, or whose set the node adopts, lets it trust the map until
// S + TTL - margin. Why that bound: the change a stale node misses is another node taking its
// partitions; that node fences it by a PULL, and when it cannot reach it, serves without the
// fence only TTL + margin after its turn began (the hand-over's rule), by which time the stale
// node, whose last confirmation was sent before that turn, has stopped. A node serves as primary
// until the earlier of this deadline and its LeaseFence's.
class MapConfirmation {
 public:
  using Nanos = std::chrono::nanoseconds;

  MapConfirmation(Nanos ttl, Nanos margin) : trust_(ttl - margin) {}

  // A read sent at `sent` showed the map current (or gave the map now in force).
  void on_confirmed(Nanos sent) { deadline_ = std::max(deadline_, sent + trust_); }
  // A new session: nothing confirmed yet (a map from before may be stale).
  void reset() { deadline_ = Nanos::zero(); }

  Nanos deadline() const { return deadline_; }

 private:
  Nanos trust_;
  Nanos deadline_{0};
};

// What a read of the member set, sent at some instant S and answered at etcd's revision
// `read_revision`, does to a node's map. The node's watch has applied every event up to
// `watched` (the newest revision it brought), and `watched_adopted` says whether the set at
// `watched` made the map in force (a set that makes no map is not adopted).
enum class MemberRead : std::uint8_t {
  kConfirms,   // no change made before S is missing from the map in force
  kNothing,    // the read proves nothing about the map in force; the next one may
  kAdoptRead,  // etcd has a set the watch never brought: adopt the read's, remake the watch
};

// `shows_map` is whether the read's set is the one of the map in force. A read answered at a
// revision the watch has already passed confirms the map too (when the watch's set is in
// force): it was answered after S, so every change before S is at or below its revision, and
// the map in force holds all of those. Without this, a read that crosses a watch event in
// flight (member sets that change every few hundred ms while a cluster forms, reads slowed by a
// loaded etcd) proves nothing, and a few in a row close the fence of a node that missed nothing.
inline MemberRead judge_member_read(bool shows_map, std::int64_t read_revision,
                                    std::int64_t watched, bool watched_adopted) {
  if (shows_map) return MemberRead::kConfirms;
  if (read_revision <= watched) {
    return watched_adopted ? MemberRead::kConfirms : MemberRead::kNothing;
  }
  return MemberRead::kAdoptRead;
}

// Why a node in etcd mode serves nothing as primary now, as STATS ("node.fence_reason") and
// the log give it; the values are part of STATS (docs/OPERATIONS.md, "Statistics").
enum class FenceReason : std::uint8_t {
  kNone = 0,            // the fence is open
  kLeaseLapsed = 1,     // no keepalive answered in time: the etcd lease may have expired
  kMapUnconfirmed = 2,  // no read of the member set confirmed the map in time
  kNoLease = 3,         // no etcd lease: lost, or a session is being opened
};

// Where `now` stands against the two bounds a node serves under (the earlier one closes the
// fence): the lease first, since a lapsed lease also stops the reads that confirm the map.
inline FenceReason fence_reason(std::chrono::nanoseconds now, const LeaseFence& lease,
                                const MapConfirmation& map) {
  if (lease.deadline() == std::chrono::nanoseconds::zero()) return FenceReason::kNoLease;
  if (!lease.alive_at(now)) return FenceReason::kLeaseLapsed;
  if (now >= map.deadline()) return FenceReason::kMapUnconfirmed;
  return FenceReason::kNone;
}

inline std::string_view fence_reason_text(FenceReason reason) {
  switch (reason) {
    case FenceReason::kNone:
      return "serving";
    case FenceReason::kLeaseLapsed:
      return "lease may have lapsed";
    case FenceReason::kMapUnconfirmed:
      return "map not confirmed";
    case FenceReason::kNoLease:
      return "no lease";
  }
  return "unknown";
}

}  // namespace sluice::cluster
