#include "tools/load/worker.h"

#include <algorithm>
#include <cmath>
#include <span>
#include <utility>

#include "core/clock.h"
#include "tools/load/random.h"

namespace sluice::load {

namespace asio = boost::asio;
using net::in_slot;

namespace {

constexpr auto kTick = std::chrono::milliseconds(10);
// Open loop: requests one handler may issue before it yields to the event loop (replies, the
// deadline tick), however far behind the schedule is.
constexpr unsigned kIssuePerHandler = 64;

asio::steady_timer::time_point at_ns(std::uint64_t ns) {
  return asio::steady_timer::time_point(std::chrono::nanoseconds(ns));
}

}  // namespace

Worker::Worker(const RunContext& ctx, unsigned index, std::uint64_t quota, double rate,
               const MakeBackend& make)
    : ctx_(ctx),
      o_(ctx.options),
      quota_(quota),
      keys_(o_.dist, ctx.only_keys.empty() ? o_.keys : ctx.only_keys.size(),
            derive_seed(o_.seed, index)),
      drawn_(o_.batch),
      tick_timer_(io()),
      pace_timer_(io()),
      backend_(make(*this)) {
  open_ = rate > 0;
  if (open_) interval_ns_ = static_cast<double>(o_.batch) * 1e9 / rate;
  // Both loops keep at most depth requests per connection in flight; an open loop's due
  // requests beyond that wait (the backlog) instead of piling up in memory.
  max_in_flight_ = static_cast<std::size_t>(backend_->connections()) * o_.depth;
  grow_pool(max_in_flight_);
  const std::uint64_t steps =
      static_cast<std::uint64_t>((o_.duration + o_.drain_timeout).count()) / 100 + 16;
  tally().reserve_steps(std::min<std::uint64_t>(steps, 1u << 20));
}

// The next key index; with --only-node, the generator's draw is a position among that node's
// keys (run_load() made sure there is one). A lookup, so that choosing keys costs the same with
// and without --only-node: the replication benchmark compares runs of both kinds.
std::uint64_t Worker::next_key() {
  if (ctx_.only_keys.empty()) return keys_.next();
  // The list is megabytes: the next position is drawn one call early and its entry
  // prefetched, so the lookup does not wait for memory (the sequence is the same).
  if (!drawn_ahead_) {
    next_position_ = keys_.next();
    drawn_ahead_ = true;
  }
  const std::uint64_t key = ctx_.only_keys[next_position_];
  next_position_ = keys_.next();
  __builtin_prefetch(&ctx_.only_keys[next_position_]);
  return key;
}

void Worker::run() {
  asio::post(io(), [this] { start(); });
  if (!o_.busy_poll) {
    io().run();
    return;
  }
  // Stops by itself once the run leaves no work (the tick timer is armed until the end).
  while (!io().stopped()) {
    io().poll();
    backend_->poll();
    if (pace_by_clock_ && monotonic_now_ns() >= next_intended_) {
      pace_by_clock_ = false;
      pace();
    }
  }
}

void Worker::add_to(LoadReport& report) const {
  const std::uint64_t sent = tally().sent();
  tally().add_to(report);
  report.intended += open_ ? intended_ : sent;
  report.behind += open_ && intended_ > sent ? intended_ - sent : 0;
  report.backlog_max += backlog_max_;
  report.in_flight_max += in_flight_max_;
  report.latency.merge(latency_);
  report.control.latency.merge(control_latency_);
}

// ---- the run --------------------------------------------------------------------------------

void Worker::start() {
  start_ns_ = ctx_.start_ns;
  end_ns_ = start_ns_;
  tally().start(start_ns_);
  backend_->start();
  arm_tick();
  if (open_) {
    next_intended_ = start_ns_;
    pace();
    return;
  }
  const std::size_t initial = static_cast<std::size_t>(backend_->connections()) * o_.depth;
  for (std::size_t i = 0; i < initial && !stopping_; ++i) issue(kAnyLane, monotonic_now_ns());
  after_handler();
}

void Worker::arm_tick() {
  tick_timer_.expires_after(kTick);
  tick_timer_.async_wait(in_slot(tick_slot_, [this](const boost::system::error_code& ec) {
    if (ec || finished_) return;
    const std::uint64_t now = monotonic_now_ns();
    if (open_ && !stopping_) note_backlog(now);
    if (!stopping_ && ctx_.deadline_ns != 0 && now >= ctx_.deadline_ns) begin_stop(now);
    if (stopping_ && !finished_ && now >= drain_deadline_ns_) finish(now);
    after_handler();
    if (!finished_) arm_tick();
  }));
}

// Open loop: issues the requests whose intended time has come, at most kIssuePerHandler in one
// handler and at most max_in_flight_ in flight. Whatever is due beyond that is the backlog: it
// goes out as soon as replies make room, still timed from its intended time.
void Worker::pace() {
  const std::uint64_t now = monotonic_now_ns();
  unsigned issued = 0;
  while (!stopping_ && next_intended_ <= now && issued < kIssuePerHandler) {
    if (in_flight_requests_ >= max_in_flight_) {
      waiting_for_room_ = true;  // request_done() resumes
      break;
    }
    issue(kAnyLane, next_intended_);
    ++issued;
    ++paced_;
    next_intended_ = slot_time(paced_);
  }
  if (!stopping_) note_backlog(now);
  after_handler();
  if (stopping_ || finished_ || waiting_for_room_) return;
  arm_pace();  // at once when still behind: a timer already due lets replies in first
}

void Worker::arm_pace() {
  if (o_.busy_poll) {
    pace_by_clock_ = true;
    return;
  }
  pace_timer_.expires_at(at_ns(next_intended_));
  pace_timer_.async_wait(in_slot(pace_slot_, [this](const boost::system::error_code& ec) {
    if (ec || finished_) return;
    pace();
  }));
}

// When the open loop's request `slot` (0, 1, ...) is meant to go out.
std::uint64_t Worker::slot_time(std::uint64_t slot) const {
  return start_ns_ + static_cast<std::uint64_t>(static_cast<double>(slot) * interval_ns_);
}

// How many requests the schedule sends before `t`: slots 0 .. n-1.
std::uint64_t Worker::slots_before(std::uint64_t t) const {
  if (t <= start_ns_) return 0;
  auto n = static_cast<std::uint64_t>(std::ceil(static_cast<double>(t - start_ns_) / interval_ns_));
  while (n > 0 && slot_time(n - 1) >= t) --n;  // the double division may round up
  while (slot_time(n) < t) ++n;
  return n;
}

// The schedule's requests due by `now` (and before the deadline) but not yet sent.
void Worker::note_backlog(std::uint64_t now) {
  std::uint64_t due = slots_before(now + 1);
  if (ctx_.deadline_ns != 0) due = std::min(due, slots_before(ctx_.deadline_ns));
  if (due > paced_) backlog_max_ = std::max(backlog_max_, (due - paced_) * o_.batch);
}

// Issues one request of up to --batch decisions on `lane` (kAnyLane: the backend's choice).
void Worker::issue(std::uint32_t lane, std::uint64_t intended_ns) {
  if (stopping_) return;
  if (ctx_.deadline_ns != 0 && intended_ns >= ctx_.deadline_ns) return begin_stop(intended_ns);
  std::uint32_t n = o_.batch;
  if (quota_ != 0) {
    if (tally().sent() >= quota_) return begin_stop(intended_ns);
    n = static_cast<std::uint32_t>(std::min<std::uint64_t>(n, quota_ - tally().sent()));
  }
  const std::uint32_t r = alloc_request();
  requests_[r].intended_ns = intended_ns;
  requests_[r].control = o_.control_every != 0 && ++issued_ % o_.control_every == 0;
  ++in_flight_requests_;
  in_flight_max_ = std::max(in_flight_max_, in_flight_requests_);
  if (requests_[r].control) {
    tally().control_sent();
  } else {
    tally().sent(n, monotonic_now_ns());
  }
  for (std::uint32_t j = 0; j < n; ++j) drawn_[j] = next_key();
  backend_->issue(r, std::span<const std::uint64_t>(drawn_.data(), n), lane);
}

void Worker::request_done(std::uint32_t r, std::uint32_t lane, std::uint64_t now_ns) {
  const Request& req = requests_[r];
  (req.control ? control_latency_ : latency_)
      .record(now_ns > req.intended_ns ? (now_ns - req.intended_ns) / 1000 : 0);
  end_ns_ = now_ns;
  free_request(r);
  --in_flight_requests_;
  if (!open_) {
    issue(lane, now_ns);
  } else if (waiting_for_room_ && !stopping_) {
    waiting_for_room_ = false;
    arm_pace();  // not pace() itself: this may run inside the client's callback
  }
}

void Worker::handler_done(std::uint64_t now_ns) {
  after_handler();
  if (stopping_ && in_flight_requests_ == 0) finish(now_ns);
}

void Worker::after_handler() {
  backend_->flush();
  published_.sent.store(tally().sent(), std::memory_order_relaxed);
  published_.allowed.store(tally().allowed(), std::memory_order_relaxed);
  published_.denied.store(tally().denied(), std::memory_order_relaxed);
  published_.errors.store(tally().errors(), std::memory_order_relaxed);
}

// ---- the request pool -----------------------------------------------------------------------

void Worker::grow_pool(std::size_t add) {
  const std::size_t old = requests_.size();
  requests_.resize(old + add);
  backend_->reserve(requests_.size());
  for (std::size_t i = old + add; i-- > old;) {
    requests_[i].next_free = free_head_;
    free_head_ = static_cast<std::uint32_t>(i);
  }
}

std::uint32_t Worker::alloc_request() {
  if (free_head_ == kNoRequest) grow_pool(std::max<std::size_t>(requests_.size(), 16));
  const std::uint32_t r = free_head_;
  free_head_ = requests_[r].next_free;
  return r;
}

void Worker::free_request(std::uint32_t r) {
  requests_[r].next_free = free_head_;
  free_head_ = r;
}

// ---- ending ---------------------------------------------------------------------------------

void Worker::begin_stop(std::uint64_t now) {
  if (stopping_) return;
  note_stop(now);
  stopping_ = true;
  drain_deadline_ns_ = std::max(now, monotonic_now_ns()) +
                       static_cast<std::uint64_t>(o_.drain_timeout.count()) * 1'000'000;
  pace_timer_.cancel();
  pace_by_clock_ = false;
  if (in_flight_requests_ == 0) finish(now);
}

// Open loop: the decisions the schedule meant to send before the run stopped at `now` (at the
// deadline, at the request bound, or when the backend failed).
void Worker::note_stop(std::uint64_t now) {
  if (!open_) return;
  const std::uint64_t until = ctx_.deadline_ns != 0 ? std::min(now, ctx_.deadline_ns) : now;
  note_backlog(until);
  intended_ = slots_before(until) * o_.batch;
  if (quota_ != 0) intended_ = std::min(intended_, quota_);
  intended_ = std::max(intended_, tally().sent());
}

// A failed backend ends this worker's run: what is in flight counts as errors.
void Worker::failed(std::string why) {
  tally().keep_first_error(std::move(why));
  const std::uint64_t now = monotonic_now_ns();
  if (!stopping_) note_stop(now);
  stopping_ = true;
  finish(now);
}

void Worker::finish(std::uint64_t now) {
  if (finished_) return;
  finished_ = true;
  if (const std::uint64_t lost = tally().unanswered(); lost > 0) {
    tally().errors(lost, tally().step(now), "no reply within the drain timeout");
    end_ns_ = now;
  }
  if (const std::uint64_t lost = tally().control_unanswered(); lost > 0) {
    tally().control_failed(lost, "control: no reply within the drain timeout");
    end_ns_ = now;
  }
  backend_->close();  // what is still in flight calls back, and is ignored
  tick_timer_.cancel();
  pace_timer_.cancel();
  after_handler();
}

}  // namespace sluice::load
