// The Worker alone, driving a fake Backend on its own io_context: pacing, lanes, the request
// quota, the drain and a backend's failure, with no socket and no server. The fake answers a
// request (every decision allowed) in a handler of its own, or never, and logs what it was
// asked in a FakeLog that outlives the worker.
#include "net/asio.h"  // before any other Asio header

#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "core/clock.h"
#include "tools/load/worker.h"

namespace sluice::load {
namespace {

enum class Answer { kAllowed, kNever, kFail };

struct FakeLog {
  struct Issued {
    std::uint32_t request;
    std::uint32_t lane_asked;
    std::uint32_t lane;
    std::size_t keys;
    bool control;
  };
  std::vector<Issued> issued;
  std::size_t reserved = 0;
  int flushes = 0;
  bool closed = false;
};

class FakeBackend final : public Backend {
 public:
  FakeBackend(BackendHost& host, unsigned lanes, Answer answer, FakeLog& log)
      : host_(host), lanes_(lanes), answer_(answer), log_(log) {}

  client::Status connect() override { return client::Status(); }
  unsigned connections() const override { return lanes_; }
  unsigned nodes() const override { return 0; }
  void reserve(std::size_t requests) override { log_.reserved = requests; }
  void start() override {}
  void issue(std::uint32_t r, std::span<const std::uint64_t> keys, std::uint32_t lane) override {
    REQUIRE(r < log_.reserved);
    const std::uint32_t asked = lane;
    if (lane == kAnyLane) lane = next_lane_++ % lanes_;
    const bool control = host_.is_control(r);
    log_.issued.push_back({r, asked, lane, keys.size(), control});
    if (answer_ == Answer::kNever) return;
    boost::asio::post(host_.io(), [this, r, lane, n = keys.size(), control] {
      if (log_.closed) return;
      const std::uint64_t now = monotonic_now_ns();
      if (answer_ == Answer::kFail) return host_.failed("the fake's connection failed");
      TimelineEntry& t = host_.tally().step(now);
      if (control) {
        host_.tally().control_answered();
      } else {
        for (std::size_t i = 0; i < n; ++i) host_.tally().allowed(t);
      }
      host_.request_done(r, lane, now);
      host_.handler_done(now);
    });
  }
  void flush() override { ++log_.flushes; }
  void close() override { log_.closed = true; }

