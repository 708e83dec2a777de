// The Sluice client library: what a gateway embeds to ask the daemon for decisions.
//
//   auto client = sluice::client::Client::connect({.servers = {"127.0.0.1:7420"}});
//   if (!client.ok()) { ...client.status().to_string()... }
//   Result<Decision> d = (*client)->acquire("user:42", rule);
//
// Errors are values (Status, Result<T>); nothing throws. Every call has a timeout. All methods
// are thread-safe; callbacks run on the client's single I/O thread and must not block it.
// Against a cluster, the servers are seeds: the client fetches the cluster map from one and
// sends each key to its primary node (and there to its shard), following the map as it changes.
// docs/CLIENT.md describes the threading model, the routing, the errors and the header fields.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "client/decision.h"
#include "client/status.h"
#include "core/algorithms.h"
#include "core/clock.h"
#include "core/rule.h"

namespace boost::asio {
class io_context;
}  // namespace boost::asio

namespace sluice::client {

// The longest timeout a client keeps: larger ones (up to std::chrono::milliseconds::max()) are
// clamped to it, so that deadlines in nanoseconds cannot overflow.
inline constexpr std::chrono::milliseconds kMaxTimeout = std::chrono::hours(24);

// What the client answers when a key's owner cannot: the call timed out, the node cannot be
// reached, it stayed UNAVAILABLE until the deadline, or its breaker is open (docs/CLIENT.md
// section 10). Never for the caller's own errors (a bad key or rule, kOverloaded, kClosed).
enum class FailurePolicy : std::uint8_t {
  kOpen,    // decided by the local fallback limiter, at the rule's limit / gateways
  kClosed,  // denied, with retry_after the rule's period
  kReport,  // the error is returned to the caller
};

// "open", "closed", "report"; and back (nullopt for anything else).
std::string_view failure_policy_name(FailurePolicy policy);
std::optional<FailurePolicy> parse_failure_policy(std::string_view name);

struct ClientOptions {
  // "host:port" of daemons' public ports: seeds, tried in order until one answers HELLO. A node
  // outside any cluster is then the only node used; a cluster member gives the client the
  // cluster map, and the client connects to every active node of it.
  std::vector<std::string> servers = {"127.0.0.1:7420"};
  // Both timeouts must be positive; above kMaxTimeout they are clamped to it.
  std::chrono::milliseconds timeout{100};           // per call, from submission to reply
  std::chrono::milliseconds connect_timeout{1000};  // TCP connect + HELLO
  std::string client_name = "sluice-client";        // sent in HELLO, for the server's logs
  // The shared secret of a node started with --auth-token-file, sent in every HELLO; at most
  // 1024 bytes (protocol::kMaxTokenLength). Empty: none. A node that requires a token and gets a
  // wrong one (or none) refuses the connection: connect() fails with kUnauthenticated.
  std::string auth_token;
  // Connect to each shard's own port and send each key straight to its owner. When false,
  // everything goes through each node's public port and the node hands keys over between its
  // shards.
  bool shard_aware = true;
  // TCP connections to each shard's port (or to the public port when not shard-aware). A call
  // goes to the owning shard's connection with the fewest calls in flight.
  unsigned connections_per_shard = 1;
  // Calls in flight at once on this client, over all its connections, 1..16,777,216. A call
  // beyond it is refused at once with kOverloaded (never queued). Each acquire, peek, reset,
  // ping and stats counts one; an async batch counts one per frame it sends (one per owning
  // shard, more when split at the server's max_batch or max_frame).
  std::size_t max_in_flight = 65536;
  // What connect() does when no seed answers (none resolves, accepts, or answers HELLO within
  // connect_timeout). false: it succeeds all the same, with no cluster yet. Every call then
  // follows its failure policy as when its owner cannot be reached (kOpen: the local fallback;
  // kClosed: denied; kReport: kConnectionFailed naming every seed), while the client keeps
  // trying every seed in the background (50 ms doubling to 500 ms apart, each wait jittered by
  // +-20%) and routes to the cluster as soon as one answers. true: connect() fails, naming
  // every seed and why. A seed that refuses the token or is not Sluice fails connect() either
  // way (when no other seed answers).
  bool require_cluster_at_connect = false;

