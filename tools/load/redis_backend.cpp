#include "tools/load/redis_backend.h"

#include <fmt/core.h>

#include <algorithm>
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

// Part ids run 1, 2, ... and wrap to 1: 0 names no part.
std::uint32_t next_id(std::uint32_t id) { return id == UINT32_MAX ? 1 : id + 1; }

}  // namespace

RedisBackend::RedisBackend(BackendHost& host, const LoadOptions& options,
                           const KeyFormatter& formatter, SharedAudit* audit,
                           tcp::endpoint endpoint, unsigned connections)
    : host_(host),
      o_(options),
      formatter_(formatter),
      audit_(audit),
      endpoint_(std::move(endpoint)),
      incr_window_(options.op == Operation::kAcquire &&
                   options.redis_design == RedisDesign::kIncrWindow),
      key_buf_(formatter.max_length()) {
  for (unsigned i = 0; i < connections; ++i) {
    auto c = std::make_unique<Conn>(host_.io(), i);
    c->in.resize(kReadChunk);
    c->out.reserve(4096);
    c->sending.reserve(4096);
    conns_.push_back(std::move(c));
  }
  dirty_.reserve(conns_.size());
  writer_.reserve(256 * static_cast<std::size_t>(o_.batch));
}

// ---- setup ----------------------------------------------------------------------------------

Status RedisBackend::connect() {
  asio::io_context& io = host_.io();
  for (auto& owned : conns_) {
    Conn& c = *owned;
    const tcp::endpoint ep = endpoint_;
    c.socket.async_connect(ep, [this, &c, ep](const boost::system::error_code& ec) {
      if (ec) {
        return setup_failed(fmt::format("connect to {} failed: {}",
                                        net::format_host_port(ep.address().to_string(), ep.port()),
                                        ec.message()));
      }
      boost::system::error_code ignored;
      c.socket.set_option(tcp::no_delay(true), ignored);
      writer_.clear();
      if (o_.op == Operation::kAcquire && o_.redis_design == RedisDesign::kLuaTokenBucket) {
        append_script_load(writer_);
      } else {
        writer_.command("PING");
      }
      const std::string_view bytes = writer_.view();
      c.sending.assign(bytes.begin(), bytes.end());
      asio::async_write(c.socket, asio::buffer(c.sending),
                        [this, &c](const boost::system::error_code& e, std::size_t) {
                          if (e) return setup_failed("handshake write failed: " + e.message());
                          read_handshake(c);
                        });
    });
  }
  io.run_for(o_.connect_timeout);
  const bool all_ready =
      std::all_of(conns_.begin(), conns_.end(), [](auto& c) { return c->ready; });
  if (!all_ready || !setup_error_.empty()) {
    for (auto& c : conns_) {
      boost::system::error_code ignored;
      c->socket.close(ignored);
    }
    io.restart();
    io.run();  // aborted handlers
    return Status(ErrorCode::kConnectionFailed,
                  setup_error_.empty()
                      ? fmt::format("handshake not done within {} ms", o_.connect_timeout.count())
                      : setup_error_);
  }
  io.restart();
  return Status();
}

void RedisBackend::setup_failed(std::string why) {
  if (setup_error_.empty()) setup_error_ = std::move(why);
}

void RedisBackend::read_handshake(Conn& c) {
  c.socket.async_read_some(
      asio::buffer(c.in.data() + c.end, c.in.size() - c.end),
      [this, &c](const boost::system::error_code& ec, std::size_t n) {
        if (ec) return setup_failed("handshake read failed: " + ec.message());
        c.end += n;
        const std::string_view text(reinterpret_cast<const char*>(c.in.data()), c.end);
        const RespParseResult r = parser_.parse(text);
        if (r.status == RespStatus::kNeedMore) return read_handshake(c);
        if (r.status != RespStatus::kComplete) return setup_failed("malformed reply from Redis");
        if (r.value.type == RespType::kError) {
          return setup_failed("Redis: " + std::string(r.value.text));
        }
        if (o_.op == Operation::kAcquire && o_.redis_design == RedisDesign::kLuaTokenBucket) {
          const auto sha = read_script_sha(r.value);
          if (!sha) return setup_failed("SCRIPT LOAD gave no SHA1");
          sha_ = std::string(*sha);
        }
        c.begin = c.end = 0;
        c.ready = true;
      });
}