 private:
  BackendHost& host_;
  const unsigned lanes_;
  const Answer answer_;
  FakeLog& log_;
  std::uint32_t next_lane_ = 0;
};

LoadOptions fake_options() {
  LoadOptions o;
  o.depth = 2;
  o.batch = 3;
  o.keys = 1000;
  o.duration = std::chrono::seconds(10);
  o.drain_timeout = std::chrono::milliseconds(30);
  return o;
}

// Runs one worker over a fake backend to the end; returns its report.
LoadReport run_worker(RunContext& ctx, std::uint64_t quota, double rate, unsigned lanes,
                      Answer answer, FakeLog& log) {
  Worker worker(ctx, 0, quota, rate, [&](BackendHost& host) {
    return std::make_unique<FakeBackend>(host, lanes, answer, log);
  });
  REQUIRE(worker.connect().ok());
  ctx.start_ns = monotonic_now_ns();
  if (ctx.options.duration.count() > 0) {
    ctx.deadline_ns =
        ctx.start_ns + static_cast<std::uint64_t>(ctx.options.duration.count()) * 1'000'000;
  }
  worker.run();
  CHECK(log.closed);
  LoadReport report;
  worker.add_to(report);
  return report;
}

TEST_CASE("a closed loop keeps lanes x depth in flight and replaces each request on its lane",
          "[worker]") {
  const LoadOptions o = fake_options();
  RunContext ctx(o);
  FakeLog log;
  const LoadReport r = run_worker(ctx, 100, 0, 3, Answer::kAllowed, log);
  CHECK(r.sent == 100);
  CHECK(r.allowed == 100);
  CHECK(r.errors == 0);
  CHECK(r.first_error.empty());
  CHECK(r.in_flight_max == 6);
  CHECK(r.intended == r.sent);
  CHECK(r.latency.count() == 34);  // 33 requests of 3 and the quota's last one of 1
  CHECK(log.reserved == 6);
  REQUIRE(log.issued.size() == 34);
  CHECK(log.issued.back().keys == 1);
  for (std::size_t i = 0; i < log.issued.size(); ++i) {
    INFO("request " << i);
    if (i < 6) {
      CHECK(log.issued[i].lane_asked == kAnyLane);
    } else {
      CHECK(log.issued[i].lane_asked == log.issued[i].lane);
    }
  }
  CHECK(log.flushes > 0);
}

TEST_CASE(
    "with --control-every every Nth request is a control that is counted and timed apart from "
    "the decisions",
    "[worker]") {
  LoadOptions o = fake_options();
  o.control_every = 3;
  RunContext ctx(o);
  FakeLog log;
  const LoadReport r = run_worker(ctx, 60, 0, 2, Answer::kAllowed, log);
  // 20 decision requests of 3 reach the quota; requests 3, 6, ..., 27 went between them, and the
  // 30th would have been the next decision request: the quota stops the run there.
  CHECK(r.sent == 60);
  CHECK(r.allowed == 60);
  CHECK(r.errors == 0);
  CHECK(r.latency.count() == 20);
  CHECK(r.control.sent == 9);
  CHECK(r.control.answered == 9);
  CHECK(r.control.errors == 0);
  CHECK(r.control.latency.count() == 9);
  REQUIRE(log.issued.size() == 29);
  for (std::size_t i = 0; i < log.issued.size(); ++i) {
    INFO("request " << i + 1);
    CHECK(log.issued[i].control == ((i + 1) % 3 == 0));
    CHECK(log.issued[i].keys == 3);  // a control carries the keys it routes by
  }
}

TEST_CASE("controls never answered count as control errors once the drain ends", "[worker]") {
  LoadOptions o = fake_options();
  o.control_every = 2;
  o.duration = std::chrono::milliseconds(50);
  RunContext ctx(o);
  FakeLog log;
  const LoadReport r = run_worker(ctx, 0, 0, 2, Answer::kNever, log);
  // 2 lanes x depth 2: two decision requests and two controls, then nothing frees a slot.
  CHECK(r.sent == 6);
  CHECK(r.errors == 6);
  CHECK(r.control.sent == 2);
  CHECK(r.control.answered == 0);
  CHECK(r.control.errors == 2);
  CHECK(r.first_error == "no reply within the drain timeout");
}

TEST_CASE("requests never answered count as errors once the drain ends", "[worker]") {
  LoadOptions o = fake_options();
  o.duration = std::chrono::milliseconds(50);
  RunContext ctx(o);
  FakeLog log;
  const auto started = std::chrono::steady_clock::now();
  const LoadReport r = run_worker(ctx, 0, 0, 2, Answer::kNever, log);
  CHECK(std::chrono::steady_clock::now() - started >= std::chrono::milliseconds(80));
  CHECK(r.sent == 12);  // 2 lanes x depth 2, 3 decisions each, then nothing frees a slot
  CHECK(r.errors == 12);
  CHECK(r.allowed + r.denied == 0);
  CHECK(r.first_error == "no reply within the drain timeout");
  CHECK(r.latency.count() == 0);
  CHECK(error_window(r).has_value());
}

TEST_CASE("an open loop above what comes back holds lanes x depth and reports the rest behind",
          "[worker]") {
  LoadOptions o = fake_options();
  o.duration = std::chrono::milliseconds(50);
  RunContext ctx(o);
  FakeLog log;
  const LoadReport r = run_worker(ctx, 0, 1e6, 2, Answer::kNever, log);
  CHECK(r.in_flight_max == 4);
  CHECK(r.sent == 12);
  CHECK(r.behind > 0);
  CHECK(r.intended == r.sent + r.behind);
  CHECK(r.backlog_max > 0);
  CHECK(r.errors == 12);
}

TEST_CASE("a failed backend ends the run at once, what is in flight counted as errors",
          "[worker]") {
  const LoadOptions o = fake_options();
  RunContext ctx(o);
  FakeLog log;
  const auto started = std::chrono::steady_clock::now();
  const LoadReport r = run_worker(ctx, 0, 0, 1, Answer::kFail, log);
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(5));
  CHECK(r.sent == 6);
  CHECK(r.errors == 6);
  CHECK(r.first_error == "the fake's connection failed");
  CHECK(log.issued.size() == 2);
}

}  // namespace
}  // namespace sluice::load