  // ---- the local layer (docs/CLIENT.md section 10) -----------------------------------------
  // The failure policy of every rule whose request does not name its own.
  FailurePolicy failure_policy = FailurePolicy::kOpen;
  // How many gateways share each limit, 1..65535: the local fallback admits limit / gateways.
  std::uint32_t gateways = 1;
  // Keys (and rules) the local fallback keeps counters for, >= 1; the one used longest ago goes.
  std::size_t fallback_keys = 65536;
  // Keys (and rules) the blocked-key cache holds; the one blocked longest ago goes. 0: no cache.
  std::size_t blocked_keys = 65536;
  // Consecutive failed calls after which a node is taken as down: its keys go to the failure
  // policy at once, until a background PING (jittered, 50 to 500 ms apart) answers. 0: never.
  std::uint32_t breaker_failures = 5;
  // The wall clock of the local layer (blocked-until times, the local windows); null: the system
  // clock. It must outlive the client.
  const Clock* clock = nullptr;
  // Count decisions, errors and latencies for metrics().
  bool metrics = true;
  // Leases for hot keys (docs/CLIENT.md section 10, "Leases"): a key and rule whose requests
  // reach the cluster `lease_threshold` times within `lease_duration` is leased
  // capacity / (gateways x 10) units at once, spent here (source kLease) for at most
  // `lease_duration` (never past the fixed window they came from), the rest given back.
  // 0: no leases. Fixed windows, token buckets and GCRA are leased; sliding windows and logs
  // never. Up to `lease_keys` keys and rules are followed (0: no leases).
  std::chrono::milliseconds lease_duration{100};
  std::uint32_t lease_threshold = 16;
  std::size_t lease_keys = 4096;
};

// One item of a batch.
struct AcquireRequest {
  std::string_view key;
  Rule rule;
  std::uint32_t cost = 1;
  bool peek = false;  // report the decision without consuming anything
  // Unset: ClientOptions::failure_policy.
  std::optional<FailurePolicy> failure_policy{};
};

struct Stat {
  std::string name;  // e.g. "total.allowed", "shard.0.keys"
  std::uint64_t value = 0;
};

// What the HELLO handshake on the seed's public port told us (the first server that answered).
struct ServerInfo {
  std::string endpoint;  // the "host:port" connected to
  std::string node_id;
  std::vector<std::uint16_t> shard_ports;  // index = shard
  std::uint32_t max_frame = 0;
  std::uint16_t max_key = 0;
  std::uint16_t max_batch = 0;
};

// What the client itself saw since connect() (the server's counters are Client::stats()).
struct ClientCounters {
  std::uint64_t timed_out = 0;     // calls that ended with kTimeout
  std::uint64_t withdrawn = 0;     // of those, taken back before their bytes were sent
  std::uint64_t late_replies = 0;  // replies that came after their call had timed out: dropped
  // A cluster: newer maps adopted after connect (one CLUSTER request per newer epoch seen).
  std::uint64_t map_refreshes = 0;
  std::uint64_t redirects_followed = 0;   // items answered REDIRECT and sent to their new owner
  std::uint64_t unavailable_retries = 0;  // items answered UNAVAILABLE and sent again
  // The local layer: decisions made without the cluster, and nodes taken as down and back.
  std::uint64_t blocked_cache_hits = 0;  // denied by the blocked-key cache
  std::uint64_t fallback_decisions = 0;  // decided by a failure policy (open or closed)
  std::uint64_t node_down_events = 0;    // a node's breaker opened
  std::uint64_t node_up_events = 0;      // a probe found a node answering again
  std::uint64_t nodes_down = 0;          // a gauge: nodes whose breaker is open now
  // Leases: decisions paid from leased units; leases granted and their units; units sent back
  // when leases ended, and of those the units the owners credited (the rest no longer counted);
  // units neither spent nor sent back are stranded until their window ends or the bucket refills.
  std::uint64_t lease_decisions = 0;
  std::uint64_t leases = 0;
  std::uint64_t leased_units = 0;
  std::uint64_t returned_units = 0;
  std::uint64_t credited_units = 0;
};

// What one node still has to stream to one peer, from the node's STATS
// ("replication.<peer>.records", ".lag_ms", ".up", ".link", ".stalled").
struct ReplicationLag {
  std::string peer;           // the receiving node's id
  std::uint64_t records = 0;  // changed records the peer has not acknowledged yet
  std::uint64_t lag_ms = 0;   // the age of the oldest of them
  bool up = false;            // the node's links to the peer are connected
  // ".link": 0 idle (no link made: nothing needed sending yet), 1 up, 2 down; -1 when the node
  // does not say (an older sluiced).
  int link = -1;
  bool stalled = false;  // ".stalled": lag_ms is at least the node's --replication-stall-after
};

// A node of a cluster map, as Client::cluster() reports it.
struct ClusterNodeInfo {
  std::string id;
  std::string address;  // "HOST:PORT" of its public port, IPv6 in brackets
  std::string state;    // "joining", "active", "draining" or "down"
  // Partitions of the ring it is the primary (replica) of, out of ClusterInfo::partitions.
  std::uint32_t primary_partitions = 0;
  std::uint32_t replica_partitions = 0;
  // Its replication to each peer, by peer id, from its own STATS: empty when it streams to
  // nobody, or when its STATS could not be had (`stats_status` says why).
  std::vector<ReplicationLag> replication;
  Status stats_status;
  // etcd mode, from its STATS: why it serves nothing as primary ("node.fence_reason": 0 it
  // serves, 1 its lease may have lapsed, 2 its map is not confirmed, 3 it has no lease), and the
  // index in its --etcd list of the etcd member it uses ("node.etcd_endpoint"); -1 when it does
  // not say (not in etcd mode, an older sluiced, or no STATS).
  int fence_reason = -1;
  int etcd_endpoint = -1;
};

// etcd mode: a member that left the map without draining (its lease expired or its record was
// deleted), from the nodes' STATS ("lost.<id>.epoch").
struct LostMember {
  std::string id;
  std::uint64_t epoch = 0;  // the epoch of the first map without it
  friend bool operator==(const LostMember&, const LostMember&) = default;
};

// A node's cluster map (CLUSTER). Epoch 0 and no nodes: a node outside any cluster.
struct ClusterInfo {
  std::uint64_t epoch = 0;
  // The ring's parameters (cluster::RingParams): with the ids of the active nodes they give
  // every key's owners, as cluster::Ring::build() computes them.
  std::uint32_t ring_version = 0;
  std::uint32_t partition_bits = 0;
  std::uint32_t partitions = 0;  // 2^partition_bits
  std::uint32_t vnodes_per_node = 0;
  std::vector<ClusterNodeInfo> nodes;  // sorted by id
  std::optional<std::size_t> self;     // the answering node's index in `nodes`, if a member
  // etcd mode: the members some node saw leave without draining (each node's since its start,
  // at most 64 each), none of them in `nodes`; the highest epoch reported for each id, the most
  // recent first. The members expected are `nodes` and these; the missing ones are these and
  // the nodes whose STATS failed.
  std::vector<LostMember> lost;
};

// Rules metrics() tells apart; decisions of further rules are counted together.
inline constexpr std::size_t kMaxMetricRules = 64;

// The decisions made under one rule: decisions[source][allowed], by DecisionSource value, then
// denied (0) and allowed (1).
struct RuleDecisions {
  Rule rule;
  std::array<std::array<std::uint64_t, 2>, 4> decisions{};
};

// Calls the cluster answered within `upper_us` microseconds (exclusive) and above the previous
// bucket's bound.
struct LatencyBucket {
  std::uint64_t upper_us = 0;  // UINT64_MAX for the last bucket
  std::uint64_t count = 0;
};

// One node's breaker (Client::node_breakers()).
struct NodeBreaker {
  std::string address;  // "HOST:PORT" of its public port
  bool down = false;
};

// What the client counted since connect(), for a gateway to export (Client::metrics()).
struct ClientMetrics {
  std::vector<RuleDecisions> rules;  // every rule seen, up to kMaxMetricRules; in no order
  std::uint64_t other_rules = 0;     // decisions of the rules beyond those
  // Acquires and peeks that returned an error, by code (codes with none are left out).
  std::vector<std::pair<ErrorCode, std::uint64_t>> errors;
  std::uint64_t node_down_events = 0;  // a node's breaker opened
  std::uint64_t node_up_events = 0;    // a probe found it answering again
  // The decisions the cluster made, by their latency from submission to answer: the non-empty
  // buckets of a log-linear histogram (one microsecond wide up to 16 us, then four per power
  // of two), in order.
  std::vector<LatencyBucket> cluster_latency;
  std::uint64_t cluster_calls = 0;
  std::uint64_t cluster_latency_sum_us = 0;
};

// One node's answer to RELOAD (static cluster mode: reread the cluster file).
struct ReloadOutcome {
  std::string node_id;      // empty for the seed outside any cluster
  std::string address;      // "HOST:PORT" of its public port
  Status status;            // not ok: the node could not be asked, or refused the request itself
  std::uint64_t epoch = 0;  // the epoch of the node's map afterwards
  std::string refusal;      // empty: the file was taken; else why the node refused it
};

// What one node stores for a key (Client::inspect()): its answer to INSPECT
// (docs/PROTOCOL.md, section 12).
struct StoredCopy {
  std::string node_id;  // empty for the seed outside any cluster
  std::string address;  // "HOST:PORT" of its public port
  Status status;        // not ok: the node could not be asked; the fields below are unset
  // The node's own view: "standalone" (outside a cluster), "primary", "replica" or "other"
  // (neither, in its map: it may hold a stale copy).
  std::string role;
  // For a primary: "serving", "pulling" (its records are still arriving) or "fenced"; else
  // empty.
  std::string partition_state;
  std::uint32_t shard = 0;   // the shard whose table holds the key
  std::uint64_t now_ns = 0;  // the node's clock when it read the record
  bool stored = false;       // a live record; the fields below only then
  Algorithm algorithm = Algorithm::kFixedWindow;
  // 15 * remaining / limit at the key's last decision (0..15): what forgetting it gives away.
  std::uint32_t capacity_class = 0;
  CounterState state;               // describe_state() names its fields (not a sliding log's)
  std::uint64_t expires_at_ns = 0;  // when the state equals a fresh one (the node's clock)
  std::vector<std::uint64_t> log;   // a sliding log's timestamps, oldest first
};

// A key's place in the client's map, and what its owners store for it (Client::inspect()).
struct KeyInspection {
  std::uint64_t epoch = 0;  // of the client's map; 0 outside a cluster
  bool clustered = false;
  std::uint32_t partition = 0;  // clustered only: the key's partition, of `partitions`
  std::uint32_t partitions = 0;
  std::string primary;  // node ids in the map; empty: none (no active node, or no replica)
  std::string replica;
  // The primary's copy, then the replica's (the seed's alone outside a cluster).
  std::vector<StoredCopy> copies;
};

// Invoked exactly once, on the client's I/O thread. A callback that captures at most two
// pointers is stored without a heap allocation.
using AcquireCallback = std::function<void(Result<Decision>)>;
// Invoked exactly once per async batch, on the client's I/O thread: results[i] answers items[i].
// The span is valid only during the call. Stored like AcquireCallback.
using BatchCallback = std::function<void(std::span<const Result<Decision>>)>;

class Client {
 public:
  // Connects to the first server that answers HELLO and asks it for its cluster map (CLUSTER).
  // A node outside any cluster: connects, when shard-aware, to every shard port (HELLO on each).
  // A cluster member: does the same for every active node of its map. Fails with
  // kInvalidArgument, kConnectionFailed, kTimeout, kUnauthenticated, kProtocolError or
  // kServerError: when a shard of the seed's node fails, or any node refuses the token or is
  // not Sluice. Other nodes that cannot be reached do not fail it: their keys fail
  // (kConnectionFailed) until they answer. When no seed answers it succeeds with no cluster yet
  // (ClientOptions::require_cluster_at_connect says what happens then, and when it fails
  // instead: kConnectionFailed, or kTimeout when every seed timed out, naming every seed).
  static Result<std::unique_ptr<Client>> connect(ClientOptions options);
  // The same, but the client runs on `io` instead of a thread of its own: every socket
  // operation and callback runs on the thread that runs `io`, so an event-loop application
  // gets its callbacks without a thread hop. connect() runs `io` itself until the handshakes
  // finish. REQUIRES: no other thread runs `io` during connect() or the destructor; `io` is
  // run by one thread at a time; `io` outlives the client; sync calls (acquire, peek,
  // acquire_batch, reset, ping, stats) are never made from the thread running `io` (they would
  // wait for themselves).
  static Result<std::unique_ptr<Client>> connect(ClientOptions options,
                                                 boost::asio::io_context& io);

