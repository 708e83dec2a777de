// sluiced as a library: a Server owns N shard threads, each with its own event loop, counter
// table, shard port and a listener on the shared public port. main.cpp only parses flags.
// docs/ARCHITECTURE.md explains which thread owns what.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/key_hash.h"
#include "core/rule.h"
#include "protocol/frame.h"
#include "server/shard_counters.h"
#include "server/table/log_arena.h"

namespace sluice::cluster {
class ClusterMap;
}

namespace sluice::server {

// Input buffer every connection starts with and holds while it lives (not counted in
// max_buffer_memory: it is bounded by max_connections instead).
inline constexpr std::size_t kBaseInputBuffer = 32 * 1024;
// Frames of one connection waiting for other shards at most (reading pauses there).
inline constexpr std::uint32_t kMaxFramesPending = 4096;

// The largest sliding_log_cap: the longest ring the log arena can store.
inline constexpr std::uint32_t kMaxSlidingLogCap = LogArena::kMaxRingEntries;

// Replication's window per link (ServerConfig::replication_window_bytes). The default covers
// tens of thousands of records per round trip; a node holds up to shards x (nodes - 1) links.
inline constexpr std::size_t kDefaultReplicationWindow = std::size_t{1} << 20;
inline constexpr std::size_t kMinReplicationWindow = std::size_t{64} << 10;
inline constexpr std::size_t kMaxReplicationWindow = std::size_t{1} << 30;

struct ServerConfig {
  std::string bind = "127.0.0.1";
  // The local address of every connection this node opens (to other nodes, to etcd). Empty:
  // the kernel's choice. Several nodes on one host, each on its own address, set it so that
  // others (and a firewall) can tell them apart.
  std::string source_address;
  std::uint16_t port = 7420;  // public port; 0 = ephemeral
  // Shard i listens on base + i; 0 = port + 1 + i (ephemeral if port is 0 too).
  std::uint16_t shard_base_port = 0;
  // Shard ports are ephemeral whatever `port` is (tests that restart a node on its public port).
  bool ephemeral_shard_ports = false;
  unsigned shards = 0;                  // 0 = number of cores
  std::size_t max_memory = 1ull << 30;  // counters across all shards, split evenly
  std::uint32_t max_frame = protocol::kDefaultMaxFrame;
  std::uint16_t max_key = protocol::kDefaultMaxKey;
  std::uint16_t max_batch = protocol::kDefaultMaxBatch;
  // Across all ports. The constructor raises the soft RLIMIT_NOFILE to the hard limit and, when
  // that still cannot hold these plus the node's own descriptors, lowers this to fit (stderr).
  std::uint32_t max_connections = 10'000;
  std::chrono::milliseconds idle_timeout{5 * 60 * 1000};  // 0 = never
  // Per connection: reading pauses while this much output waits to be written (queued and in
  // flight together).
  std::size_t max_queued_output = 4u << 20;
  // Per connection: reading pauses while this many items of its frames wait for other shards
  // (or kMaxFramesPending frames, whichever comes first).
  std::uint32_t max_pending_items = 65'536;
  // Buffers of all connections together (input held beyond each connection's base buffer,
  // output waiting to be sent, cross-shard backlog), split evenly among the shards. When a
  // shard's share is spent, its connections holding the most are closed with ERROR OVERLOADED.
  // 0 = the default: max_memory / 4, but at least room for four connections at their limits
  // (max_frame and max_queued_output) on every shard.
  std::size_t max_buffer_memory = 0;
  std::uint32_t sliding_log_cap = kDefaultSlidingLogCap;  // 1..kMaxSlidingLogCap
  std::string node_id;                                    // empty = "<bind>:<public port>"
  // Static cluster mode (docs/ARCHITECTURE.md, "The cluster"): the cluster file, read by
  // start() and by reload_cluster(). REQUIRES node_id, which the file must list. Empty: a
  // single node, with no ownership checks.
  std::string cluster_file;
  // etcd cluster mode (docs/ARCHITECTURE.md, "Membership in etcd mode"), instead of
  // cluster_file: etcd's gateway URLs ("http://HOST:PORT[,...]"), the cluster's name (its key
  // prefix in etcd) and the TTL of the node's etcd lease (whole seconds; etcd's minimum is 2).
  // REQUIRES node_id. The fence closes (the node stops deciding as primary) fence_margin before
  // that lease could expire.
  std::string etcd;
  std::string cluster_name;
  std::chrono::seconds etcd_lease_ttl{2};
  std::chrono::milliseconds fence_margin{250};
  // HOST:PORT other nodes and clients reach this node's public port at, in its etcd record.
  // Empty: bind and the public port (refused when bind is a wildcard address).
  std::string advertise;
  // Replication: a shard sends the records it changed to their replica at least this often, and
  // at once when this many are queued for one node.
  std::chrono::microseconds replication_interval{1000};
  std::size_t replication_batch = 256;
  // Bytes of REPLICATE frames sent toward one shard of a replica and not yet acknowledged, at
  // most (kMinReplicationWindow..kMaxReplicationWindow; one record larger than this still goes
  // alone): while a link is at this bound, changes wait in the shard's bounded queue instead of
  // being encoded (docs/ARCHITECTURE.md, "Replication").
  std::size_t replication_window_bytes = kDefaultReplicationWindow;
  // A replica whose oldest change not yet acknowledged is older than this is "stalled": said
  // once in the log and in STATS (replication.<node>.stalled). The node keeps serving.
  std::chrono::milliseconds replication_stall_after{1000};
  // The shared secret (auth/token.h reads it from --auth-token-file). Empty: no authentication.
  // Else every connection must send a HELLO carrying it before anything else (server/auth.h).
  std::string auth_token;
  // Shard threads poll instead of sleeping in epoll_wait: each keeps a core busy all the time,
  // and no request waits for its shard to wake up (lower tail latency on idle-prone machines).
  bool busy_poll = false;
  // Counter records in 2 MiB transparent huge pages (when a shard's share of max_memory is at
  // least 64 MiB): fewer TLB misses on large tables, but the first touch of each 2 MiB block is
  // one page fault that zeroes it, a pause while the table grows (BM_InsertMaxPause).
  bool huge_pages = false;
  // stop() lets every connection finish the frames it has sent, sends it ERROR SHUTTING_DOWN
  // and closes it, within this long; what is left then is closed at once. 0 = close at once.
  std::chrono::milliseconds shutdown_timeout{5000};
  // STATS answers from a per-shard snapshot rebuilt when it is at least this old (by `clock`),
  // so a flood of STATS costs a copy each, not a walk over every shard. 0 = rebuilt every time.
  std::chrono::milliseconds stats_refresh{100};
  // HOST:PORT of the HTTP server for /metrics, /healthz and /readyz (docs/OPERATIONS.md,
  // "Metrics"), on a thread of its own; empty = none. Port 0 = ephemeral (Server::http_port()).
  std::string http_listen;
  const Clock* clock = nullptr;  // nullptr = SystemClock; tests pass a ManualClock
};

// The cluster as this node sees it now, for /metrics and /readyz (Server::cluster_status()).
struct ClusterStatus {
  enum class Mode : std::uint8_t { kStandalone, kStatic, kEtcd };
  // Replication toward one peer, over every shard (STATS "replication.<node>.*").
  struct Peer {
    std::string node;
    std::uint64_t records = 0;  // queued or sent and not yet acknowledged
    std::uint64_t lag_ms = 0;   // age of the oldest of those
    std::uint64_t bytes = 0;    // REPLICATE bytes sent, not yet acknowledged
    std::uint64_t dropped = 0;  // records dropped toward it since it entered the map
    bool up = false;            // every link to it is up
    bool stalled = false;       // lag_ms at least replication_stall_after
  };

