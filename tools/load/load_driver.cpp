#include "tools/load/load_driver.h"

#include "net/asio.h"  // before any other Asio header

#include <fmt/core.h>

#include <algorithm>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "client/client.h"
#include "cluster/ring.h"
#include "core/clock.h"
#include "core/key_hash.h"
#include "net/host_port.h"
#include "tools/load/http_backend.h"
#include "tools/load/redis_backend.h"
#include "tools/load/rls_backend.h"
#include "tools/load/sluice_backend.h"
#include "tools/load/worker.h"

namespace sluice::load {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using client::ErrorCode;
using client::Result;
using client::Status;

std::optional<BackendKind> parse_backend(std::string_view name) {
  if (name == "sluice") return BackendKind::kSluice;
  if (name == "redis") return BackendKind::kRedis;
  if (name == "http") return BackendKind::kHttp;
  if (name == "rls") return BackendKind::kRls;
  return std::nullopt;
}

std::string_view backend_name(BackendKind backend) {
  switch (backend) {
    case BackendKind::kSluice:
      return "sluice";
    case BackendKind::kRedis:
      return "redis";
    case BackendKind::kHttp:
      return "http";
    case BackendKind::kRls:
      return "rls";
  }
  return "unknown";
}

std::optional<Operation> parse_operation(std::string_view name) {
  if (name == "acquire") return Operation::kAcquire;
  if (name == "ping") return Operation::kPing;
  if (name == "incr") return Operation::kIncr;
  return std::nullopt;
}

std::string_view operation_name(Operation op) {
  switch (op) {
    case Operation::kAcquire:
      return "acquire";
    case Operation::kPing:
      return "ping";
    case Operation::kIncr:
      return "incr";
  }
  return "unknown";
}

namespace {

// RFC 9110's tchar: what a header field's name is made of.
bool is_token_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

// Visible ASCII: what the request line and a key header's value may carry here.
bool is_visible(std::string_view text) {
  return std::all_of(text.begin(), text.end(), [](char c) { return c > ' ' && c < 0x7f; });
}

std::string validate_http(const LoadOptions& o) {
  const bool http = o.backend == BackendKind::kHttp;
  if (!http) {
    if (o.http_path != "/" || o.key_header != "X-API-Key" || o.deny_status != 0) {
      return "--path, --key-header and --deny-status are for --backend http";
    }
    return "";
  }
  if (o.op != Operation::kAcquire) return "--op ping and incr are not for --backend http";
  if (o.http_path.empty() || o.http_path.front() != '/' || !is_visible(o.http_path)) {
    return "--path " + o.http_path + ": expected an origin-form target such as /v1/items";
  }
  if (o.key_header.empty() ||
      !std::all_of(o.key_header.begin(), o.key_header.end(), is_token_char)) {
    return "--key-header " + o.key_header + ": expected a header field name such as X-API-Key";
  }
  if (o.deny_status != 0 && (o.deny_status < 400 || o.deny_status > 599)) {
    return fmt::format("--deny-status {}: must be 400..599", o.deny_status);
  }
  if (!is_visible(o.key_prefix)) {
    return "--key-prefix " + o.key_prefix + ": a key goes in a header: visible ASCII only";
  }
  return "";
}

// --descriptors and --rls-domain: where they apply, and a domain and keys a call can carry.
std::string validate_rls(const LoadOptions& o) {
  const bool rls = o.backend == BackendKind::kRls;
  if (!rls && o.rls_domain != LoadOptions{}.rls_domain) return "--rls-domain is for --backend rls";
  if (o.descriptors < 1 || o.descriptors > kMaxDescriptors) {
    return fmt::format("--descriptors {}: must be 1..{}", o.descriptors, kMaxDescriptors);
  }
  const bool incr_window = o.backend == BackendKind::kRedis && o.op == Operation::kAcquire &&
                           o.redis_design == RedisDesign::kIncrWindow;
  if (o.descriptors != 1 && !rls && !incr_window) {
    return "--descriptors is for --backend rls and --backend redis --redis-design incr_window";
  }
  if (!rls) return "";
  if (o.op != Operation::kAcquire) return "--op ping and incr are not for --backend rls";
  if (o.batch != 1) {
    return fmt::format(
        "--batch {}: --backend rls sends one ShouldRateLimit call per decision (--batch 1; "
        "--descriptors sets the call's size, --depth the calls in flight)",
        o.batch);
  }
  if (o.rls_domain.empty() || !is_visible(o.rls_domain)) {
    return "--rls-domain " + o.rls_domain + ": expected a domain name (visible ASCII)";
  }
  if (!is_visible(o.key_prefix)) {
    return "--key-prefix " + o.key_prefix + ": a key goes in a descriptor: visible ASCII only";
  }
  return "";
}

}  // namespace

std::string validate(const LoadOptions& o) {
  if (o.servers.empty()) return "no servers given";
  if (o.connections < 1 || o.connections > kMaxConnections) {
    return fmt::format("--connections {}: must be 1..{}", o.connections, kMaxConnections);
  }
  if (o.depth < 1 || o.depth > 100'000) {
    return fmt::format("--depth {}: must be 1..100000", o.depth);
  }
  if (o.batch < 1 || o.batch > 65'535) return fmt::format("--batch {}: must be 1..65535", o.batch);
  if (o.gateways < 1 || o.gateways > 65'535) {
    return fmt::format("--gateways {}: must be 1..65535", o.gateways);
  }
  if (o.backend != BackendKind::kSluice &&
      (o.failure_policy != client::FailurePolicy::kReport || o.gateways != 1 ||
       o.blocked_keys != 0 || o.lease_duration.count() != 0)) {
    return "--failure-policy, --gateways, --blocked-keys and --lease-duration are for --backend "
           "sluice";
  }
  if (o.threads < 1 || o.threads > 256) {
    return fmt::format("--threads {}: must be 1..256", o.threads);
  }
  if (o.threads > o.connections) {
    return fmt::format("--threads {}: must be 1..{} (at most --connections)", o.threads,
                       o.connections);
  }
  if (!(o.rate >= 0) || o.rate > 1e9) {
    return fmt::format("--rate {}: must be 0..1000000000 (0 = closed loop)", o.rate);
  }
  if (o.keys < 1) return "--keys: expected at least 1";
  if (o.duration.count() <= 0 && o.requests == 0) {
    return "give --duration or --requests (the run must stop by itself)";
  }
  if (o.duration.count() < 0) return "--duration must not be negative";
  if (o.op == Operation::kIncr && o.backend != BackendKind::kRedis) {
    return "--op incr is for --backend redis";
  }
  if (!o.auth_token.empty() && o.backend != BackendKind::kSluice) {
    return std::string(kAuthTokenNeedsSluice);
  }
  if (!o.only_node.empty() && o.backend != BackendKind::kSluice) {
    return "--only-node is for --backend sluice (a node of a Sluice cluster)";
  }
  if (!o.only_node.empty() && o.keys > kMaxOnlyNodeKeys) {
    return fmt::format("--only-node takes at most {} keys (its key list is built up front)",
                       kMaxOnlyNodeKeys);
  }
  if (o.control_every != 0) {
    if (o.control_every < 2 || o.control_every > 1000) {
      return fmt::format("--control-every {}: must be 2..1000 (0 = none)", o.control_every);
    }
    if (o.backend != BackendKind::kSluice || o.op != Operation::kAcquire) {
      return "--control-every is for --backend sluice with --op acquire";
    }
  }
  if (std::string why = validate_http(o); !why.empty()) return why;
  if (std::string why = validate_rls(o); !why.empty()) return why;
  if (o.op == Operation::kAcquire) {
    if (const RuleError e = sluice::validate(o.rule, o.cost); e != RuleError::kOk) {
      return "bad rule: " + std::string(describe(e));
    }
    if (o.backend == BackendKind::kRedis) {
      const Algorithm a = o.rule.algorithm;
      if (o.redis_design == RedisDesign::kLuaTokenBucket && a != Algorithm::kTokenBucket) {
        return "--redis-design lua_token_bucket needs --algorithm token_bucket";
      }
      if (o.redis_design == RedisDesign::kIncrWindow && a != Algorithm::kFixedWindow &&
          a != Algorithm::kSlidingWindow) {
        return "--redis-design incr_window needs --algorithm fixed_window or sliding_window";
      }
    }
  }
  return "";
}

namespace {

Result<tcp::endpoint> resolve(const std::string& server) {
  const std::optional<net::HostPort> parsed = net::parse_host_port(server);
  if (!parsed) {
    return Status(ErrorCode::kInvalidArgument, "expected HOST:PORT, got \"" + server + "\"");
  }
  const std::string& host = parsed->host;
  const std::uint16_t port = parsed->port;
  asio::io_context io;
  tcp::resolver resolver(io);
  boost::system::error_code ec;
  const auto found = resolver.resolve(host, std::to_string(port), ec);
  if (ec || found.empty()) {
    return Status(ErrorCode::kConnectionFailed, "cannot resolve " + host + ": " + ec.message());
  }
  return found.begin()->endpoint();
}

// --only-node: the indices of the run's keys whose primary is that node in the seed's map,
// ascending; fails when there are none.
Result<std::vector<std::uint32_t>> only_node_keys(client::Client& client,
                                                  const LoadOptions& options,
                                                  const KeyFormatter& formatter) {
  Result<client::ClusterInfo> info = client.cluster();
  if (!info.ok()) return info.status();
  if (info->nodes.empty()) {
    return Status(ErrorCode::kInvalidArgument, "--only-node " + options.only_node + ": " +
                                                   options.servers.front() +
                                                   " is not in a cluster");
  }
  std::vector<std::string> active;
  for (const client::ClusterNodeInfo& node : info->nodes) {
    if (node.state == "active") active.push_back(node.id);
  }
  cluster::RingParams params;
  params.hash_version = info->ring_version;
  params.partition_bits = info->partition_bits;
  params.vnodes_per_node = info->vnodes_per_node;
  auto ring = cluster::Ring::build(std::move(active), params);
  if (!ring) return Status(ErrorCode::kProtocolError, "the cluster's ring: " + ring.error());
  const std::optional<cluster::NodeIndex> index = ring->find(options.only_node);
  if (!index) {
    return Status(ErrorCode::kInvalidArgument, "--only-node " + options.only_node +
                                                   ": no active node of that id in the map of "
                                                   "epoch " +
                                                   std::to_string(info->epoch));
  }
  // Every key of the run whose primary it is (validate() bounded --keys).
  std::vector<char> buffer(formatter.max_length());
  std::vector<std::uint32_t> keys;
  for (std::uint64_t k = 0; k < options.keys; ++k) {
    if (ring->primary_of(hash_key(formatter.format(k, buffer))) == *index) {
      keys.push_back(static_cast<std::uint32_t>(k));
    }
  }
  if (keys.empty()) {
    return Status(ErrorCode::kInvalidArgument,
                  fmt::format("--only-node {}: none of the {} keys has it as primary",
                              options.only_node, options.keys));
  }
  return keys;
}

}  // namespace

Result<LoadReport> run_load(const LoadOptions& options) {
  if (std::string why = validate(options); !why.empty()) {
    return Status(ErrorCode::kInvalidArgument, why);
  }
  RunContext ctx(options);
  const KeyFormatter formatter(options.key_prefix, options.keys);
  Result<tcp::endpoint> endpoint = resolve(options.servers.front());
  if (!endpoint.ok()) return endpoint.status();

  LoadReport report;
  unsigned shards = 1;
  if (options.backend == BackendKind::kSluice) {
    // Discovery through the client library: HELLO on the public port gives the shard ports.
    client::ClientOptions copts;
    copts.servers = options.servers;
    copts.shard_aware = false;
    copts.connect_timeout = options.connect_timeout;
    copts.client_name = "sluice-load";
    copts.auth_token = options.auth_token;
    // open or closed: a run with no node answering is decided by the policy (SluiceBackend's
    // clients keep looking for the cluster); report fails here, naming every seed.
    copts.require_cluster_at_connect = options.failure_policy == client::FailurePolicy::kReport;
    auto discovered = client::Client::connect(copts);
    if (!discovered.ok()) return discovered.status();
    const client::ServerInfo info = (*discovered)->server_info();
    if ((*discovered)->seeded()) {
      if (info.shard_ports.empty()) {
        return Status(ErrorCode::kProtocolError, "the server reported no shard ports");
      }
      if (options.batch > info.max_batch) {
        return Status(ErrorCode::kInvalidArgument,
                      fmt::format("--batch {} is above the server's max batch {}", options.batch,
                                  info.max_batch));
      }
      if (formatter.max_length() > info.max_key) {
        return Status(ErrorCode::kInvalidArgument, "keys are longer than the server's max key");
      }
      shards = static_cast<unsigned>(info.shard_ports.size());
    }
    if (!options.only_node.empty()) {
      auto keys = only_node_keys(**discovered, options, formatter);
      if (!keys.ok()) return keys.status();
      ctx.only_keys = std::move(keys).value();
    }
  }
  report.shards = options.backend == BackendKind::kSluice ? shards : 0;
  std::optional<SharedAudit> audit;
  if (options.audit && options.op == Operation::kAcquire) {
    audit.emplace(options.rule, std::min(options.audit_keys, options.keys));
  }

  // Connections and the request quota, split over the threads. Each Sluice worker opens at
  // least one connection per shard.
  const unsigned t_count = options.threads;
  std::vector<std::unique_ptr<Worker>> workers;
  for (unsigned t = 0; t < t_count; ++t) {
    unsigned conns = options.connections / t_count + (t < options.connections % t_count ? 1 : 0);
    std::uint64_t quota = 0;
    if (options.requests != 0) {
      quota = options.requests / t_count + (t < options.requests % t_count ? 1 : 0);
      if (quota == 0) continue;
    }
    const MakeBackend make = [&, conns](BackendHost& host) -> std::unique_ptr<Backend> {
      SharedAudit* const shared = audit ? &*audit : nullptr;
      if (options.backend == BackendKind::kSluice) {
        return std::make_unique<SluiceBackend>(host, options, formatter, shared, conns, shards);
      }
      if (options.backend == BackendKind::kHttp) {
        return std::make_unique<HttpBackend>(host, options, formatter, shared, *endpoint,
                                             options.servers.front(), conns);
      }
      if (options.backend == BackendKind::kRls) {
        return std::make_unique<RlsBackend>(host, options, formatter, shared,
                                            options.servers.front(), conns);
      }
      return std::make_unique<RedisBackend>(host, options, formatter, shared, *endpoint, conns);
    };
    workers.push_back(std::make_unique<Worker>(ctx, t, quota, options.rate / t_count, make));
  }
  for (auto& w : workers) {
    if (Status s = w->connect(); !s.ok()) return s;
    report.connections += w->connections();
    report.nodes = std::max(report.nodes, w->nodes());
  }

  ctx.start_ns = monotonic_now_ns();
  if (options.duration.count() > 0) {
    ctx.deadline_ns =
        ctx.start_ns + static_cast<std::uint64_t>(options.duration.count()) * 1'000'000;
  }
  std::mutex done_mu;
  std::condition_variable done_cv;
  std::size_t running = workers.size();
  std::vector<std::thread> threads;
  for (auto& w : workers) {
    threads.emplace_back([&, worker = w.get()] {
      worker->run();
      std::lock_guard lock(done_mu);
      --running;
      done_cv.notify_all();
    });
  }
  {
    std::unique_lock lock(done_mu);
    for (int second = 1; running > 0; ++second) {
      const auto when = std::chrono::steady_clock::time_point(
          std::chrono::nanoseconds(ctx.start_ns) + std::chrono::seconds(second));
      if (done_cv.wait_until(lock, when, [&] { return running == 0; })) break;
      if (options.progress) {
        std::uint64_t sent = 0, allowed = 0, denied = 0, errors = 0;
        for (auto& w : workers) {
          sent += w->published().sent.load(std::memory_order_relaxed);
          allowed += w->published().allowed.load(std::memory_order_relaxed);
          denied += w->published().denied.load(std::memory_order_relaxed);
          errors += w->published().errors.load(std::memory_order_relaxed);
        }
        lock.unlock();
        options.progress(static_cast<double>(second), sent, allowed, denied, errors);
        lock.lock();
      }
    }
  }
  for (std::thread& t : threads) t.join();

  std::uint64_t end_ns = ctx.start_ns;
  for (auto& w : workers) {
    w->add_to(report);
    end_ns = std::max(end_ns, w->end_ns());
  }
  report.duration_s = static_cast<double>(end_ns - ctx.start_ns) / 1e9;
  report.throughput_per_s =
      report.duration_s > 0
          ? static_cast<double>(report.allowed + report.denied) / report.duration_s
          : 0;
  if (audit) report.audit = audit->audit.report();
  return report;
}

}  // namespace sluice::load
