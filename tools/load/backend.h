// The seam between a sluice-load worker and what it loads. A Worker (worker.h) paces requests,
// keeps their books (ids, intended times, latency), the timeline and the stop; a Backend sends
// a request of N decisions and counts what comes back. Two implement it: SluiceBackend
// (sluice_backend.h, through the client library) and RedisBackend (redis_backend.h, its own
// sockets and RESP); tests drive a Worker with a fake one (tests/load/worker_test.cpp).
//
// Both directions cost one virtual call per request or per handler, never one per decision: a
// backend counts each decision in the worker's Tally (inline calls), then tells the host once
// that the whole request is done.
#pragma once

#include "net/asio.h"  // before any other Asio header

#include <cstdint>
#include <mutex>
#include <span>
#include <string>

#include "client/status.h"
#include "core/rule.h"
#include "tools/load/accuracy_audit.h"
#include "tools/load/tally.h"

namespace sluice::load {

// issue()'s lane when the caller has no preference; request_done() never reports it for a
// backend that has lanes.
inline constexpr std::uint32_t kAnyLane = UINT32_MAX;

// The run's accuracy audit, shared by every worker's backend: record under `mu`.
struct SharedAudit {
  SharedAudit(const Rule& rule, std::uint64_t audited_keys) : audit(rule, audited_keys) {}
  std::mutex mu;
  AccuracyAudit audit;
};

// The worker's side of the seam, as its backend sees it: the event loop the backend runs on,
// the tally it counts decisions in, and three calls back. The calls come from the backend's
// handlers, on the worker's thread.
class BackendHost {
 public:
  boost::asio::io_context& io() { return io_; }
  Tally& tally() { return tally_; }
  const Tally& tally() const { return tally_; }

  // Every decision of request `r` is counted in the tally, the last at `now_ns` (monotonic).
  // `lane` is where it went: a closed loop sends the request that replaces it there.
  virtual void request_done(std::uint32_t r, std::uint32_t lane, std::uint64_t now_ns) = 0;
  // Ends a backend handler that counted replies: the host writes what was issued meanwhile
  // (Backend::flush), publishes its counts, and ends the run once stopping and idle.
  virtual void handler_done(std::uint64_t now_ns) = 0;
  // The backend cannot go on (a Redis connection failed): the worker's run ends, and what is
  // in flight counts as errors. `why` is the first error unless one was kept.
  virtual void failed(std::string why) = 0;
  // --control-every: request `r` (in flight) is a control, a PING of its keys that decides
  // nothing; its replies are counted with Tally::control_answered() or control_failed().
  virtual bool is_control(std::uint32_t r) const = 0;

 protected:
  BackendHost() = default;
  ~BackendHost() = default;

 private:
  // Declared first: destroyed after whatever the host owns that runs on it (its backend).
  boost::asio::io_context io_{1};
  Tally tally_;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // Opens the connections and completes their handshakes within the connect timeout, running
  // the host's io_context for it; nothing else runs on it yet. Fails with the reason.
  virtual client::Status connect() = 0;
  // TCP connections that carry load: the plan before connect(), what was opened after.
  virtual unsigned connections() const = 0;
  // Sluice: the nodes the client routes to (once connected); Redis: 0.
  virtual unsigned nodes() const = 0;

  // Request ids are [0, requests) from now on: sizes what the backend keeps per request. Called
  // before the run and whenever the worker's pool grows, which may be with requests in flight:
  // keep per-request state by index, never by address.
  virtual void reserve(std::size_t requests) = 0;
  // The run begins (the host's timers are not armed yet).
  virtual void start() = 0;
  // Sends request `r`: one decision per key index in `keys` (a view valid during the call
  // only; 1..--batch keys), on `lane` (kAnyLane: the backend's choice). May queue the bytes
  // until flush(). REQUIRES: r < the last reserve(), r not in flight.
  virtual void issue(std::uint32_t r, std::span<const std::uint64_t> keys, std::uint32_t lane) = 0;
  // Called at the end of every host handler: writes what issue() queued.
  virtual void flush() = 0;
  // With --busy-poll, called on every turn of the worker's polling loop, after the host's
  // io_context: a backend whose replies do not come through that io_context takes them here.
  virtual void poll() {}
  // The run is over: closes the connections. Replies still in flight are dropped, uncounted
  // (the host counts them as errors), and no call comes back to the host any more.
  virtual void close() = 0;
};

}  // namespace sluice::load
