// An outgoing TCP connection from a chosen local address. A node that gives --source-address
// originates every connection (to other nodes, to etcd) from it, so that the hosts it talks to,
// and a firewall between them, see which node a packet comes from (several nodes on one machine,
// each on its own address: docs/OPERATIONS.md).
#pragma once

#include "net/asio.h"  // before any other Asio header

#include <string>

namespace sluice::net {

// Connects `stream` (a tcp::socket, or a stream with async_connect(endpoint) over `socket`, as
// Beast's tcp_stream, whose timeout then holds) to the first of `endpoints` that accepts, as
// asio::async_connect does, with the socket bound to `source` (any port) before each attempt.
// An empty `source` leaves the local address to the kernel; an endpoint of another family than
// `source` is skipped. Returns the last attempt's error, or none once connected.
template <typename Stream, typename Endpoints>
boost::asio::awaitable<boost::system::error_code> connect_from(Stream& stream,
                                                               boost::asio::ip::tcp::socket& socket,
                                                               const Endpoints& endpoints,
                                                               const std::string& source) {
  namespace asio = boost::asio;
  boost::system::error_code ec;
  asio::ip::address local;
  if (!source.empty()) {
    local = asio::ip::make_address(source, ec);
    if (ec) co_return ec;
  }
  ec = asio::error::host_not_found;
  for (const auto& entry : endpoints) {
    const asio::ip::tcp::endpoint remote = entry.endpoint();
    if (!source.empty() && remote.address().is_v4() != local.is_v4()) continue;
    boost::system::error_code ignored;
    socket.close(ignored);
    ec = {};
    if (!source.empty()) {
      socket.open(remote.protocol(), ec);
      if (!ec) socket.bind(asio::ip::tcp::endpoint(local, 0), ec);
    }
    if (!ec) co_await stream.async_connect(remote, redirect(ec));
    if (!ec) co_return ec;
  }
  co_return ec;
}

}  // namespace sluice::net
