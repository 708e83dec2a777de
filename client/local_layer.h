// Internal: the background probe of a node whose breaker is open (docs/CLIENT.md section 10).
// The rest of the local layer is Client::Impl's (client_impl.h), in client/local_layer.cpp.
#pragma once

#include "net/asio.h"  // before any other Asio header

#include <cstdint>

#include "client/client.h"
#include "client/node_connection.h"
#include "client/router.h"

namespace sluice::client::detail {

// Probes one down node on the I/O thread: a PING on its first public connection after each
// backoff, until one is answered; then the node is up again. I/O thread only.
class NodeProber final : public ReplySink {
 public:
  NodeProber(Client::Impl& impl, NodeHealth& health);

  const NodeHealth& health() const { return health_; }
  void start();
  void cancel() { timer_.cancel(); }

  void on_reply(std::uint32_t part, const protocol::Frame& reply) override;
  void on_failure(std::uint32_t part, const Status& status) override;

 private:
  void arm();
  void on_timer(const boost::system::error_code& ec);

  NodeHealth& health_;
  Client::Impl& impl_;
  boost::asio::steady_timer timer_;
  std::uint64_t jitter_;
};

}  // namespace sluice::client::detail