  Mode mode = Mode::kStandalone;
  std::uint64_t epoch = 0;
  // Members of the map by state, at cluster::NodeState value - 1: joining, active, draining,
  // down.
  std::array<std::uint32_t, 4> members{};
  // This node's state in the map (cluster::NodeState value), 0 when the map does not list it.
  std::uint8_t self_state = 0;
  // etcd mode: the fence is closed, and why (cluster::FenceReason, as the membership agent last
  // noted it; 0 while it serves).
  bool fenced = false;
  std::uint8_t fence_reason = 0;
  std::vector<Peer> peers;

  // "" when the node serves as primary (a node outside any cluster always does), else one line
  // saying why not: fenced (REASON), joining, draining, or not in the cluster map.
  std::string not_ready_reason() const;
};

class Server {
 public:
  explicit Server(ServerConfig config);
  ~Server();  // stop() + join
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds every port and starts the shard threads. Throws std::system_error when a port cannot
  // be bound. Returns once every listener accepts connections.
  void start();
  // Asks every shard to stop: listeners close at once; each connection's frames already
  // received are answered, then it gets ERROR SHUTTING_DOWN and is closed, within
  // config.shutdown_timeout; then the threads exit. Idempotent and safe from any thread or a
  // signal-handling strand.
  void stop();
  // As stop(), but closes every connection at once, even during a stop() under way.
  void stop_now();
  // Blocks until every shard thread has exited. Not from a shard thread (it would wait for
  // itself).
  void wait();

