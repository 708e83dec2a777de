// sluice-load's Redis backend: its own sockets and RESP. A request is one pipelined write of
// --batch decisions on one connection (EVALSHA, or INCR + PEXPIRE [+ GET] per decision and
// per --descriptors for incr_window, or a bare INCR or PING), its replies read in order. Everything
// a handler queued for a connection goes out in one async_write at the end of that handler
// (flush()). A failed connection or a malformed reply ends the worker's run (BackendHost::failed).
//
// Per request nothing allocates once warm: the rings of writes in flight grow by doubling and
// stay, the out and in buffers are swapped and keep their capacity, and Asio's handler memory
// lives in per-connection slots (net/handler_slot.h).
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
#include "tools/load/key_generator.h"
#include "tools/load/load_driver.h"
#include "tools/load/redis_designs.h"
#include "tools/load/resp.h"

namespace sluice::load {

class RedisBackend final : public Backend {
 public:
  // `connections` sockets to `endpoint`. `audit`: null without --audit.
  RedisBackend(BackendHost& host, const LoadOptions& options, const KeyFormatter& formatter,
               SharedAudit* audit, boost::asio::ip::tcp::endpoint endpoint, unsigned connections);

  // Connects every connection and completes its handshake (SCRIPT LOAD for lua_token_bucket,
  // else PING), all at once.
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

 private:
  // One decision of a request.
  struct Item {
    std::uint64_t key = 0;
    IncrWindowPending window;  // incr_window only
  };
  // One pipelined write in flight on a connection: a whole request.
  struct Part {
    std::uint32_t id = 0;
    std::uint32_t request = 0;
    std::uint32_t first = 0;  // into items_
    std::uint32_t count = 0;
    bool active = false;
  };
  struct Conn {
    Conn(boost::asio::io_context& io, std::uint32_t index) : socket(io), lane(index) {}
    boost::asio::ip::tcp::socket socket;
    std::uint32_t lane;
    std::vector<std::uint8_t> out;      // appended by requests, not yet written
    std::vector<std::uint8_t> sending;  // the buffer async_write is sending
    bool writing = false;
    bool dirty = false;
    std::vector<std::uint8_t> in;
    std::size_t begin = 0;
    std::size_t end = 0;
    // Parts in flight, a ring indexed by id: [oldest, next) covers them all.
    std::vector<Part> ring = std::vector<Part>(64);
    std::uint32_t mask = 63;
    std::uint32_t next = 1;
    std::uint32_t oldest = 1;
    std::size_t in_flight = 0;
    std::uint32_t cursor = 0;  // items of the oldest part already answered
    bool ready = false;        // handshake done
    net::HandlerSlot read_slot;
    net::HandlerSlot write_slot;
  };

  void setup_failed(std::string why);
  void read_handshake(Conn& c);
  std::uint32_t next_open_conn();
  void add_part(Conn& c, std::uint32_t r, std::uint32_t first, std::uint32_t count);
  void write(Conn& c);
  void start_read(Conn& c);
  bool read_replies(Conn& c, std::uint64_t now_ns);
  void complete_part(Part& p, Conn& c, std::uint64_t now_ns);
  static void grow_ring(Conn& c);

  BackendHost& host_;
  const LoadOptions& o_;
  const KeyFormatter& formatter_;
  SharedAudit* const audit_;
  const boost::asio::ip::tcp::endpoint endpoint_;
  const bool incr_window_;  // acquire through the incr_window design
  std::vector<std::unique_ptr<Conn>> conns_;
  std::uint32_t rr_ = 0;  // the next connection, kAnyLane
  std::vector<Conn*> dirty_;
  std::vector<Item> items_;  // --batch per request
  std::vector<char> key_buf_;
  RespWriter writer_;
  RespParser parser_;
  std::string sha_;  // lua_token_bucket: the script's SHA1, from the handshake
  std::string setup_error_;
  bool closed_ = false;
};

}  // namespace sluice::load