void RedisBackend::reserve(std::size_t requests) { items_.resize(requests * o_.batch); }

// ---- sending --------------------------------------------------------------------------------

void RedisBackend::start() {
  for (auto& c : conns_) start_read(*c);
}

std::uint32_t RedisBackend::next_open_conn() {
  const auto count = static_cast<std::uint32_t>(conns_.size());
  std::uint32_t conn = rr_;
  for (std::uint32_t tried = 0; tried < count; ++tried) {
    conn = (rr_ + tried) % count;
    if (conns_[conn]->in_flight < o_.depth) break;
  }
  rr_ = (conn + 1) % count;
  return conn;
}

void RedisBackend::issue(std::uint32_t r, std::span<const std::uint64_t> keys, std::uint32_t lane) {
  Conn& c = *conns_[lane == kAnyLane ? next_open_conn() : lane];
  const std::uint32_t first = r * o_.batch;
  const auto count = static_cast<std::uint32_t>(keys.size());
  writer_.clear();
  const std::uint64_t now_ms = incr_window_ ? SystemClock::instance().now_ns() / 1'000'000 : 0;
  for (std::uint32_t i = 0; i < count; ++i) {
    Item& item = items_[first + i];
    item.key = keys[i];
    const std::string_view key = formatter_.format(item.key, key_buf_);
    switch (o_.op) {
      case Operation::kAcquire:
        if (incr_window_) {
          item.window = append_incr_window(writer_, key, o_.rule, o_.cost, now_ms, o_.descriptors);
        } else {
          append_token_bucket(writer_, sha_, key, o_.rule, o_.cost);
        }
        break;
      case Operation::kPing:
        writer_.command("PING");
        break;
      case Operation::kIncr:
        writer_.command("INCR", key);
        break;
    }
  }
  add_part(c, r, first, count);
  const std::string_view bytes = writer_.view();
  c.out.insert(c.out.end(), bytes.begin(), bytes.end());
}

void RedisBackend::add_part(Conn& c, std::uint32_t r, std::uint32_t first, std::uint32_t count) {
  const std::uint32_t id = c.next;
  c.next = next_id(c.next);
  while (c.ring[id & c.mask].active) grow_ring(c);
  if (c.in_flight == 0) c.oldest = id;
  Part& p = c.ring[id & c.mask];
  p.id = id;
  p.request = r;
  p.first = first;
  p.count = count;
  p.active = true;
  ++c.in_flight;
  if (!c.dirty) {
    c.dirty = true;
    dirty_.push_back(&c);
  }
}

void RedisBackend::grow_ring(Conn& c) {
  std::vector<Part> bigger(c.ring.size() * 2);
  const auto mask = static_cast<std::uint32_t>(bigger.size() - 1);
  for (Part& p : c.ring) {
    if (p.active) bigger[p.id & mask] = p;
  }
  c.ring = std::move(bigger);
  c.mask = mask;
}

void RedisBackend::flush() {
  for (Conn* c : dirty_) {
    c->dirty = false;
    write(*c);
  }
  dirty_.clear();
}

void RedisBackend::write(Conn& c) {
  if (c.writing || c.out.empty() || closed_) return;
  c.sending.clear();
  c.sending.swap(c.out);
  c.writing = true;
  asio::async_write(
      c.socket, asio::buffer(c.sending),
      in_slot(c.write_slot, [this, &c](const boost::system::error_code& ec, std::size_t) {
        c.writing = false;
        if (closed_) return;
        if (ec) return host_.failed(fmt::format("write failed: {}", ec.message()));
        write(c);
      }));
}

// ---- receiving ------------------------------------------------------------------------------

