#include "tools/load/load_driver.h"

#include "net/asio.h"  // before any other Asio header

#include <fmt/core.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>

#include "client/client.h"
#include "cluster/ring.h"
#include "core/clock.h"
#include "core/key_hash.h"
#include "net/handler_slot.h"
#include "net/host_port.h"
#include "protocol/frame.h"
#include "protocol/messages.h"
#include "tools/load/random.h"
#include "tools/load/resp.h"

namespace sluice::load {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using client::ErrorCode;
using client::Result;
using client::Status;
using net::HandlerSlot;
using net::in_slot;

std::optional<BackendKind> parse_backend(std::string_view name) {
  if (name == "sluice") return BackendKind::kSluice;
  if (name == "redis") return BackendKind::kRedis;
  return std::nullopt;
}

std::string_view backend_name(BackendKind backend) {
  return backend == BackendKind::kSluice ? "sluice" : "redis";
}

std::optional<Operation> parse_operation(std::string_view name) {
  if (name == "acquire") return Operation::kAcquire;
  if (name == "ping") return Operation::kPing;
  if (name == "incr") return Operation::kIncr;
  return std::nullopt;
}

std::string_view operation_name(Operation op) {
  switch (op) {
    case Operation::kAcquire:
      return "acquire";
    case Operation::kPing:
      return "ping";
    case Operation::kIncr:
      return "incr";
  }
  return "unknown";
}

std::string validate(const LoadOptions& o) {
  if (o.servers.empty()) return "no servers given";
  if (o.connections < 1 || o.connections > kMaxConnections) {
    return fmt::format("--connections {}: must be 1..{}", o.connections, kMaxConnections);
  }
  if (o.depth < 1 || o.depth > 100'000) {
    return fmt::format("--depth {}: must be 1..100000", o.depth);
  }
  if (o.batch < 1 || o.batch > 65'535) return fmt::format("--batch {}: must be 1..65535", o.batch);
  if (o.gateways < 1 || o.gateways > 65'535) {
    return fmt::format("--gateways {}: must be 1..65535", o.gateways);
  }
  if (o.backend != BackendKind::kSluice &&
      (o.failure_policy != client::FailurePolicy::kReport || o.gateways != 1 ||
       o.blocked_keys != 0 || o.lease_duration.count() != 0)) {
    return "--failure-policy, --gateways, --blocked-keys and --lease-duration are for --backend "
           "sluice";
  }
  if (o.threads < 1 || o.threads > 256) {
    return fmt::format("--threads {}: must be 1..256", o.threads);
  }
  if (o.threads > o.connections) {
    return fmt::format("--threads {}: must be 1..{} (at most --connections)", o.threads,
                       o.connections);
  }
  if (!(o.rate >= 0) || o.rate > 1e9) {
    return fmt::format("--rate {}: must be 0..1000000000 (0 = closed loop)", o.rate);
  }
  if (o.keys < 1) return "--keys: expected at least 1";
  if (o.duration.count() <= 0 && o.requests == 0) {
    return "give --duration or --requests (the run must stop by itself)";
  }
  if (o.duration.count() < 0) return "--duration must not be negative";
  if (o.op == Operation::kIncr && o.backend != BackendKind::kRedis) {
    return "--op incr is for --backend redis";
  }
  if (!o.auth_token.empty() && o.backend != BackendKind::kSluice) {
    return std::string(kAuthTokenNeedsSluice);
  }
  if (!o.only_node.empty() && o.backend != BackendKind::kSluice) {
    return "--only-node is for --backend sluice (a node of a Sluice cluster)";
  }
  if (!o.only_node.empty() && o.keys > kMaxOnlyNodeKeys) {
    return fmt::format("--only-node takes at most {} keys (its key list is built up front)",
                       kMaxOnlyNodeKeys);
  }
  if (o.op == Operation::kAcquire) {
    if (const RuleError e = sluice::validate(o.rule, o.cost); e != RuleError::kOk) {
      return "bad rule: " + std::string(describe(e));
    }
    if (o.backend == BackendKind::kRedis) {
      const Algorithm a = o.rule.algorithm;
      if (o.redis_design == RedisDesign::kLuaTokenBucket && a != Algorithm::kTokenBucket) {
        return "--redis-design lua_token_bucket needs --algorithm token_bucket";
      }
      if (o.redis_design == RedisDesign::kIncrWindow && a != Algorithm::kFixedWindow &&
          a != Algorithm::kSlidingWindow) {
        return "--redis-design incr_window needs --algorithm fixed_window or sliding_window";
      }
    }
  }
  return "";
}

namespace {

constexpr std::size_t kReadChunk = 64 * 1024;
constexpr std::uint32_t kNone = UINT32_MAX;
constexpr std::uint64_t kStepNs = 100'000'000;  // timeline step
constexpr auto kTick = std::chrono::milliseconds(10);
// Open loop: requests one handler may issue before it yields to the event loop (replies, the
// deadline tick), however far behind the schedule is.
constexpr unsigned kIssuePerHandler = 64;

asio::steady_timer::time_point at_ns(std::uint64_t ns) {
  return asio::steady_timer::time_point(std::chrono::nanoseconds(ns));
}

// Request ids skip 0 (HELLO's id on a Sluice connection).
std::uint32_t next_id(std::uint32_t id) { return id == UINT32_MAX ? 1 : id + 1; }

// What every worker reads and nobody changes during the run (except the audit, under its lock).
struct RunContext {
  explicit RunContext(const LoadOptions& o) : options(o), formatter(o.key_prefix, o.keys) {}
  const LoadOptions& options;
  KeyFormatter formatter;
  tcp::endpoint endpoint;  // Redis
  std::string sha;         // lua_token_bucket
  std::uint64_t start_ns = 0;
  std::uint64_t deadline_ns = 0;  // 0 = none
  std::mutex audit_mu;
  std::optional<AccuracyAudit> audit;
  // --only-node: the indices of the keys whose primary is that node, ascending; the generator
  // draws positions in this list. Empty: every key.
  std::vector<std::uint32_t> only_keys;
};

struct Item {
  std::uint64_t key = 0;
  IncrWindowPending window;  // incr_window only
};

// One pipelined write in flight on a Redis connection.
struct Part {
  std::uint32_t id = 0;
  std::uint32_t request = 0;
  std::uint32_t first = 0;  // into Worker::items_
  std::uint32_t count = 0;
  bool active = false;
};

struct Request {
  std::uint64_t intended_ns = 0;   // latency is measured from here
  std::uint64_t sent_unix_ns = 0;  // Sluice, audit only
  std::uint32_t parts_left = 0;    // Redis
  std::uint32_t conn = 0;          // Redis: where a closed loop sends the next one
  std::uint32_t next_free = kNone;
};

// A connection to Redis. (Sluice goes through the client library.)
struct Conn {
  explicit Conn(asio::io_context& io) : socket(io) {}
  tcp::socket socket;
  protocol::Bytes out;      // appended by requests, not yet written
  protocol::Bytes sending;  // the buffer async_write is sending
  bool writing = false;
  bool dirty = false;
  std::vector<std::uint8_t> in;
  std::size_t begin = 0;
  std::size_t end = 0;
  // Parts in flight, a ring indexed by id: [oldest_id, next_id) covers them all.
  std::vector<Part> ring = std::vector<Part>(64);
  std::uint32_t mask = 63;
  std::uint32_t next = 1;
  std::uint32_t oldest = 1;
  std::size_t in_flight = 0;
  std::uint32_t cursor = 0;  // items of the oldest part already answered
  bool ready = false;        // handshake done
  HandlerSlot read_slot;
  HandlerSlot write_slot;
};

struct Published {
  std::atomic<std::uint64_t> sent{0};
  std::atomic<std::uint64_t> allowed{0};
  std::atomic<std::uint64_t> denied{0};
  std::atomic<std::uint64_t> errors{0};
};

class Worker {
 public:
  // A Sluice worker opens `connections` spread over the node's `shards` (at least one each)
  // through one client; a Redis worker opens `connections` sockets itself.
  Worker(RunContext& ctx, unsigned index, unsigned connections, std::uint64_t quota, double rate,
         unsigned shards)
      : ctx_(ctx),
        o_(ctx.options),
        sluice_(o_.backend == BackendKind::kSluice),
        per_shard_(sluice_ ? std::max(1u, (connections + shards - 1) / std::max(1u, shards)) : 0),
        quota_(quota),
        keys_(o_.dist, ctx.only_keys.empty() ? o_.keys : ctx.only_keys.size(),
              derive_seed(o_.seed, index)),
        key_buf_(ctx.formatter.max_length()),
        tick_timer_(io_),
        pace_timer_(io_) {
    if (sluice_) {
      connections_ = per_shard_ * std::max(1u, shards);
      key_arena_.resize(ctx.formatter.max_length() * o_.batch);
      acquire_items_.resize(o_.batch);
    } else {
      connections_ = connections;
      for (unsigned i = 0; i < connections; ++i) {
        auto c = std::make_unique<Conn>(io_);
        c->in.resize(kReadChunk);
        c->out.reserve(4096);
        c->sending.reserve(4096);
        conns_.push_back(std::move(c));
      }
    }
    dirty_.reserve(conns_.size());
    open_ = rate > 0;
    if (open_) interval_ns_ = static_cast<double>(o_.batch) * 1e9 / rate;
    // Both loops keep at most depth requests per connection in flight; an open loop's due
    // requests beyond that wait (the backlog) instead of piling up in memory.
    max_in_flight_ = static_cast<std::size_t>(connections_) * o_.depth;
    grow_pool(max_in_flight_);
    writer_.reserve(256 * static_cast<std::size_t>(o_.batch));
    const std::uint64_t steps =
        static_cast<std::uint64_t>((o_.duration + o_.drain_timeout).count()) / 100 + 16;
    timeline_.reserve(std::min<std::uint64_t>(steps, 1u << 20));
  }

  // Sluice: connects a client on this worker's io_context (HELLO on the public port, then on
  // every shard connection). Redis: connects every connection and completes its handshake
  // (SCRIPT LOAD or PING), all at once. Both within the connect timeout.
  Status connect_all() {
    if (sluice_) {
      client::ClientOptions copts;
      copts.servers = o_.servers;
      copts.connect_timeout = o_.connect_timeout;
      copts.timeout = o_.drain_timeout;  // a reply later than this counts as an error
      copts.client_name = "sluice-load";
      copts.auth_token = o_.auth_token;
      copts.connections_per_shard = per_shard_;
      copts.failure_policy = o_.failure_policy;
      copts.gateways = o_.gateways;
      copts.blocked_keys = o_.blocked_keys;
      copts.lease_duration = o_.lease_duration;
      // report: the client as before its local layer (nothing copied, settled or counted
      // for it), so that the cluster alone is measured.
      const bool report = o_.failure_policy == client::FailurePolicy::kReport;
      copts.breaker_failures = report ? 0 : client::ClientOptions{}.breaker_failures;
      copts.metrics = false;
      auto connected = client::Client::connect(copts, io_);
      if (!connected.ok()) return connected.status();
      client_ = std::move(connected).value();
      connections_ *= static_cast<unsigned>(client_->node_count());
      return Status();
    }
    for (auto& owned : conns_) {
      Conn& c = *owned;
      const tcp::endpoint ep = ctx_.endpoint;
      c.socket.async_connect(ep, [this, &c, ep](const boost::system::error_code& ec) {
        if (ec) {
          return setup_failed(fmt::format(
              "connect to {} failed: {}",
              net::format_host_port(ep.address().to_string(), ep.port()), ec.message()));
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
    io_.run_for(o_.connect_timeout);
    bool all_ready = std::all_of(conns_.begin(), conns_.end(), [](auto& c) { return c->ready; });
    if (!all_ready || !setup_error_.empty()) {
      for (auto& c : conns_) {
        boost::system::error_code ignored;
        c->socket.close(ignored);
      }
      io_.restart();
      io_.run();  // aborted handlers
      return Status(ErrorCode::kConnectionFailed,
                    setup_error_.empty()
                        ? fmt::format("handshake not done within {} ms", o_.connect_timeout.count())
                        : setup_error_);
    }
    io_.restart();
    return Status();
  }

  unsigned connections() const { return connections_; }
  unsigned nodes() const { return client_ ? static_cast<unsigned>(client_->node_count()) : 0; }

  // The next key index; with --only-node, the generator's draw is a position among that
  // node's keys (run_load() made sure there is one). A lookup, so that choosing keys costs the
  // same with and without --only-node: the replication benchmark compares runs of both kinds.
  std::uint64_t next_key() {
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
  const std::string& sha() const { return sha_; }

  // The thread body: runs until the bound is reached and replies are in (or the drain ends).
  void run() {
    asio::post(io_, [this] { start(); });
    if (!o_.busy_poll) {
      io_.run();
      return;
    }
    while (!io_.stopped()) io_.poll();  // stops by itself once the run leaves no work
  }

  Published& published() { return published_; }

  void add_to(LoadReport& report) const {
    report.sent += sent_;
    report.allowed += allowed_;
    report.denied += denied_;
    report.errors += errors_;
    for (std::size_t s = 0; s < by_source_.size(); ++s) report.by_source[s] += by_source_[s];
    report.intended += open_ ? intended_ : sent_;
    report.behind += open_ && intended_ > sent_ ? intended_ - sent_ : 0;
    report.backlog_max += backlog_max_;
    report.in_flight_max += in_flight_max_;
    report.latency.merge(latency_);
    if (report.timeline.size() < timeline_.size()) report.timeline.resize(timeline_.size());
    for (std::size_t i = 0; i < timeline_.size(); ++i) {
      report.timeline[i].sent += timeline_[i].sent;
      report.timeline[i].allowed += timeline_[i].allowed;
      report.timeline[i].denied += timeline_[i].denied;
      report.timeline[i].errors += timeline_[i].errors;
    }
    if (report.first_error.empty()) report.first_error = first_error_;
  }
  std::uint64_t end_ns() const { return end_ns_; }

 private:
  // ---- setup --------------------------------------------------------------------------------

  void setup_failed(std::string why) {
    if (setup_error_.empty()) setup_error_ = std::move(why);
  }

  void read_handshake(Conn& c) {
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

  // ---- the run ------------------------------------------------------------------------------

  void start() {
    start_ns_ = ctx_.start_ns;
    end_ns_ = start_ns_;
    for (auto& c : conns_) start_read(*c);
    arm_tick();
    if (open_) {
      next_intended_ = start_ns_;
      pace();
      return;
    }
    const std::size_t initial = static_cast<std::size_t>(connections_) * o_.depth;
    for (std::size_t i = 0; i < initial && !stopping_; ++i) {
      issue(sluice_ ? kNone : static_cast<std::uint32_t>(i % conns_.size()), monotonic_now_ns());
    }
    after_handler();
  }

  void arm_tick() {
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

  // Open loop: issues the requests whose intended time has come, at most kIssuePerHandler in
  // one handler and at most max_in_flight_ in flight. Whatever is due beyond that is the
  // backlog: it goes out as soon as replies make room, still timed from its intended time.
  void pace() {
    const std::uint64_t now = monotonic_now_ns();
    unsigned issued = 0;
    while (!stopping_ && next_intended_ <= now && issued < kIssuePerHandler) {
      if (in_flight_requests_ >= max_in_flight_) {
        waiting_for_room_ = true;  // complete_request() resumes
        break;
      }
      issue(kNone, next_intended_);
      ++issued;
      ++paced_;
      next_intended_ = slot_time(paced_);
    }
    if (!stopping_) note_backlog(now);
    after_handler();
    if (stopping_ || finished_ || waiting_for_room_) return;
    arm_pace();  // at once when still behind: a timer already due lets replies in first
  }

  void arm_pace() {
    pace_timer_.expires_at(at_ns(next_intended_));
    pace_timer_.async_wait(in_slot(pace_slot_, [this](const boost::system::error_code& ec) {
      if (ec || finished_) return;
      pace();
    }));
  }

  // When the open loop's request `slot` (0, 1, ...) is meant to go out.
  std::uint64_t slot_time(std::uint64_t slot) const {
    return start_ns_ + static_cast<std::uint64_t>(static_cast<double>(slot) * interval_ns_);
  }
  // How many requests the schedule sends before `t`: slots 0 .. n-1.
  std::uint64_t slots_before(std::uint64_t t) const {
    if (t <= start_ns_) return 0;
    auto n =
        static_cast<std::uint64_t>(std::ceil(static_cast<double>(t - start_ns_) / interval_ns_));
    while (n > 0 && slot_time(n - 1) >= t) --n;  // the double division may round up
    while (slot_time(n) < t) ++n;
    return n;
  }
  // The schedule's requests due by `now` (and before the deadline) but not yet sent.
  void note_backlog(std::uint64_t now) {
    std::uint64_t due = slots_before(now + 1);
    if (ctx_.deadline_ns != 0) due = std::min(due, slots_before(ctx_.deadline_ns));
    if (due > paced_) backlog_max_ = std::max(backlog_max_, (due - paced_) * o_.batch);
  }

  TimelineEntry& step(std::uint64_t now) {
    const std::uint64_t i = now > start_ns_ ? (now - start_ns_) / kStepNs : 0;
    if (i >= timeline_.size()) timeline_.resize(i + 1);
    return timeline_[i];
  }

  // Issues one request of up to --batch decisions. `conn` is where a Redis request goes
  // (kNone: round robin); for Sluice the client routes each item to its shard.
  void issue(std::uint32_t conn, std::uint64_t intended_ns) {
    if (stopping_) return;
    if (ctx_.deadline_ns != 0 && intended_ns >= ctx_.deadline_ns) return begin_stop(intended_ns);
    std::uint32_t n = o_.batch;
    if (quota_ != 0) {
      if (sent_ >= quota_) return begin_stop(intended_ns);
      n = static_cast<std::uint32_t>(std::min<std::uint64_t>(n, quota_ - sent_));
    }
    const std::uint32_t r = alloc_request();
    Request& req = requests_[r];
    req.intended_ns = intended_ns;
    req.parts_left = 0;
    const std::uint32_t base = r * o_.batch;
    req.sent_unix_ns = sluice_ && ctx_.audit ? SystemClock::instance().now_ns()
                                             : 0;  // Redis audits by server time
    ++in_flight_requests_;
    in_flight_max_ = std::max(in_flight_max_, in_flight_requests_);
    sent_ += n;
    step(monotonic_now_ns()).sent += n;
    if (sluice_) {
      issue_sluice(r, base, n);
    } else {
      if (conn == kNone) conn = next_open_conn();
      req.conn = conn;
      issue_redis(*conns_[conn], r, base, n);
    }
  }

  // Through the client library: one async batch (one frame per owning shard), or the probe
  // that sends the same frames as PINGs. Keys are formatted into per-item slices of one arena;
  // the client encodes them before returning.
  void issue_sluice(std::uint32_t r, std::uint32_t base, std::uint32_t n) {
    const std::size_t width = ctx_.formatter.max_length();
    for (std::uint32_t j = 0; j < n; ++j) {
      const std::uint64_t key = next_key();
      items_[base + j].key = key;
      acquire_items_[j] = client::AcquireRequest{
          ctx_.formatter.format(key, std::span<char>(key_arena_.data() + j * width, width)),
          o_.rule, o_.cost, false};
    }
    const std::span<const client::AcquireRequest> items(acquire_items_.data(), n);
    auto done = [this, r](std::span<const Result<client::Decision>> results) {
      on_sluice_results(r, results);
    };
    if (o_.op == Operation::kPing) {
      client_->probe_batch_async(items, done);
    } else {
      client_->acquire_batch_async(items, done);
    }
  }

  void on_sluice_results(std::uint32_t r, std::span<const Result<client::Decision>> results) {
    if (finished_) return;  // close() failing what was in flight: already counted as lost
    now_ns_ = monotonic_now_ns();
    const bool audit = ctx_.audit && o_.op == Operation::kAcquire;
    now_unix_ns_ = audit ? SystemClock::instance().now_ns() : 0;
    TimelineEntry& t = step(now_ns_);
    const Request& req = requests_[r];
    const std::uint32_t base = r * o_.batch;
    std::unique_lock<std::mutex> lock;
    if (audit) lock = std::unique_lock(ctx_.audit_mu);
    for (std::size_t i = 0; i < results.size(); ++i) {
      const Result<client::Decision>& d = results[i];
      if (d.ok()) ++by_source_[static_cast<std::size_t>(d->source) & 3];
      if (!d.ok()) {
        note_error(1, t, "Sluice: " + d.status().to_string());
      } else if (d->allowed) {
        ++allowed_;
        ++t.allowed;
        if (audit) {
          ctx_.audit->record(items_[base + i].key, req.sent_unix_ns, now_unix_ns_, o_.cost);
        }
      } else {
        ++denied_;
        ++t.denied;
      }
    }
    if (lock) lock.unlock();
    complete_request(r);
    after_handler();
    if (stopping_ && in_flight_requests_ == 0) finish(now_ns_);
  }

  // Open loop, Redis: the next connection in turn with fewer than --depth requests in flight
  // (there is one: pace() keeps in_flight_requests_ below connections x depth).
  std::uint32_t next_open_conn() {
    const auto count = static_cast<std::uint32_t>(conns_.size());
    std::uint32_t conn = rr_;
    for (std::uint32_t tried = 0; tried < count; ++tried) {
      conn = (rr_ + tried) % count;
      if (conns_[conn]->in_flight < o_.depth) break;
    }
    rr_ = (conn + 1) % count;
    return conn;
  }

  void add_part(Conn& c, std::uint32_t r, std::uint32_t first, std::uint32_t count) {
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
    ++requests_[r].parts_left;
    if (!c.dirty) {
      c.dirty = true;
      dirty_.push_back(&c);
    }
  }

  void issue_redis(Conn& c, std::uint32_t r, std::uint32_t first, std::uint32_t count) {
    writer_.clear();
    const bool incr_window =
        o_.op == Operation::kAcquire && o_.redis_design == RedisDesign::kIncrWindow;
    const std::uint64_t now_ms = incr_window ? SystemClock::instance().now_ns() / 1'000'000 : 0;
    for (std::uint32_t i = 0; i < count; ++i) {
      Item& item = items_[first + i];
      item.key = next_key();
      const std::string_view key = ctx_.formatter.format(item.key, key_buf_);
      switch (o_.op) {
        case Operation::kAcquire:
          if (incr_window) {
            item.window = append_incr_window(writer_, key, o_.rule, o_.cost, now_ms);
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

  // ---- I/O ----------------------------------------------------------------------------------

  void flush(Conn& c) {
    if (c.writing || c.out.empty() || finished_) return;
    c.sending.clear();
    c.sending.swap(c.out);
    c.writing = true;
    asio::async_write(
        c.socket, asio::buffer(c.sending),
        in_slot(c.write_slot, [this, &c](const boost::system::error_code& ec, std::size_t) {
          c.writing = false;
          if (finished_) return;
          if (ec) return fail(fmt::format("write failed: {}", ec.message()));
          flush(c);
        }));
  }

  void after_handler() {
    for (Conn* c : dirty_) {
      c->dirty = false;
      flush(*c);
    }
    dirty_.clear();
    published_.sent.store(sent_, std::memory_order_relaxed);
    published_.allowed.store(allowed_, std::memory_order_relaxed);
    published_.denied.store(denied_, std::memory_order_relaxed);
    published_.errors.store(errors_, std::memory_order_relaxed);
  }

  void start_read(Conn& c) {
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
          if (finished_) return;
          if (ec) {
            return fail(ec == asio::error::eof ? std::string("connection closed by the server")
                                               : "read failed: " + ec.message());
          }
          c.end += n;
          now_ns_ = monotonic_now_ns();
          now_unix_ns_ = ctx_.audit ? SystemClock::instance().now_ns() : 0;
          const bool ok = read_redis(c);
          if (!ok || finished_) return;
          start_read(c);
          after_handler();
          if (stopping_ && in_flight_requests_ == 0) finish(now_ns_);
        }));
  }

  bool read_redis(Conn& c) {
    const bool incr_window =
        o_.op == Operation::kAcquire && o_.redis_design == RedisDesign::kIncrWindow;
    RespValue values[3];
    while (c.in_flight > 0) {
      Part& p = c.ring[c.oldest & c.mask];
      const Item& item = items_[p.first + c.cursor];
      const std::size_t need = incr_window ? item.window.replies : 1;
      std::size_t at = c.begin;
      std::size_t got = 0;
      RedisDecision d;
      for (; got < need; ++got) {
        const std::string_view rest(reinterpret_cast<const char*>(c.in.data()) + at, c.end - at);
        const RespParseResult r = parser_.parse(rest);
        if (r.status == RespStatus::kNeedMore) break;
        if (r.status != RespStatus::kComplete) {
          fail("malformed reply from Redis");
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
      if (incr_window) d = read_incr_window(o_.rule, item.window, {values, need});
      c.begin = at;
      TimelineEntry& t = step(now_ns_);
      switch (d.outcome) {
        case RedisDecision::Outcome::kAllowed:
          ++allowed_;
          ++t.allowed;
          if (ctx_.audit && o_.op == Operation::kAcquire) {
            const std::uint64_t when =
                incr_window
                    ? (item.window.window * o_.rule.period_ms + item.window.elapsed_ms) * 1'000'000
                    : d.server_time_us * 1000;
            std::lock_guard lock(ctx_.audit_mu);
            ctx_.audit->record_exact(item.key, when, o_.cost);
          }
          break;
        case RedisDecision::Outcome::kDenied:
          ++denied_;
          ++t.denied;
          break;
        case RedisDecision::Outcome::kError:
          note_error(1, t, "Redis: " + std::string(d.error));
          break;
      }
      if (++c.cursor == p.count) {
        c.cursor = 0;
        c.oldest = next_id(c.oldest);
        complete_part(p, c);
      }
    }
    if (c.in_flight == 0 && c.begin < c.end) {
      fail("reply from Redis with nothing in flight");
      return false;
    }
    return true;
  }

  void note_error(std::uint64_t count, TimelineEntry& t, std::string_view what) {
    errors_ += count;
    t.errors += count;
    if (first_error_.empty()) first_error_ = std::string(what);
  }

  // The part's replies are all counted. REQUIRES: p in c's ring. `p` is invalid afterwards.
  void complete_part(Part& p, Conn& c) {
    p.active = false;
    --c.in_flight;
    if (--requests_[p.request].parts_left == 0) complete_request(p.request);
  }

  // Every decision of request r is counted: its latency, and (closed loop) the next request.
  void complete_request(std::uint32_t r) {
    Request& req = requests_[r];
    latency_.record(now_ns_ > req.intended_ns ? (now_ns_ - req.intended_ns) / 1000 : 0);
    end_ns_ = now_ns_;
    const std::uint32_t conn = req.conn;
    free_request(r);
    --in_flight_requests_;
    if (!open_) {
      issue(sluice_ ? kNone : conn, now_ns_);
    } else if (waiting_for_room_ && !stopping_) {
      waiting_for_room_ = false;
      arm_pace();  // not pace() itself: this may run inside the client's callback
    }
  }

  // ---- pools --------------------------------------------------------------------------------

  void grow_pool(std::size_t add) {
    const std::size_t old = requests_.size();
    requests_.resize(old + add);
    items_.resize(requests_.size() * o_.batch);
    for (std::size_t i = old + add; i-- > old;) {
      requests_[i].next_free = free_head_;
      free_head_ = static_cast<std::uint32_t>(i);
    }
  }
  std::uint32_t alloc_request() {
    if (free_head_ == kNone) grow_pool(std::max<std::size_t>(requests_.size(), 16));
    const std::uint32_t r = free_head_;
    free_head_ = requests_[r].next_free;
    return r;
  }
  void free_request(std::uint32_t r) {
    requests_[r].next_free = free_head_;
    free_head_ = r;
  }
  static void grow_ring(Conn& c) {
    std::vector<Part> bigger(c.ring.size() * 2);
    const auto mask = static_cast<std::uint32_t>(bigger.size() - 1);
    for (Part& p : c.ring) {
      if (p.active) bigger[p.id & mask] = p;
    }
    c.ring = std::move(bigger);
    c.mask = mask;
  }

  // ---- ending -------------------------------------------------------------------------------

  void begin_stop(std::uint64_t now) {
    if (stopping_) return;
    note_stop(now);
    stopping_ = true;
    drain_deadline_ns_ = std::max(now, monotonic_now_ns()) +
                         static_cast<std::uint64_t>(o_.drain_timeout.count()) * 1'000'000;
    pace_timer_.cancel();
    if (in_flight_requests_ == 0) finish(now);
  }

  // Open loop: the decisions the schedule meant to send before the run stopped at `now` (at
  // the deadline, at the request bound, or when a connection failed).
  void note_stop(std::uint64_t now) {
    if (!open_) return;
    const std::uint64_t until = ctx_.deadline_ns != 0 ? std::min(now, ctx_.deadline_ns) : now;
    note_backlog(until);
    intended_ = slots_before(until) * o_.batch;
    if (quota_ != 0) intended_ = std::min(intended_, quota_);
    intended_ = std::max(intended_, sent_);
  }

  // A failed connection ends this worker's run: what is in flight counts as errors.
  void fail(std::string why) {
    if (first_error_.empty()) first_error_ = std::move(why);
    const std::uint64_t now = monotonic_now_ns();
    if (!stopping_) note_stop(now);
    stopping_ = true;
    finish(now);
  }

  void finish(std::uint64_t now) {
    if (finished_) return;
    finished_ = true;
    const std::uint64_t lost = sent_ - allowed_ - denied_ - errors_;
    if (lost > 0) {
      errors_ += lost;
      step(now).errors += lost;
      if (first_error_.empty()) first_error_ = "no reply within the drain timeout";
      end_ns_ = now;
    }
    for (auto& c : conns_) {
      boost::system::error_code ignored;
      c->socket.close(ignored);
    }
    if (client_) client_->close();  // what is still in flight calls back, and is ignored
    tick_timer_.cancel();
    pace_timer_.cancel();
    after_handler();
  }

  RunContext& ctx_;
  const LoadOptions& o_;
  const bool sluice_;
  const unsigned per_shard_;  // Sluice: connections to each shard
  unsigned connections_ = 0;
  const std::uint64_t quota_;
  asio::io_context io_{1};
  std::unique_ptr<client::Client> client_;  // Sluice; runs on io_ and is destroyed before it
  KeyGenerator keys_;
  std::uint64_t next_position_ = 0;  // --only-node: the next draw, taken one call early
  bool drawn_ahead_ = false;
  std::vector<char> key_buf_;
  std::vector<char> key_arena_;  // Sluice: one request's keys, max_length() bytes each
  std::vector<client::AcquireRequest> acquire_items_;
  std::vector<std::unique_ptr<Conn>> conns_;
  std::uint32_t rr_ = 0;  // Redis: the next connection, open loop
  std::vector<Conn*> dirty_;
  std::vector<Request> requests_;
  std::vector<Item> items_;
  std::uint32_t free_head_ = kNone;
  RespWriter writer_;
  RespParser parser_;
  std::string sha_;
  std::string setup_error_;

  asio::steady_timer tick_timer_;
  asio::steady_timer pace_timer_;
  HandlerSlot tick_slot_;
  HandlerSlot pace_slot_;
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
  std::uint64_t now_ns_ = 0;
  std::uint64_t now_unix_ns_ = 0;
  std::uint64_t drain_deadline_ns_ = 0;
  bool stopping_ = false;
  bool finished_ = false;
  std::size_t in_flight_requests_ = 0;

  std::uint64_t sent_ = 0;
  std::uint64_t allowed_ = 0;
  std::array<std::uint64_t, 4> by_source_{};
  std::uint64_t denied_ = 0;
  std::uint64_t errors_ = 0;
  std::string first_error_;
  LatencyHistogram latency_;
  std::vector<TimelineEntry> timeline_;
  Published published_;
};

Result<tcp::endpoint> resolve(const std::string& server) {
  const std::optional<net::HostPort> parsed = net::parse_host_port(server);
  if (!parsed) {
    return Status(ErrorCode::kInvalidArgument, "expected HOST:PORT, got \"" + server + "\"");
  }
  const std::string& host = parsed->host;
  const std::uint16_t port = parsed->port;
  asio::io_context io;
  tcp::resolver resolver(io);
  boost::system::error_code ec;
  const auto found = resolver.resolve(host, std::to_string(port), ec);
  if (ec || found.empty()) {
    return Status(ErrorCode::kConnectionFailed, "cannot resolve " + host + ": " + ec.message());
  }
  return found.begin()->endpoint();
}

// --only-node: the ring of the seed's map, checked to give the node some of the run's keys.
Status only_node_ring(client::Client& client, const LoadOptions& options, RunContext& ctx) {
  Result<client::ClusterInfo> info = client.cluster();
  if (!info.ok()) return info.status();
  if (info->nodes.empty()) {
    return Status(ErrorCode::kInvalidArgument, "--only-node " + options.only_node + ": " +
                                                   options.servers.front() +
                                                   " is not in a cluster");
  }
  std::vector<std::string> active;
  for (const client::ClusterNodeInfo& node : info->nodes) {
    if (node.state == "active") active.push_back(node.id);
  }
  cluster::RingParams params;
  params.hash_version = info->ring_version;
  params.partition_bits = info->partition_bits;
  params.vnodes_per_node = info->vnodes_per_node;
  auto ring = cluster::Ring::build(std::move(active), params);
  if (!ring) return Status(ErrorCode::kProtocolError, "the cluster's ring: " + ring.error());
  const std::optional<cluster::NodeIndex> index = ring->find(options.only_node);
  if (!index) {
    return Status(ErrorCode::kInvalidArgument, "--only-node " + options.only_node +
                                                   ": no active node of that id in the map of "
                                                   "epoch " +
                                                   std::to_string(info->epoch));
  }
  // Every key of the run whose primary it is (validate() bounded --keys).
  std::vector<char> buffer(ctx.formatter.max_length());
  ctx.only_keys.clear();
  for (std::uint64_t k = 0; k < options.keys; ++k) {
    if (ring->primary_of(hash_key(ctx.formatter.format(k, buffer))) == *index) {
      ctx.only_keys.push_back(static_cast<std::uint32_t>(k));
    }
  }
  if (ctx.only_keys.empty()) {
    return Status(ErrorCode::kInvalidArgument,
                  fmt::format("--only-node {}: none of the {} keys has it as primary",
                              options.only_node, options.keys));
  }
  return Status();
}

}  // namespace

Result<LoadReport> run_load(const LoadOptions& options) {
  if (std::string why = validate(options); !why.empty()) {
    return Status(ErrorCode::kInvalidArgument, why);
  }
  RunContext ctx(options);
  Result<tcp::endpoint> endpoint = resolve(options.servers.front());
  if (!endpoint.ok()) return endpoint.status();
  ctx.endpoint = *endpoint;

  LoadReport report;
  unsigned shards = 1;
  if (options.backend == BackendKind::kSluice) {
    // Discovery through the client library: HELLO on the public port gives the shard ports.
    client::ClientOptions copts;
    copts.servers = options.servers;
    copts.shard_aware = false;
    copts.connect_timeout = options.connect_timeout;
    copts.client_name = "sluice-load";
    copts.auth_token = options.auth_token;
    auto discovered = client::Client::connect(copts);
    if (!discovered.ok()) return discovered.status();
    const client::ServerInfo& info = (*discovered)->server_info();
    if (info.shard_ports.empty()) {
      return Status(ErrorCode::kProtocolError, "the server reported no shard ports");
    }
    if (options.batch > info.max_batch) {
      return Status(ErrorCode::kInvalidArgument,
                    fmt::format("--batch {} is above the server's max batch {}", options.batch,
                                info.max_batch));
    }
    if (ctx.formatter.max_length() > info.max_key) {
      return Status(ErrorCode::kInvalidArgument, "keys are longer than the server's max key");
    }
    shards = static_cast<unsigned>(info.shard_ports.size());
    if (!options.only_node.empty()) {
      if (Status s = only_node_ring(**discovered, options, ctx); !s.ok()) return s;
    }
  }
  report.shards = options.backend == BackendKind::kSluice ? shards : 0;
  if (options.audit && options.op == Operation::kAcquire) {
    ctx.audit.emplace(options.rule, std::min(options.audit_keys, options.keys));
  }

  // Connections and the request quota, split over the threads. Each Sluice worker opens at
  // least one connection per shard.
  const unsigned t_count = options.threads;
  std::vector<std::unique_ptr<Worker>> workers;
  for (unsigned t = 0; t < t_count; ++t) {
    unsigned conns = options.connections / t_count + (t < options.connections % t_count ? 1 : 0);
    std::uint64_t quota = 0;
    if (options.requests != 0) {
      quota = options.requests / t_count + (t < options.requests % t_count ? 1 : 0);
      if (quota == 0) continue;
    }
    workers.push_back(
        std::make_unique<Worker>(ctx, t, conns, quota, options.rate / t_count, shards));
  }
  for (auto& w : workers) {
    if (Status s = w->connect_all(); !s.ok()) return s;
    report.connections += w->connections();
    report.nodes = std::max(report.nodes, w->nodes());
  }

  ctx.start_ns = monotonic_now_ns();
  if (options.duration.count() > 0) {
    ctx.deadline_ns =
        ctx.start_ns + static_cast<std::uint64_t>(options.duration.count()) * 1'000'000;
  }
  std::mutex done_mu;
  std::condition_variable done_cv;
  std::size_t running = workers.size();
  std::vector<std::thread> threads;
  for (auto& w : workers) {
    threads.emplace_back([&, worker = w.get()] {
      worker->run();
      std::lock_guard lock(done_mu);
      --running;
      done_cv.notify_all();
    });
  }
  {
    std::unique_lock lock(done_mu);
    for (int second = 1; running > 0; ++second) {
      const auto when = std::chrono::steady_clock::time_point(
          std::chrono::nanoseconds(ctx.start_ns) + std::chrono::seconds(second));
      if (done_cv.wait_until(lock, when, [&] { return running == 0; })) break;
      if (options.progress) {
        std::uint64_t sent = 0, allowed = 0, denied = 0, errors = 0;
        for (auto& w : workers) {
          sent += w->published().sent.load(std::memory_order_relaxed);
          allowed += w->published().allowed.load(std::memory_order_relaxed);
          denied += w->published().denied.load(std::memory_order_relaxed);
          errors += w->published().errors.load(std::memory_order_relaxed);
        }
        lock.unlock();
        options.progress(static_cast<double>(second), sent, allowed, denied, errors);
        lock.lock();
      }
    }
  }
  for (std::thread& t : threads) t.join();

  std::uint64_t end_ns = ctx.start_ns;
  for (auto& w : workers) {
    w->add_to(report);
    end_ns = std::max(end_ns, w->end_ns());
  }
  report.duration_s = static_cast<double>(end_ns - ctx.start_ns) / 1e9;
  report.throughput_per_s =
      report.duration_s > 0
          ? static_cast<double>(report.allowed + report.denied) / report.duration_s
          : 0;
  if (ctx.audit) report.audit = ctx.audit->report();
  return report;
}

}  // namespace sluice::load
