// A node's membership in etcd mode (issue 14; docs/ARCHITECTURE.md, "Membership in etcd mode"):
// it grants an etcd lease (etcd's liveness lease, never a token allowance), registers the node's
// record under it (`joining`, then `active`), renews it every TTL/4 with one keepalive, watches
// the cluster's member prefix and hands every new member set to the server as a cluster map
// whose epoch is the etcd revision of the change. Each answered keepalive moves the node's fence
// deadline forward (cluster/lease_fence.h), bounded by the last read that confirmed its map (a
// watch on a member that froze says nothing: the reads find the change it missed, and the watch
// is remade on another member); a lost etcd lease (etcd says TTL 0, or the node's
// own key is deleted) closes the fence at once and starts a new session: new etcd lease,
// `joining`, `active`, with the hand-over pulls the new map brings.
//
// Runs on the coordinator's io_context (one thread, off the data path); every member below is
// touched only there.
#pragma once

#include "net/asio.h"  // before any other Asio header

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "cluster/cluster_map.h"
#include "cluster/lease_fence.h"
#include "etcd/etcd_client.h"
#include "log/log.h"

namespace sluice::server {

struct MembershipConfig {
  std::vector<etcd::Endpoint> endpoints;
  std::string cluster;  // cluster::check_cluster_name()
  std::string node_id;
  std::string address;  // HOST:PORT other nodes and clients reach this node's public port at
  std::vector<std::uint16_t> shard_ports;  // shard i's port, in the record beside the address
  std::string source_address;              // of connections to etcd; empty: any
  std::chrono::seconds ttl{2};
  // The fence closes this long before the lease could expire (LeaseFence).
  std::chrono::milliseconds margin{250};
  // Pause between attempts when etcd cannot be reached or refuses.
  std::chrono::milliseconds retry{200};
  // The longest a joining node waits for its warm-up before it turns active all the same (the
  // hand-over then pulls the rest, fenced).
  std::chrono::milliseconds warm_up_timeout{60'000};
};

class EtcdMembership {
 public:
  // `adopt` gets each member set read from etcd as a map (on the io thread; it may block while
  // the shards take it). `deadline` is where the fence deadline is published (boottime_now_ns()
  // units; 0 = not primary), read by every shard; `fence_reason` is why the fence is closed
  // (cluster::FenceReason, kNone while open) and `etcd_endpoint` the index in
  // MembershipConfig::endpoints of the etcd member calls go to, both for STATS.
  using Adopt = std::function<void(const cluster::ClusterMap&)>;
  // `warm_up(done)`: the node, joining in the map last adopted, fetches the partitions it will
  // own once active and calls done(records) on the io thread (Coordinator::warm_up).
  using WarmUp = std::function<void(std::function<void(std::size_t records)> done)>;
  EtcdMembership(boost::asio::io_context& io, MembershipConfig config, Adopt adopt, WarmUp warm_up,
                 std::atomic<std::uint64_t>& deadline, std::atomic<std::uint8_t>& fence_reason,
                 std::atomic<std::uint32_t>& etcd_endpoint);
  EtcdMembership(const EtcdMembership&) = delete;
  EtcdMembership& operator=(const EtcdMembership&) = delete;

  // Starts the sessions. Io thread or before it runs.
  void start();
  // Io thread: closes the fence, ends the watch and the keepalives, and revokes the lease (its
  // key goes with it, so the other nodes promote this node's replicas at once rather than
  // after the TTL). `done` is called when that is over (at most one call deadline).
  void stop(std::function<void()> done);

  // This node's state in its own record (kDown before it has registered). Io thread.
  cluster::NodeState state() const { return state_; }
  // Asks for `draining` (sluicectl drain): the record is rewritten under the same lease, and
  // the node leaves the ring at the next epoch; it stays draining in every later session.
  // Returns "" or why not. Io thread.
  std::string drain();

