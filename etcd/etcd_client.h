// A client of etcd v3's HTTP/JSON gateway (docs/ARCHITECTURE.md, "The etcd client"): leases,
// keys and watches, over HTTP/1.1 with Boost.Beast, for sluiced's membership and fencing and for
// sluicectl's view of etcd. Keys and values are bytes (the gateway carries them in base64).
//
// Threading: one io_context, one thread; every call is a coroutine on it, and calls may run at
// the same time: each opens its own connection (on loopback that costs about 0.1 ms, and a node
// makes a few calls a second). Each call has a deadline (Config::timeout). Calls start at the
// member that answered last (current_endpoint()) and go round Config::endpoints from there: an
// endpoint that cannot be reached, does not answer in time, or answers with an error that is
// that member's own (member_specific()) is left for the next, within the deadline. So a member
// that froze costs one call a share of its deadline, not every call. Host names are resolved by
// the system resolver, which the deadline does not bound: give addresses.
#pragma once

#include "net/asio.h"  // before any other Asio header

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/expected.h"

namespace sluice::etcd {

struct Endpoint {
  std::string host;  // a name or an IPv4 address
  std::uint16_t port = 0;
  friend bool operator==(const Endpoint&, const Endpoint&) = default;
};

// "http://HOST:PORT[,http://HOST:PORT...]" (what --etcd takes): the endpoints, or why not.
// Only http:// (the gateway without TLS), a port in 1..65535, no path.
Expected<std::vector<Endpoint>> parse_endpoints(std::string_view urls);

// Whether an error answer is the member's own, so that another member of the same cluster may
// answer the same call: an HTTP status of 429 or 5xx (a learner's "rpc not supported for
// learner", "too many requests", "leader changed", "no leader", a timeout: gRPC's Unavailable,
// ResourceExhausted, DeadlineExceeded and Aborted come through the gateway as those), or such a
// gRPC code in the body of a streamed answer (which the gateway sends with status 200). Every
// other error (a lease not found, a bad request) is the cluster's answer: final.
bool member_specific(int http_status, std::int64_t grpc_code, std::string_view message);

// Standard base64 with padding, as the gateway writes bytes.
std::string base64_encode(std::string_view bytes);
std::optional<std::string> base64_decode(std::string_view text);

struct KeyValue {
  std::string key;
  std::string value;
  std::int64_t create_revision = 0;
  std::int64_t mod_revision = 0;
  std::int64_t version = 0;
  std::int64_t lease = 0;  // 0: none
};

struct Lease {
  std::int64_t id = 0;
  std::int64_t ttl_s = 0;  // granted
};

struct RangeResult {
  std::int64_t revision = 0;  // the store's revision when it was read
  std::vector<KeyValue> kvs;  // in key order
};

struct WatchEvent {
  enum class Type { kPut, kDelete };
  Type type = Type::kPut;
  KeyValue kv;  // a delete carries the key and its mod_revision (the deletion's)
};

// One message of a watch stream.
struct WatchBatch {
  std::int64_t revision = 0;          // the store's revision as of this message
  bool created = false;               // the first message: the watch is in place
  bool canceled = false;              // etcd ended the watch (see compact_revision)
  std::int64_t compact_revision = 0;  // > 0: the start revision was compacted away
  std::vector<WatchEvent> events;     // in revision order
};

class Client {
 public:
  struct Config {
    std::vector<Endpoint> endpoints;
    std::chrono::milliseconds timeout{1000};  // per call, over all endpoints tried
    // TCP keepalive on every connection to etcd (a watch's above all): probes start after this
    // much silence and three unanswered ones, a second apart, break the connection. A member
    // whose host died without a FIN is left after idle + 3 s. Zero: no keepalive.
    std::chrono::seconds tcp_keepalive_idle{2};
    // The local address of every connection (ServerConfig::source_address); empty: any.
    std::string source_address;
  };