  // Static cluster mode: rereads the cluster file and adopts its map when it is valid and either
  // has the same members or a higher epoch (a map without this node makes it redirect every key);
  // every shard decides by the new map once this returns. Returns "" on success, else every reason
  // the file was refused (one per line); the old map stays then. Any thread but a shard's.
  std::string reload_cluster();
  // Switches a running node to static cluster mode with `path` as its cluster file, as if
  // started with it (for tests, whose ports are known only once started). Same result as
  // reload_cluster(). Any thread but a shard's.
  std::string load_cluster(const std::string& path);
  // The epoch of the map in force (0 outside a cluster).
  std::uint64_t cluster_epoch() const;
  // Whether the map in force lists this node (a reload may remove it: it then serves no key).
  bool cluster_member() const;

  std::uint16_t port() const;
  std::vector<std::uint16_t> shard_ports() const;
  unsigned shard_count() const;

  // The buffer budget in effect (ServerConfig::max_buffer_memory after its default).
  std::size_t max_buffer_memory() const;
  // The configuration in effect (defaults applied, max_connections fitted to the open-file
  // limit).
  const ServerConfig& config() const;

  // ---- observation, for /metrics and /readyz: any thread, never waits for a shard ----------
  // Shard `shard`'s counters (single-writer relaxed atomics; not a consistent snapshot).
  const ShardCounters& shard_counters(unsigned shard) const;
  ClusterStatus cluster_status() const;
  // The port of the HTTP server (ServerConfig::http_listen) once started; 0 without one.
  std::uint16_t http_port() const;

  // Test seam: the record of `key` as its owning shard here holds it (empty when absent),
  // read on that shard's thread. Not from a shard thread.
  struct TEST_Record {
    std::uint8_t algorithm = 0;
    std::uint64_t state_a = 0;
    std::uint64_t state_b = 0;
    std::vector<std::uint64_t> log;
    friend bool operator==(const TEST_Record&, const TEST_Record&) = default;
  };
  std::optional<TEST_Record> TEST_record(const KeyHash& key) const;
  // Test seam: pulls of partitions not finished yet (docs/ARCHITECTURE.md, "Moving partitions").
  std::size_t TEST_pulls_running() const;
  // Test seams for joining without etcd: adopts `map` as a new map from etcd would be (its
  // epoch must be higher than the one in force; "" or why not), and runs the warm-up of a
  // joining node (the records fetched; nullopt when it took longer than `limit`).
  std::string TEST_adopt_map(const cluster::ClusterMap& map);
  std::optional<std::size_t> TEST_warm_up(std::chrono::milliseconds limit);
  // Test seam: the most output any connection has had waiting (queued and in flight) after
  // handling its input (bytes).
  std::size_t TEST_peak_queued_output() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice::server