  // Fails every call still in flight with kClosed and joins the I/O thread (with an external
  // io_context: runs what the client left queued on it). REQUIRES: not called from a callback,
  // and no call on this client runs concurrently.
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Takes `cost` units for `key` under `rule` if available. Blocks for at most the timeout.
  Result<Decision> acquire(std::string_view key, const Rule& rule, std::uint32_t cost = 1);
  // The same for a request with every field (a peek, a failure policy of its own).
  Result<Decision> acquire(const AcquireRequest& request);
  // The decision acquire() would give, without consuming anything.
  Result<Decision> peek(std::string_view key, const Rule& rule, std::uint32_t cost = 1);
  // Non-blocking acquire (peek when `request.peek`); `done` runs on the I/O thread.
  void acquire_async(const AcquireRequest& request, AcquireCallback done);
  void acquire_async(std::string_view key, const Rule& rule, std::uint32_t cost,
                     AcquireCallback done);
  // Many decisions in one round trip per shard; results[i] answers items[i]. `results` is
  // resized and reused. Blocks for at most the timeout.
  void acquire_batch(std::span<const AcquireRequest> items, std::vector<Result<Decision>>& results);
  std::vector<Result<Decision>> acquire_batch(std::span<const AcquireRequest> items);
  // Non-blocking acquire_batch: one frame per owning shard (split at the server's limits),
  // `done` runs once when every frame is answered, failed or timed out. The items (and their
  // keys) need only live during the call. No allocation per call once warm.
  void acquire_batch_async(std::span<const AcquireRequest> items, BatchCallback done);
  // The transport alone, for measuring it (sluice-load --op ping): sends the frames
  // acquire_batch_async would send, but as PINGs carrying the same bytes, which the owning
  // shard echoes without deciding anything. Each item that comes back is reported allowed, with
  // every other Decision field zero; failures are reported as for acquire_batch_async.
  void probe_batch_async(std::span<const AcquireRequest> items, BatchCallback done);

