// A client of etcd v3's HTTP/JSON gateway (docs/ARCHITECTURE.md, "The etcd client"): leases,
// keys and watches, over HTTP/1.1 with Boost.Beast, for sluiced's membership and fencing and for
// sluicectl's view of etcd. Keys and values are bytes (the gateway carries them in base64).
//
// Threading: one io_context, one thread; every call is a coroutine on it, and calls may run at
// the same time: each opens its own connection (on loopback that costs about 0.1 ms, and a node
// makes a few calls a second). Each call has a deadline (Config::timeout); an endpoint that
// cannot be reached or does not answer in time is left for the next one of Config::endpoints,
// in order, within that deadline. Host names are resolved by the system resolver, which the
// deadline does not bound: give addresses.
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
  // asked to stop). The stream has no deadline; connecting and its first message do.
  boost::asio::awaitable<std::string> watch(std::string_view prefix, std::int64_t start_revision,
                                            std::function<bool(const WatchBatch&)> on_batch);
  // Ends every watch under way (each returns "stopped").
  void stop_watches();

 private:
  struct Connection;
  // One request: POST `path` with `body` (JSON), the JSON answer's text, or why not.
  boost::asio::awaitable<Expected<std::string>> post(std::string_view path, std::string body);

  // The stream of `endpoint`, connected, or why not.
  boost::asio::awaitable<std::string> connect(Connection& connection, const Endpoint& endpoint);

  boost::asio::io_context& io_;
  Config config_;
  std::vector<std::weak_ptr<Connection>> watching_;
};

}  // namespace sluice::etcd
