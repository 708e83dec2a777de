// One thread's share of a sluice-load run. A Worker paces requests and keeps their books; its
// Backend (backend.h) puts them on the wire and counts the replies.
//
// - Pacing. Closed loop: connections x depth requests in flight, each replaced as it completes
//   (on the lane it went on). Open loop: request n is meant to go out at start + n x interval;
//   at most connections x depth are in flight, and what is due beyond that waits (the backlog),
//   timed from its intended send time all the same (no coordinated omission).
// - Books. A pool of request ids reused by index (grown only when a cluster's connections
//   outnumber the plan), each with its intended send time; latency per request from that time;
//   the timeline and counts in the Tally; the keys, drawn here and handed to the backend.
// - Stop. At the deadline or the request quota it stops issuing, waits for replies at most the
//   drain timeout, then counts whatever is unanswered as errors and closes the backend.
//
// Once the pool has its working size nothing here allocates per request.
#pragma once

#include "net/asio.h"  // before any other Asio header

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "client/status.h"
#include "net/handler_slot.h"
#include "tools/load/backend.h"
#include "tools/load/histogram.h"
#include "tools/load/key_generator.h"
#include "tools/load/load_driver.h"

namespace sluice::load {

// What a run's workers share. Nobody changes it once the threads start (run_load() sets
// start_ns and deadline_ns before it starts them).
struct RunContext {
  explicit RunContext(const LoadOptions& o) : options(o) {}
  const LoadOptions& options;
  std::uint64_t start_ns = 0;     // monotonic
  std::uint64_t deadline_ns = 0;  // 0 = none
  // --only-node: the indices of the keys whose primary is that node, ascending; the generator
  // draws positions in this list. Empty: every key.
  std::vector<std::uint32_t> only_keys;
};

// A worker's totals so far, for the progress line: written after each of its handlers, read by
// the thread that called run_load(). Relaxed: each figure is read alone.
struct Published {
  std::atomic<std::uint64_t> sent{0};
  std::atomic<std::uint64_t> allowed{0};
  std::atomic<std::uint64_t> denied{0};
  std::atomic<std::uint64_t> errors{0};
};

// Builds the backend a worker drives, on that worker (its io_context and tally).
using MakeBackend = std::function<std::unique_ptr<Backend>(BackendHost&)>;

class Worker final : public BackendHost {
 public:
  // Worker `index` (its key sequence derives from --seed and it), `quota` decisions at most (0 =
  // no bound), `rate` decisions per second (0 = closed loop).
  Worker(const RunContext& ctx, unsigned index, std::uint64_t quota, double rate,
         const MakeBackend& make);

  // The backend's connections, before the run (Backend::connect).
  client::Status connect() { return backend_->connect(); }
  unsigned connections() const { return backend_->connections(); }
  unsigned nodes() const { return backend_->nodes(); }

  // The thread body: runs until the bound is reached and replies are in (or the drain ends).
  void run();

  Published& published() { return published_; }
  // Adds this worker's counts, latency and timeline into `report`. After run() returned.
  void add_to(LoadReport& report) const;
  // When the last reply came (or the drain ended), monotonic ns.
  std::uint64_t end_ns() const { return end_ns_; }

  void request_done(std::uint32_t r, std::uint32_t lane, std::uint64_t now_ns) override;
  void handler_done(std::uint64_t now_ns) override;
  void failed(std::string why) override;
  bool is_control(std::uint32_t r) const override { return requests_[r].control; }

 private:
  struct Request {
    std::uint64_t intended_ns = 0;  // latency is measured from here
    std::uint32_t next_free = 0;    // the free list, while not in flight
    bool control = false;           // --control-every: a PING in place of decisions
  };
  static constexpr std::uint32_t kNoRequest = UINT32_MAX;  // the free list's end

  std::uint64_t next_key();
  void start();
  void arm_tick();
  void pace();
  void arm_pace();
  std::uint64_t slot_time(std::uint64_t slot) const;
  std::uint64_t slots_before(std::uint64_t t) const;
  void note_backlog(std::uint64_t now);
  void issue(std::uint32_t lane, std::uint64_t intended_ns);
  void after_handler();
  void grow_pool(std::size_t add);
  std::uint32_t alloc_request();
  void free_request(std::uint32_t r);
  void begin_stop(std::uint64_t now);
  void note_stop(std::uint64_t now);
  void finish(std::uint64_t now);

  const RunContext& ctx_;
  const LoadOptions& o_;
  const std::uint64_t quota_;
  KeyGenerator keys_;
  std::uint64_t next_position_ = 0;  // --only-node: the next draw, taken one call early
  bool drawn_ahead_ = false;
  std::vector<std::uint64_t> drawn_;  // the keys of the request being issued
  std::vector<Request> requests_;
  std::uint32_t free_head_ = kNoRequest;

  boost::asio::steady_timer tick_timer_;
  boost::asio::steady_timer pace_timer_;  // without --busy-poll
  // --busy-poll: the open loop's next pace() is due at next_intended_, and the polling loop
  // calls it from the clock it reads anyway (a timerfd fires ~23 us late here even when polled:
  // bench/timer_probe.cpp; each request would start that late).
  bool pace_by_clock_ = false;
  net::HandlerSlot tick_slot_;
  net::HandlerSlot pace_slot_;
  bool open_ = false;
  double interval_ns_ = 0;
  std::uint64_t paced_ = 0;  // schedule slots taken (issued, or the one that hit a bound)
  std::uint64_t next_intended_ = 0;
  std::size_t max_in_flight_ = 0;  // requests: connections x depth
  bool waiting_for_room_ = false;  // open loop: due requests wait for a reply
  std::uint64_t intended_ = 0;     // open loop, decisions: set when the run stops
  std::uint64_t backlog_max_ = 0;  // open loop, decisions due but not yet sent, at most
  std::size_t in_flight_max_ = 0;  // requests

  std::uint64_t start_ns_ = 0;
  std::uint64_t end_ns_ = 0;
  std::uint64_t drain_deadline_ns_ = 0;
  bool stopping_ = false;
  bool finished_ = false;
  std::size_t in_flight_requests_ = 0;

  std::uint64_t issued_ = 0;  // requests, controls included: every control_every-th is one
  LatencyHistogram latency_;
  LatencyHistogram control_latency_;
  Published published_;
  std::unique_ptr<Backend> backend_;  // runs on io(), and is destroyed before it
};

}  // namespace sluice::load