  // Forgets the key's counters; true when the key existed. This client's blocked-key cache
  // forgets the key too (other clients' caches keep it until its time).
  Result<bool> reset(std::string_view key);
  // The node-level calls below go to the seed; before one has answered (seeded()) they fail at
  // once with kConnectionFailed, naming every seed, as reset() does.
  // Round-trip time of a PING on the seed's public port.
  Result<std::chrono::nanoseconds> ping();
  // The seed node's counters (public port), in the server's order.
  Result<std::vector<Stat>> stats();
  // The seed node's cluster map, asked for now (CLUSTER), with each node's share of the ring
  // and, from each node's STATS (asked at once, in parallel), its replication lag per peer.
  Result<ClusterInfo> cluster();
  // RELOAD on the seed's node: it rereads its cluster file.
  Result<ReloadOutcome> reload();
  // RELOAD on every active node of the client's map, in parallel, in the map's order by id (the
  // seed alone outside a cluster). A node that cannot be asked has its outcome's status set;
  // the call itself fails only when the client is closed.
  Result<std::vector<ReloadOutcome>> reload_all();
  // The key's partition, primary and replica in the client's map, and what each of the two
  // stores for it (INSPECT, asked of both at once; read-only). Outside a cluster: the seed's
  // copy. kInvalidArgument for an empty key; a node that cannot be asked, or speaks a protocol
  // older than 6, has its copy's status set; the call fails only before a seed has answered or
  // when the client is closed.
  Result<KeyInspection> inspect(std::string_view key);
  // DRAIN on node `node_id` of the client's map (etcd mode): it turns `draining`, its ranges
  // move to the other nodes under the next epoch, and it stays reachable until stopped. The
  // outcome's refusal says why not (not in etcd mode, shutting down).
  Result<ReloadOutcome> drain(std::string_view node_id);
  // The epoch of the map the client routes by (0: a node outside any cluster), and how many
  // nodes it routes to. Any thread.
  std::uint64_t cluster_epoch() const;
  std::size_t node_count() const;

