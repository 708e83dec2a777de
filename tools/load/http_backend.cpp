#include "tools/load/http_backend.h"

#include <fmt/core.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <mutex>
#include <utility>

#include "core/clock.h"
#include "net/host_port.h"

namespace sluice::load {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using client::ErrorCode;
using client::Status;
using net::in_slot;

namespace {

constexpr std::size_t kReadChunk = 64 * 1024;
constexpr std::string_view kEndOfHead = "\r\n\r\n";

// Part ids run 1, 2, ... and wrap to 1: 0 names no part.
std::uint32_t next_id(std::uint32_t id) { return id == UINT32_MAX ? 1 : id + 1; }

std::uint64_t unix_now_ns() { return SystemClock::instance().now_ns(); }

}  // namespace

HttpBackend::HttpBackend(BackendHost& host, const LoadOptions& options,
                         const KeyFormatter& formatter, SharedAudit* audit, tcp::endpoint endpoint,
                         std::string host_field, unsigned connections)
    : host_(host),
      o_(options),
      formatter_(formatter),
      audit_(audit),
      endpoint_(std::move(endpoint)),
      head_(fmt::format("GET {} HTTP/1.1\r\nHost: {}\r\n{}: ", options.http_path, host_field,
                        options.key_header)),
      key_buf_(formatter.max_length()) {
  const std::size_t request_bytes = head_.size() + formatter.max_length() + kEndOfHead.size();
  for (unsigned i = 0; i < connections; ++i) {
    auto c = std::make_unique<Conn>(host_.io(), i);
    c->in.resize(kReadChunk);
    c->out.reserve(request_bytes * o_.batch * o_.depth);
    c->sending.reserve(request_bytes * o_.batch * o_.depth);
    conns_.push_back(std::move(c));
  }
  dirty_.reserve(conns_.size());
}

// ---- setup ----------------------------------------------------------------------------------

Status HttpBackend::connect() {
  asio::io_context& io = host_.io();
  std::size_t connected = 0;
  for (auto& owned : conns_) {
    Conn& c = *owned;
    c.socket.async_connect(endpoint_, [this, &c, &connected](const boost::system::error_code& ec) {
      if (ec) {
        return setup_failed(
            fmt::format("connect to {} failed: {}",
                        net::format_host_port(endpoint_.address().to_string(), endpoint_.port()),
                        ec.message()));
      }
      boost::system::error_code ignored;
      c.socket.set_option(tcp::no_delay(true), ignored);
      ++connected;
    });
  }
  io.run_for(o_.connect_timeout);
  if (connected != conns_.size() || !setup_error_.empty()) {
    for (auto& c : conns_) {
      boost::system::error_code ignored;
      c->socket.close(ignored);
    }
    io.restart();
    io.run();  // aborted handlers
    return Status(ErrorCode::kConnectionFailed,
                  setup_error_.empty()
                      ? fmt::format("connect not done within {} ms", o_.connect_timeout.count())
                      : setup_error_);
  }
  io.restart();
  return Status();
}

void HttpBackend::setup_failed(std::string why) {
  if (setup_error_.empty()) setup_error_ = std::move(why);
}

void HttpBackend::reserve(std::size_t requests) { keys_.resize(requests * o_.batch); }

// ---- sending --------------------------------------------------------------------------------

void HttpBackend::start() {
  for (auto& c : conns_) start_read(*c);
}

std::uint32_t HttpBackend::next_open_conn() {
  const auto count = static_cast<std::uint32_t>(conns_.size());
  std::uint32_t conn = rr_;
  for (std::uint32_t tried = 0; tried < count; ++tried) {
    conn = (rr_ + tried) % count;
    if (conns_[conn]->in_flight < o_.depth) break;
  }
  rr_ = (conn + 1) % count;
  return conn;
}

void HttpBackend::issue(std::uint32_t r, std::span<const std::uint64_t> keys, std::uint32_t lane) {
  Conn& c = *conns_[lane == kAnyLane ? next_open_conn() : lane];
  const std::uint32_t first = r * o_.batch;
  const auto count = static_cast<std::uint32_t>(keys.size());
  for (std::uint32_t i = 0; i < count; ++i) {
    keys_[first + i] = keys[i];
    const std::string_view key = formatter_.format(keys[i], key_buf_);
    c.out.insert(c.out.end(), head_.begin(), head_.end());
    c.out.insert(c.out.end(), key.begin(), key.end());
    c.out.insert(c.out.end(), kEndOfHead.begin(), kEndOfHead.end());
  }
  add_part(c, r, first, count);
}

void HttpBackend::add_part(Conn& c, std::uint32_t r, std::uint32_t first, std::uint32_t count) {
  const std::uint32_t id = c.next;
  c.next = next_id(c.next);
  while (c.ring[id & c.mask].active) grow_ring(c);
  if (c.in_flight == 0) c.oldest = id;
  Part& p = c.ring[id & c.mask];
  p.id = id;
  p.request = r;
  p.first = first;
  p.count = count;
  p.issued_unix_ns = audit_ ? unix_now_ns() : 0;
  p.active = true;
  ++c.in_flight;
  if (!c.dirty) {
    c.dirty = true;
    dirty_.push_back(&c);
  }
}

void HttpBackend::grow_ring(Conn& c) {
  std::vector<Part> bigger(c.ring.size() * 2);
  const auto mask = static_cast<std::uint32_t>(bigger.size() - 1);
  for (Part& p : c.ring) {
    if (p.active) bigger[p.id & mask] = p;
  }
  c.ring = std::move(bigger);
  c.mask = mask;
}

void HttpBackend::flush() {
  for (Conn* c : dirty_) {
    c->dirty = false;
    write(*c);
  }
  dirty_.clear();
}

void HttpBackend::write(Conn& c) {
  if (c.writing || c.connecting || c.out.empty() || closed_) return;
  c.sending.clear();
  c.sending.swap(c.out);
  c.unsent = c.next;  // every part issued so far is in `sending`
  c.writing = true;
  const std::uint32_t generation = c.generation;
  asio::async_write(c.socket, asio::buffer(c.sending),
                    in_slot(c.write_slot, [this, &c, generation](
                                              const boost::system::error_code& ec, std::size_t) {
                      c.writing = false;
                      if (closed_) return;
                      if (generation != c.generation) return write(c);  // the old socket's
                      if (ec) {
                        const std::uint64_t now_ns = monotonic_now_ns();
                        drop(c, "write failed: " + ec.message(), now_ns);
                        return host_.handler_done(now_ns);
                      }
                      write(c);
                    }));
}

// ---- receiving ------------------------------------------------------------------------------

void HttpBackend::start_read(Conn& c) {
  if (c.begin == c.end) {
    c.begin = c.end = 0;
  } else if (c.begin > 0) {
    std::memmove(c.in.data(), c.in.data() + c.begin, c.end - c.begin);
    c.end -= c.begin;
    c.begin = 0;
  }
  if (c.end == c.in.size()) c.in.resize(c.in.size() * 2);
  const std::uint32_t generation = c.generation;
  c.socket.async_read_some(
      asio::buffer(c.in.data() + c.end, c.in.size() - c.end),
      in_slot(c.read_slot,
              [this, &c, generation](const boost::system::error_code& ec, std::size_t n) {
                if (closed_ || generation != c.generation) return;
                const std::uint64_t now_ns = monotonic_now_ns();
                if (ec) {
                  drop(c,
                       ec == asio::error::eof ? std::string("connection closed by the server")
                                              : "read failed: " + ec.message(),
                       now_ns);
                  return host_.handler_done(now_ns);
                }
                c.end += n;
                if (read_responses(c, now_ns)) start_read(c);
                host_.handler_done(now_ns);
              }));
}

// Counts every complete response in c.in, oldest part first. False when the connection ended
// (dropped and being reopened).
bool HttpBackend::read_responses(Conn& c, std::uint64_t now_ns) {
  while (c.begin < c.end) {
    if (c.in_flight == 0 || c.oldest == c.unsent) {
      drop(c, "a response with no request in flight", now_ns);
      return false;
    }
    const HttpResponseReader::Step step =
        c.reader.feed(std::string_view(c.in.data() + c.begin, c.end - c.begin));
    c.begin += step.consumed;
    if (step.outcome == HttpResponseReader::Outcome::kNeedMore) break;
    if (step.outcome == HttpResponseReader::Outcome::kMalformed) {
      drop(c, "malformed response: " + std::string(c.reader.error()), now_ns);
      return false;
    }
    count_response(c, step.head, now_ns);
    if (closed_) return false;
    if (!step.head.keep_alive) {
      drop(c, "the server closed the connection (Connection: close) with requests pipelined",
           now_ns);
      return false;
    }
  }
  return true;
}

// One response to the oldest part's next GET.
void HttpBackend::count_response(Conn& c, const HttpResponseHead& head, std::uint64_t now_ns) {
  Tally& tally = host_.tally();
  TimelineEntry& t = tally.step(now_ns);
  Part& p = c.ring[c.oldest & c.mask];
  if (head.status >= 200 && head.status <= 299) {
    tally.allowed(t);
    if (audit_) {
      const std::uint64_t key = keys_[p.first + c.cursor];
      std::lock_guard lock(audit_->mu);
      audit_->audit.record(key, p.issued_unix_ns, unix_now_ns(), o_.cost);
    }
  } else if (head.status == 429 || (o_.deny_status != 0 && head.status == o_.deny_status)) {
    tally.denied(t);
  } else {
    std::array<char, 32> text{};
    const auto written = fmt::format_to_n(text.data(), text.size(), "HTTP status {}", head.status);
    tally.errors(1, t, std::string_view(text.data(), written.size));
  }
  if (++c.cursor == p.count) {
    c.cursor = 0;
    c.oldest = next_id(c.oldest);
    p.active = false;
    --c.in_flight;
    host_.request_done(p.request, c.lane, now_ns);  // may issue on c: `p` is stale after
  }
}

// The connection ended: the GETs sent on it and not answered count as errors, and it is opened
// again; parts not yet written stay queued for the new one.
void HttpBackend::drop(Conn& c, std::string_view why, std::uint64_t now_ns) {
  ++c.generation;
  boost::system::error_code ignored;
  c.socket.close(ignored);
  c.reader.reset();
  c.begin = c.end = 0;
  c.connecting = true;
  Tally& tally = host_.tally();
  // Each completion may issue the next request on c (closed loop), which only queues.
  while (c.in_flight > 0 && c.oldest != c.unsent && !closed_) {
    Part& p = c.ring[c.oldest & c.mask];
    tally.errors(p.count - c.cursor, tally.step(now_ns), why);
    c.cursor = 0;
    c.oldest = next_id(c.oldest);
    p.active = false;
    --c.in_flight;
    host_.request_done(p.request, c.lane, now_ns);
  }
  if (c.in_flight == 0) c.oldest = c.next;
  c.unsent = c.oldest;
  if (!closed_) reopen(c);
}

void HttpBackend::reopen(Conn& c) {
  ++reconnects_;
  const std::uint32_t generation = c.generation;
  c.socket.async_connect(endpoint_, [this, &c, generation](const boost::system::error_code& ec) {
    if (closed_ || generation != c.generation) return;
    if (ec) {
      return host_.failed(fmt::format(
          "reconnect to {} failed: {}",
          net::format_host_port(endpoint_.address().to_string(), endpoint_.port()), ec.message()));
    }
    boost::system::error_code ignored;
    c.socket.set_option(tcp::no_delay(true), ignored);
    c.connecting = false;
    start_read(c);
    write(c);
  });
}

void HttpBackend::close() {
  closed_ = true;
  for (auto& c : conns_) {
    boost::system::error_code ignored;
    c->socket.close(ignored);
  }
}

}  // namespace sluice::load
