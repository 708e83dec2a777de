// sluice-load's network drivers: run one bounded load against Sluice, Redis, an HTTP endpoint or
// Envoy's Rate Limit Service (gRPC), and report.
//
// A run has T worker threads, each with its own io_context, its share of the connections, its
// own key generator (seed derived from --seed and the thread index), histogram and timeline.
// A request is one unit on the wire: for Sluice one ACQUIRE frame per owning shard (up to
// --batch items), for Redis one pipelined write of --batch decisions, for HTTP one write of
// --batch pipelined GETs, for Envoy's Rate Limit Service one ShouldRateLimit call. Closed loop
// keeps connections x depth requests in flight; open loop sends requests at --rate decisions per
// second on a fixed schedule and measures latency from each request's intended send time, so
// a stall is charged to every request it delays (no coordinated omission); it too keeps at most
// connections x depth requests in flight, and reports the part of the schedule it could not
// send (behind) instead of queueing it without bound.
//
// This header is the API: the options, validate() and run_load(). The report and its two
// summaries (LoadReport, report_json(), report_text(), error_window()) are declared in
// report.h, which this header includes. Behind run_load(): worker.h (pacing, request books,
// the stop) drives a Backend (backend.h): sluice_backend.h, redis_backend.h, http_backend.h or
// rls_backend.h.
//
// Nothing on the per-request path allocates once rings and buffers have reached their working
// size. docs/LOAD.md describes the options, the connection mapping and the report.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "client/client.h"
#include "client/status.h"
#include "core/rule.h"
#include "tools/load/key_generator.h"
#include "tools/load/redis_designs.h"
#include "tools/load/report.h"

namespace sluice::load {

enum class BackendKind : std::uint8_t { kSluice, kRedis, kHttp, kRls };
// kAcquire: rate-limit decisions (Sluice ACQUIRE, or the Redis design). kPing: the transport
// floor (Sluice PING frames sized like the ACQUIRE frames they stand for; Redis PING).
// kIncr: Redis only, a bare INCR per decision (what redis-benchmark's INCR test sends).
enum class Operation : std::uint8_t { kAcquire, kPing, kIncr };

std::optional<BackendKind> parse_backend(std::string_view name);
std::string_view backend_name(BackendKind backend);
std::optional<Operation> parse_operation(std::string_view name);
std::string_view operation_name(Operation op);

// The most TCP connections a run may ask for. A Sluice run opens ceil(C_t / S) to each of the
// S shards per thread, and the client library allows at most 1024 to one shard.
inline constexpr unsigned kMaxConnections = 1024;
// --only-node lists the node's keys up front: 4 bytes per key of the run at most.
inline constexpr std::uint64_t kMaxOnlyNodeKeys = std::uint64_t{1} << 24;

struct LoadOptions {
  BackendKind backend = BackendKind::kSluice;
  RedisDesign redis_design = RedisDesign::kLuaTokenBucket;
  Operation op = Operation::kAcquire;
  // Seeds: the first that answers is used; a cluster member's map names the other nodes, and
  // each key goes to its primary.
  std::vector<std::string> servers = {"127.0.0.1:7420"};
  unsigned connections = 50;  // 1..kMaxConnections in total (Sluice: to shard ports, LOAD.md)
  unsigned depth = 1;         // requests in flight per connection (at most, in open loop)
  unsigned batch = 1;         // decisions per request
  unsigned threads = 1;       // event-loop threads
  double rate = 0;            // decisions per second over all threads; 0 = closed loop
  std::uint64_t keys = 1'000'000;
  DistributionSpec dist;
  std::uint64_t seed = 1;
  Rule rule{Algorithm::kTokenBucket, 100, 1000, 0};
  std::uint32_t cost = 1;
  std::chrono::milliseconds duration{10'000};  // 0 = no time bound
  std::uint64_t requests = 0;                  // decisions; 0 = no count bound
  bool audit = false;
  std::uint64_t audit_keys = 100'000;  // keys [0, audit_keys) are audited
  std::string key_prefix = "k:";
  // Sluice against a cluster only: keep only the keys whose primary is the node with this id
  // (at most kMaxOnlyNodeKeys keys). The distribution is over those keys, in index order: the
  // generator draws a position in the list of the node's keys. Empty: every key.
  std::string only_node;
  // Sluice only: the node's token, sent in every HELLO (--auth-token-file). Empty = none. A
  // Redis run refuses it (validate()).
  std::string auth_token;
  // Sluice only, the client's local layer (docs/CLIENT.md section 10). By default it stays out
  // of the way: errors are counted as errors and every decision is the cluster's.
  client::FailurePolicy failure_policy = client::FailurePolicy::kReport;
  std::uint32_t gateways = 1;    // 1..65535
  std::size_t blocked_keys = 0;  // the blocked-key cache's entries; 0 = none
  // Leases for hot keys (ClientOptions::lease_duration); 0 = none, so the cluster decides all.
  std::chrono::milliseconds lease_duration{0};
  std::chrono::milliseconds connect_timeout{2'000};  // connect + handshake, all connections
  std::chrono::milliseconds drain_timeout{2'000};    // after the bound, for replies in flight
  // Workers spin on io_context::poll() instead of sleeping: each takes a whole core, and no
  // wake-up latency of the generator lands in the measured latency.
  bool busy_poll = false;
  // Sluice, --op acquire only: every Nth request of each worker (N = control_every, 2..1000) is
  // a PING frame of the same keys in place of the ACQUIRE, sent on the same connections in the
  // same schedule, timed the same way, and reported apart (LoadReport::control): the transport's
  // latency measured through the same moments as the decisions'. It decides nothing, so
  // decisions go at rate x (N - 1) / N. 0 = none.
  unsigned control_every = 0;
  // HTTP only (http_backend.h): each decision is `GET http_path` with its key in the header
  // `key_header`; 2xx is allowed, 429 and deny_status (0 = none) denied, any other status an
  // error. The audit's rule (rule, cost) must match the policy the endpoint applies.
  std::string http_path = "/";
  std::string key_header = "X-API-Key";
  int deny_status = 0;
  // Envoy's Rate Limit Service (rls_backend.h): each decision is one ShouldRateLimit call in
  // `rls_domain` with `descriptors` descriptors derived from its key (rls_request.h); OK is
  // allowed, OVER_LIMIT denied. Redis incr_window: a decision is `descriptors` counters, the
  // work envoyproxy/ratelimit does for such a call. 1..kMaxDescriptors.
  std::string rls_domain = "bench";
  unsigned descriptors = 1;
  // Called about once a second from the thread that called run_load(), with the totals so far.
  std::function<void(double elapsed_s, std::uint64_t sent, std::uint64_t allowed,
                     std::uint64_t denied, std::uint64_t errors)>
      progress;
};

// An empty string when the options can run, else a one-line reason.
std::string validate(const LoadOptions& options);

// Why a Redis run takes no token: the reason validate() and the command line give.
inline constexpr std::string_view kAuthTokenNeedsSluice =
    "--auth-token-file is for --backend sluice (sluice-load sends no Redis AUTH)";

// Connects, runs until the duration or request bound, drains, and reports. Fails (with nothing
// run) when the options are invalid or a connection or handshake fails at start.
client::Result<LoadReport> run_load(const LoadOptions& options);

}  // namespace sluice::load