void RedisBackend::start_read(Conn& c) {
  if (c.begin == c.end) {
    c.begin = c.end = 0;
  } else if (c.begin > 0) {
    std::memmove(c.in.data(), c.in.data() + c.begin, c.end - c.begin);
    c.end -= c.begin;
    c.begin = 0;
  }
  if (c.end == c.in.size()) c.in.resize(c.in.size() * 2);
  c.socket.async_read_some(
      asio::buffer(c.in.data() + c.end, c.in.size() - c.end),
      in_slot(c.read_slot, [this, &c](const boost::system::error_code& ec, std::size_t n) {
        if (closed_) return;
        if (ec) {
          return host_.failed(ec == asio::error::eof
                                  ? std::string("connection closed by the server")
                                  : "read failed: " + ec.message());
        }
        c.end += n;
        const std::uint64_t now_ns = monotonic_now_ns();
        const bool ok = read_replies(c, now_ns);
        if (!ok || closed_) return;
        start_read(c);
        host_.handler_done(now_ns);
      }));
}

// Counts every complete reply in c.in, oldest part first. False when the connection failed
// (the host was told).
bool RedisBackend::read_replies(Conn& c, std::uint64_t now_ns) {
  Tally& tally = host_.tally();
  RespValue values[3 * kMaxDescriptors];
  while (c.in_flight > 0) {
    Part& p = c.ring[c.oldest & c.mask];
    const Item& item = items_[p.first + c.cursor];
    const std::size_t need = incr_window_ ? item.window.replies : 1;
    std::size_t at = c.begin;
    std::size_t got = 0;
    RedisDecision d;
    for (; got < need; ++got) {
      const std::string_view rest(reinterpret_cast<const char*>(c.in.data()) + at, c.end - at);
      const RespParseResult r = parser_.parse(rest);
      if (r.status == RespStatus::kNeedMore) break;
      if (r.status != RespStatus::kComplete) {
        host_.failed("malformed reply from Redis");
        return false;
      }
      values[got] = r.value;
      at += r.consumed;
      if (need == 1) {  // decide now: an array's elements live in the parser until next parse
        switch (o_.op) {
          case Operation::kAcquire:
            d = read_token_bucket(parser_, r.value);
            break;
          case Operation::kPing:
            d.outcome = r.value.type == RespType::kSimpleString ? RedisDecision::Outcome::kAllowed
                                                                : RedisDecision::Outcome::kError;
            d.error = r.value.type == RespType::kError ? r.value.text : "unexpected reply";
            break;
          case Operation::kIncr:
            d.outcome = r.value.type == RespType::kInteger ? RedisDecision::Outcome::kAllowed
                                                           : RedisDecision::Outcome::kError;
            d.error = r.value.type == RespType::kError ? r.value.text : "unexpected reply";
            break;
        }
      }
    }
    if (got < need) break;
    if (incr_window_) d = read_incr_window(o_.rule, item.window, {values, need});
    c.begin = at;
    TimelineEntry& t = tally.step(now_ns);
    switch (d.outcome) {
      case RedisDecision::Outcome::kAllowed:
        tally.allowed(t);
        if (audit_) {
          const std::uint64_t when =
              incr_window_
                  ? (item.window.window * o_.rule.period_ms + item.window.elapsed_ms) * 1'000'000
                  : d.server_time_us * 1000;
          std::lock_guard lock(audit_->mu);
          audit_->audit.record_exact(item.key, when, o_.cost);
        }
        break;
      case RedisDecision::Outcome::kDenied:
        tally.denied(t);
        break;
      case RedisDecision::Outcome::kError:
        tally.errors(1, t, "Redis: " + std::string(d.error));
        break;
    }
    if (++c.cursor == p.count) {
      c.cursor = 0;
      c.oldest = next_id(c.oldest);
      complete_part(p, c, now_ns);
    }
  }
  if (c.in_flight == 0 && c.begin < c.end) {
    host_.failed("reply from Redis with nothing in flight");
    return false;
  }
  return true;
}

// The part's replies are all counted: so is its request. REQUIRES: p in c's ring. `p` is
// invalid afterwards.
void RedisBackend::complete_part(Part& p, Conn& c, std::uint64_t now_ns) {
  p.active = false;
  --c.in_flight;
  host_.request_done(p.request, c.lane, now_ns);
}

void RedisBackend::close() {
  closed_ = true;
  for (auto& c : conns_) {
    boost::system::error_code ignored;
    c->socket.close(ignored);
  }
}

}  // namespace sluice::load
