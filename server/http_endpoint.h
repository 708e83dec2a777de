// sluiced's HTTP side (ServerConfig::http_listen): /metrics (Prometheus text format 0.0.4),
// /healthz and /readyz, served by an http::Server on a thread of its own, never a shard's.
// docs/OPERATIONS.md, "Metrics", documents every answer.
#pragma once

#include "net/asio.h"  // before any other Asio header

#include <cstdint>
#include <string>
#include <thread>

#include "http/server.h"
#include "server/node_metrics.h"

namespace sluice::server {

class Server;

class HttpEndpoint {
 public:
  // REQUIRES: `server` outlives this.
  explicit HttpEndpoint(const Server& server);
  ~HttpEndpoint();  // stop() and join()
  HttpEndpoint(const HttpEndpoint&) = delete;
  HttpEndpoint& operator=(const HttpEndpoint&) = delete;

  // Binds `listen` (HOST:PORT, port 0 = ephemeral) and starts the thread. Throws
  // std::invalid_argument for a malformed address, std::system_error when it cannot bind.
  void start(const std::string& listen);
  std::uint16_t port() const { return http_.port(); }
  // Any thread, any number of times: closes the listener and the connections.
  void stop() { http_.stop(); }
  // Waits for the thread (after stop()). Not from the endpoint's thread.
  void join();

 private:
  void handle(const http::Request& request, http::Responder responder) const;

  const Server& server_;
  boost::asio::io_context io_{1};
  http::Server http_;
  NodeMetrics metrics_;
  std::thread thread_;
};

}  // namespace sluice::server