  // Fails every call in flight with kClosed and refuses later calls. Safe from a callback.
  // With an external io_context: call it on the thread running `io` or while nobody runs it;
  // afterwards the client leaves no work on `io`, so `io.run()` can return.
  void close();

  // The client's own counters, summed over its connections. Any thread.
  ClientCounters counters() const;
  // Decisions by rule, source and outcome, errors, node events and latencies, counted since
  // connect() (all zero with ClientOptions::metrics off). Any thread; not cheap (it sums
  // every stripe of counters): for a scrape every few seconds, not per call.
  ClientMetrics metrics() const;
  // The breaker of each node the client routes to now: its public address and whether it is
  // taken as down (its keys go to the failure policy without a call). Any thread; takes the
  // router's lock once.
  std::vector<NodeBreaker> node_breakers() const;

  // What the seed's HELLO said; empty while no seed has answered yet (seeded()).
  ServerInfo server_info() const;
  // Whether a seed has answered: false from a connect() at which none did until one does in
  // the background; calls meanwhile follow their failure policy. Any thread.
  bool seeded() const;
  const ClientOptions& options() const;

  struct Impl;  // client/client.cpp

 private:
  explicit Client(std::unique_ptr<Impl> impl);
  // Both connect()s: `io` is null for a client with its own I/O thread.
  static Result<std::unique_ptr<Client>> connect_on(ClientOptions options,
                                                    boost::asio::io_context* io);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice::client
