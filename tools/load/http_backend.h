// sluice-load's HTTP backend: drives any HTTP/1.1 endpoint that answers rate-limit decisions by
// status code (nginx in front of sluice-gateway, the gateway's /check, or anything else). One
// decision is one `GET --path` carrying its key in the header named by --key-header; 2xx is
// allowed, 429 (and --deny-status) denied, any other status an error. A request of the worker
// is --batch such GETs written at once on one keep-alive connection, and --depth requests may
// be in flight per connection: HTTP/1.1 pipelining, the responses read in order.
//
// A connection that ends (the server's `Connection: close`, EOF, a reset, a malformed
// response) costs only the decisions that were sent on it and not answered: they count as
// errors, and the connection is opened again; requests queued meanwhile go out on the new one.
// A reconnection that fails ends the worker's run (BackendHost::failed).
//
// Per request nothing allocates once warm: requests are written by hand into reused buffers,
// responses read by HttpResponseReader, and Asio's handler memory lives in per-connection slots.
#pragma once

#include "net/asio.h"  // before any other Asio header

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "net/handler_slot.h"
#include "tools/load/backend.h"
#include "tools/load/http_response.h"
#include "tools/load/key_generator.h"
#include "tools/load/load_driver.h"

namespace sluice::load {

class HttpBackend final : public Backend {
 public:
  // `connections` sockets to `endpoint`; `host` is the Host header's value. `audit`: null
  // without --audit.
  HttpBackend(BackendHost& host, const LoadOptions& options, const KeyFormatter& formatter,
              SharedAudit* audit, boost::asio::ip::tcp::endpoint endpoint, std::string host_field,
              unsigned connections);

  // Connects every connection (TCP only: HTTP has no handshake), all at once.
  client::Status connect() override;
  unsigned connections() const override { return static_cast<unsigned>(conns_.size()); }
  unsigned nodes() const override { return 0; }
  void reserve(std::size_t requests) override;
  void start() override;
  // A lane is a connection. kAnyLane: the next in turn with fewer than --depth requests in
  // flight (the worker keeps fewer than connections x depth in flight, so there is one).
  void issue(std::uint32_t r, std::span<const std::uint64_t> keys, std::uint32_t lane) override;
  void flush() override;
  void close() override;

  // Connections opened again after one ended, over the run (all connections of this backend).
  std::uint64_t reconnects() const { return reconnects_; }

 private:
  // One request of the worker in flight on a connection: `count` GETs, answered in order.
  struct Part {
    std::uint32_t id = 0;
    std::uint32_t request = 0;
    std::uint32_t first = 0;  // into keys_
    std::uint32_t count = 0;
    std::uint64_t issued_unix_ns = 0;  // --audit: the earliest the server can have decided
    bool active = false;
  };
  struct Conn {
    Conn(boost::asio::io_context& io, std::uint32_t index) : socket(io), lane(index) {}
    boost::asio::ip::tcp::socket socket;
    std::uint32_t lane;
    std::uint32_t generation = 0;  // a handler of an earlier socket is ignored
    bool connecting = false;       // reopening: issue() queues, nothing is written
    std::vector<char> out;         // appended by requests, not yet written
    std::vector<char> sending;     // the buffer async_write is sending
    bool writing = false;
    bool dirty = false;
    std::vector<char> in;
    std::size_t begin = 0;
    std::size_t end = 0;
    HttpResponseReader reader;
    // Parts in flight, a ring indexed by id: [oldest, next) covers them all, and
    // [oldest, unsent) those whose bytes have been handed to the socket.
    std::vector<Part> ring = std::vector<Part>(64);
    std::uint32_t mask = 63;
    std::uint32_t next = 1;
    std::uint32_t oldest = 1;
    std::uint32_t unsent = 1;
    std::size_t in_flight = 0;
    std::uint32_t cursor = 0;  // GETs of the oldest part already answered
    net::HandlerSlot read_slot;
    net::HandlerSlot write_slot;
  };

  void setup_failed(std::string why);
  std::uint32_t next_open_conn();
  void add_part(Conn& c, std::uint32_t r, std::uint32_t first, std::uint32_t count);
  void write(Conn& c);
  void start_read(Conn& c);
  bool read_responses(Conn& c, std::uint64_t now_ns);
  void count_response(Conn& c, const HttpResponseHead& head, std::uint64_t now_ns);
  void drop(Conn& c, std::string_view why, std::uint64_t now_ns);
  void reopen(Conn& c);
  static void grow_ring(Conn& c);

  BackendHost& host_;
  const LoadOptions& o_;
  const KeyFormatter& formatter_;
  SharedAudit* const audit_;
  const boost::asio::ip::tcp::endpoint endpoint_;
  std::string head_;  // "GET PATH HTTP/1.1\r\nHost: HOST\r\nKEY-HEADER: ", then the key
  std::vector<std::unique_ptr<Conn>> conns_;
  std::uint32_t rr_ = 0;  // the next connection, kAnyLane
  std::vector<Conn*> dirty_;
  std::vector<std::uint64_t> keys_;  // --batch per request
  std::vector<char> key_buf_;
  std::string setup_error_;
  std::uint64_t reconnects_ = 0;
  bool closed_ = false;
};

}  // namespace sluice::load