  Client(boost::asio::io_context& io, Config config);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // POST /v3/lease/grant.
  boost::asio::awaitable<Expected<Lease>> grant(std::chrono::seconds ttl);
  // POST /v3/lease/keepalive, once: the TTL etcd now gives the lease, 0 when it has expired
  // (or never existed).
  boost::asio::awaitable<Expected<std::int64_t>> keepalive(std::int64_t lease);
  // POST /v3/lease/timetolive: the whole seconds the lease has left (-1 when it has expired or
  // never existed) and the TTL it was granted.
  struct TimeToLive {
    std::int64_t ttl_s = -1;
    std::int64_t granted_s = 0;
  };
  boost::asio::awaitable<Expected<TimeToLive>> time_to_live(std::int64_t lease);
  // POST /v3/lease/revoke.
  boost::asio::awaitable<Expected<bool>> revoke(std::int64_t lease);
  // POST /v3/kv/put: the revision of the write. `lease` 0: none.
  boost::asio::awaitable<Expected<std::int64_t>> put(std::string_view key, std::string_view value,
                                                     std::int64_t lease = 0);
  // POST /v3/kv/put in a transaction that succeeds only if `key` does not exist: whether it
  // was written (and the revision either way).
  struct PutIfAbsent {
    bool written = false;
    std::int64_t revision = 0;
  };
  boost::asio::awaitable<Expected<PutIfAbsent>> put_if_absent(std::string_view key,
                                                              std::string_view value,
                                                              std::int64_t lease = 0);
  // POST /v3/kv/range of one key, or of every key starting with `key` when `prefix`.
  boost::asio::awaitable<Expected<RangeResult>> range(std::string_view key, bool prefix);
  // POST /v3/kv/deleterange of one key: how many were deleted (0 or 1).
  boost::asio::awaitable<Expected<std::int64_t>> del(std::string_view key);

  // POST /v3/watch on every key starting with `prefix`, from `start_revision` (0: from now).
  // Calls `on_batch` for each message until it returns false, etcd cancels the watch, the
  // stream breaks, or stop_watches() is called; then returns why it ended ("" when on_batch
  // asked to stop). The stream has no deadline; connecting and its first message do. The watch
  // asks for progress notifications and requires a leader (etcd ends it when its member loses
  // the leader), but a member that froze ends nothing: the caller confirms what the watch says
  // by other calls, and leave_watch_endpoint() before the next watch moves it to another member.
  boost::asio::awaitable<std::string> watch(std::string_view prefix, std::int64_t start_revision,
                                            std::function<bool(const WatchBatch&)> on_batch);
  // Ends every watch under way (each returns "stopped").
  void stop_watches();

  // "HOST:PORT" of the member calls start at: the one that answered last.
  std::string current_endpoint() const;
  // Its index in Config::endpoints.
  std::size_t current_endpoint_index() const { return start_index(); }
  // "HOST:PORT" of the member the last watch was made on ("" before any).
  std::string watch_endpoint() const;
  // The next watch (and call) starts at the member after the last watch's, which the caller
  // found stale.
  void leave_watch_endpoint();

 private:
  struct Connection;
  // One request: POST `path` with `body` (JSON), the JSON answer's text, or why not.
  boost::asio::awaitable<Expected<std::string>> post(std::string_view path, std::string body);

  // The stream of `endpoint`, connected, or why not.
  boost::asio::awaitable<std::string> connect(Connection& connection, const Endpoint& endpoint);

  // Calls start at endpoints[preferred_]; it moves to each endpoint that answers.
  std::size_t start_index() const { return preferred_ % config_.endpoints.size(); }
  std::string where(std::size_t index) const;

  boost::asio::io_context& io_;
  Config config_;
  std::vector<std::weak_ptr<Connection>> watching_;
  std::size_t preferred_ = 0;
  std::size_t watch_index_ = 0;
  bool watched_ = false;  // watch_index_ is set
};

}  // namespace sluice::etcd