 private:
  boost::asio::awaitable<void> run();
  boost::asio::awaitable<bool> open_session();
  boost::asio::awaitable<void> keepalive_loop(std::uint64_t session);
  boost::asio::awaitable<void> follow(std::uint64_t session);
  // Every TTL/4 once the session has registered: reads the member set and confirm()s the map.
  boost::asio::awaitable<void> confirm_loop(std::uint64_t session);
  // A read of the member set sent at `sent`: the map in force is confirmed when the read shows
  // its set; a read newer than the watch that shows another set is adopted, and the watch, which
  // missed it, is remade on the next member.
  void confirm(const etcd::RangeResult& read, std::chrono::nanoseconds sent);
  // Logs the etcd member calls now go to, when it changed.
  void note_member();
  boost::asio::awaitable<bool> write_state(cluster::NodeState state, std::uint64_t session);
  boost::asio::awaitable<void> pause(std::chrono::milliseconds how_long);
  // Pauses until `when` (now() units); at once when it has passed. The loops that run every
  // TTL/4 pace themselves with it from each round's send time.
  boost::asio::awaitable<void> pause_until(std::chrono::nanoseconds when);
  // Joining: waits for warm_up_ (at most config_.warm_up_timeout).
  boost::asio::awaitable<void> warm(std::uint64_t session);
  bool current(std::uint64_t session) const { return !stopped_ && session == session_; }
  void lose(const std::string& why);
  void publish_fence();
  // Logs a change of the fence (closed and why, or open again) once, publishes its reason, and
  // sets fence_timer_ to look again when the next bound passes.
  void note_fence();
  // Hands members_ to the server as the map of `revision` (adopted_ becomes members_); false
  // when they make no map.
  bool adopt_members(std::int64_t revision);
  // Says `message` on stderr, after the UTC time, unless it was the last thing said (etcd
  // down: one line, not one every retry).
  // A line of the etcd component, written unless it repeats the last one (log::Repeating).
  void say(const std::string& message);
  void warn(const std::string& message);

  boost::asio::io_context& io_;
  MembershipConfig config_;
  Adopt adopt_;
  WarmUp warm_up_;
  std::function<void()> cancel_warm_;  // while warm() waits: ends the wait (stop())
  std::atomic<std::uint64_t>& deadline_;
  std::atomic<std::uint8_t>& fence_reason_;
  std::atomic<std::uint32_t>& etcd_endpoint_;
  boost::asio::steady_timer fence_timer_;
  std::chrono::nanoseconds fence_timer_at_{0};  // now() units; 0: not set
  cluster::FenceReason noted_reason_ = cluster::FenceReason::kNoLease;
  bool ever_open_ = false;
  // The wall-clock time the last keepalive (or grant) that was answered was sent.
  std::chrono::system_clock::time_point last_answered_{};
  etcd::Client client_;
  cluster::LeaseFence fence_;
  // The last read that confirmed the map in force; reset at each session, so that a session
  // opens the fence only once it has adopted a map read after it registered (a node whose old
  // lease expired while it was paused still holds the map of before, in which it is primary of
  // partitions others serve now).
  cluster::MapConfirmation map_confirmed_;
  std::string key_;
  std::uint64_t session_ = 0;  // bumped when a session ends: its coroutines stop
  std::int64_t etcd_lease_ = 0;
  bool lost_ = false;       // the session's etcd lease is gone
  bool following_ = false;  // registered: confirm_loop() runs beside the watch
  bool stopped_ = false;
  bool draining_ = false;
  cluster::NodeState state_ = cluster::NodeState::kDown;
  // A member record: its value and the revision that created its key (of two records at one
  // address, the older is kept: cluster::members_view()).
  struct Record {
    std::string value;
    std::int64_t created = 0;
    friend bool operator==(const Record&, const Record&) = default;
  };
  using Records = std::map<std::string, Record>;  // by key
  static Records records_of(const etcd::RangeResult& read);
  Records members_;           // as of watched_
  Records adopted_;           // the set of the map in force
  std::int64_t watched_ = 0;  // the last revision whose events are in members_
  std::string member_;        // the etcd member calls went to last
  log::Repeating said_{"etcd"};
};

}  // namespace sluice::server
