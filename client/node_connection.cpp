#include "client/node_connection.h"

#include "net/asio.h"  // before any other Asio header

#include <algorithm>
#include <cstring>

namespace sluice::client::detail {
namespace {

namespace asio = boost::asio;
using protocol::Frame;
using protocol::Opcode;

constexpr std::uint64_t kNsPerMs = 1'000'000;
constexpr std::uint64_t kFirstBackoffNs = 50 * kNsPerMs;
constexpr std::uint64_t kMaxBackoffNs = 1000 * kNsPerMs;
constexpr std::size_t kInitialTable = 256;
constexpr std::size_t kReadChunk = 64 * 1024;
// Outgoing buffers start this large so that bursts of small frames do not regrow them.
constexpr std::size_t kInitialOutBuffer = 64 * 1024;
// Replies matched under one lock hold, completed together once the lock is released.
constexpr std::size_t kMaxReadyBatch = 256;
// Replies can outgrow the server's request limit (a full batch's results, many stats).
constexpr std::uint32_t kMaxReplyFrame = 16u << 20;

}  // namespace

Result<Decision> to_decision(const protocol::AcquireResult& result, std::uint32_t policy_quota,
                             std::uint64_t policy_window_ms) {
  using protocol::ItemStatus;
  switch (result.status) {
    case ItemStatus::kAllowed:
    case ItemStatus::kDenied: {
      Decision d;
      d.allowed = result.status == ItemStatus::kAllowed;
      d.limit = result.limit;
      d.remaining = result.remaining;
      d.reset_after_ms = result.reset_after_ms;
      d.retry_after_ms = result.retry_after_ms;
      d.policy_quota = policy_quota;
      d.policy_window_ms = policy_window_ms;
      return d;
    }
    case ItemStatus::kInvalidRule:
      return Result<Decision>(ErrorCode::kInvalidRule,
                              "the server refused the rule (unknown algorithm, period 0 or too "
                              "long, cost 0, or a sliding log above its cap)");
    case ItemStatus::kInvalidKey:
      return Result<Decision>(ErrorCode::kInvalidKey, "key is empty or longer than the max key");
    case ItemStatus::kNoMemory:
      return Result<Decision>(ErrorCode::kNoMemory, "the owning shard has no memory for the key");
    case ItemStatus::kRedirect:
      return Result<Decision>(ErrorCode::kNotOwner,
                              "the node does not own the key (REDIRECT): in its cluster map "
                              "another node is the key's primary");
    case ItemStatus::kUnavailable:
      return Result<Decision>(ErrorCode::kUnavailable,
                              "the key's primary cannot serve it now (its partition is moving, "
                              "or it has no primary): retry later");
  }
  return Result<Decision>(ErrorCode::kProtocolError, "unknown item status in ACQUIRE reply");
}

void encode_acquire(protocol::Bytes& out, std::uint32_t request_id, const AcquireRequest& request,
                    const protocol::Framing& framing, std::uint32_t lease_units) {
  const std::size_t start = protocol::begin_acquire_request(out, request_id, framing);
  protocol::AcquireItem item{request.key, request.rule, request.cost, request.peek};
  if (lease_units != 0) {
    item.cost = lease_units;
    item.peek = false;
    item.lease = true;
  }
  protocol::add_acquire_item(out, start, item);
  protocol::finish_acquire_request(out, start);
}

const protocol::AcquireResult* one_acquire_result(const Frame& reply,
                                                  std::vector<protocol::AcquireResult>& scratch) {
  if (reply.header.opcode != Opcode::kAcquire ||
      !protocol::parse_acquire_reply(reply.body, scratch) || scratch.size() != 1) {
    return nullptr;
  }
  return &scratch[0];
}

Result<Decision> decision_from_reply(const Frame& reply,
                                     std::vector<protocol::AcquireResult>& scratch,
                                     std::uint32_t policy_quota, std::uint64_t policy_window_ms) {
  if (reply.header.opcode == Opcode::kError) return server_error_status(reply.body);
  const protocol::AcquireResult* answer = one_acquire_result(reply, scratch);
  if (answer == nullptr) {
    return Result<Decision>(ErrorCode::kProtocolError, "unexpected reply to ACQUIRE");
  }
  return to_decision(*answer, policy_quota, policy_window_ms);
}

Result<Decision> probe_echo(const Frame& reply) {
  if (reply.header.opcode != Opcode::kPing) {
    return Result<Decision>(ErrorCode::kProtocolError, "unexpected reply to PING");
  }
  Decision echoed;
  echoed.allowed = true;
  return echoed;
}

Status server_error_status(std::span<const std::uint8_t> body) {
  protocol::ErrorReply error;
  if (!protocol::parse_error(body, error)) {
    return Status(ErrorCode::kProtocolError, "unparsable ERROR reply");
  }
  // A refused token is the caller's to fix (the options), not a server failure: a code of its own.
  if (error.code == protocol::WireErrorCode::kUnauthenticated) {
    return Status(ErrorCode::kUnauthenticated, std::string(error.message));
  }
  std::string message(protocol::error_code_name(error.code));
  if (!error.message.empty()) {
    message += ": ";
    message += error.message;
  }
  return Status(ErrorCode::kServerError, std::move(message));
}

Status unexpected_reply(std::string_view what) {
  return Status(ErrorCode::kProtocolError, "unexpected reply to " + std::string(what));
}

NodeConnection::NodeConnection(asio::io_context& io, ConnectionConfig config,
                               std::function<void()> arm_timer)
    : io_(io),
      config_(std::move(config)),
      arm_timer_(std::move(arm_timer)),
      table_(kInitialTable),
      mask_(kInitialTable - 1),
      socket_(io),
      decoder_(kMaxReplyFrame) {
  out_.reserve(kInitialOutBuffer);
  sending_.reserve(kInitialOutBuffer);
  ready_.reserve(kMaxReadyBatch);
}

// ---- any thread ----------------------------------------------------------------------------

Status NodeConnection::overloaded() const {
  const std::string max = std::to_string(config_.in_flight_limit->max());
  return Status(ErrorCode::kOverloaded,
                max + " calls already in flight (the client's max_in_flight is " + max +
                    "); retry once replies drain");
}

Status NodeConnection::admit_locked() {
  switch (state_) {
    case State::kClosed:
      return Status(ErrorCode::kClosed, "client is shutting down");
    case State::kDisconnected: {
      const std::uint64_t now = monotonic_now_ns();
      if (now < next_attempt_ns_) {
        // A refusal that is the caller's (a wrong token, a peer that is not Sluice) keeps its
        // code: no failure policy may take it for an outage.
        const ErrorCode code = last_error_.code() == ErrorCode::kUnauthenticated ||
                                       last_error_.code() == ErrorCode::kProtocolError
                                   ? last_error_.code()
                                   : ErrorCode::kConnectionFailed;
        return Status(code, "not connected to " + config_.name + " (" + last_error_.message() +
                                "); retrying in " +
                                std::to_string((next_attempt_ns_ - now + kNsPerMs - 1) / kNsPerMs) +
                                " ms");
      }
      state_ = State::kConnecting;
      asio::post(io_, [this] { start_connect(); });
      return Status();
    }
    case State::kConnecting:
    case State::kHandshaking:
    case State::kReady:
      return Status();
  }
  return Status();
}

std::uint32_t NodeConnection::next_request_id_locked() {
  std::uint32_t id = next_id_++;
  if (id == kHandshakeId) id = next_id_++;
  return id;
}

void NodeConnection::insert_locked(std::uint32_t id, const Completion& completion,
                                   std::uint32_t bytes) {
  if (in_flight_ == 0) oldest_id_ = id;
  while (table_[id & mask_].active) grow_table_locked();
  Pending& p = table_[id & mask_];
  p.id = id;
  p.active = true;
  p.part = completion.part;
  p.deadline_ns = monotonic_now_ns() + config_.timeout_ns;
  p.early = false;
  if (completion.deadline_ns != 0 && completion.deadline_ns < p.deadline_ns) {
    p.deadline_ns = completion.deadline_ns;
  }
  if (p.deadline_ns < last_deadline_ns_) {
    p.early = true;
    ++early_;
  } else {
    last_deadline_ns_ = p.deadline_ns;
  }
  p.bytes = bytes;
  p.sink = completion.sink;
  if (completion.callback != nullptr) p.callback = std::move(*completion.callback);
  if (completion.batch_callback != nullptr)
    p.batch_callback = std::move(*completion.batch_callback);
  p.probe = completion.probe;
  p.policy_quota = completion.policy_quota;
  p.policy_window_ms = completion.policy_window_ms;
  p.resend.armed = false;
  if (completion.keep_request != nullptr) p.resend.keep(*completion.keep_request);
  p.lease_units = p.resend.armed ? completion.lease_units : 0;
  ++in_flight_;
}

void NodeConnection::grow_table_locked() {
  std::vector<Pending> bigger(table_.size() * 2);
  const auto mask = static_cast<std::uint32_t>(bigger.size() - 1);
  for (Pending& p : table_) {
    if (p.active) bigger[p.id & mask] = std::move(p);
  }
  table_ = std::move(bigger);
  mask_ = mask;
}

void NodeConnection::wake_locked() {
  if (state_ == State::kReady && !write_in_flight_ && !wake_posted_) {
    wake_posted_ = true;
    asio::post(io_, net::in_slot(wake_slot_, [this] { on_wake(); }));
  }
}

void NodeConnection::begin_connect() {
  std::lock_guard lock(mu_);
  if (state_ != State::kDisconnected) return;
  next_attempt_ns_ = 0;
  (void)admit_locked();
}

void NodeConnection::connect_when_due() {
  std::lock_guard lock(mu_);
  if (state_ != State::kDisconnected || monotonic_now_ns() < next_attempt_ns_) return;
  (void)admit_locked();
}

Status NodeConnection::wait_ready(std::chrono::milliseconds limit, bool run_io) {
  std::unique_lock lock(mu_);
  if (state_ == State::kReady) return Status();
  const std::uint64_t before = attempts_finished_;
  if (state_ == State::kDisconnected) {
    next_attempt_ns_ = 0;
    if (Status admitted = admit_locked(); !admitted.ok()) return admitted;
  }
  if (state_ == State::kClosed) return Status(ErrorCode::kClosed, "client is shutting down");
  const auto done = [&] { return attempts_finished_ != before || state_ == State::kClosed; };
  // The I/O side ends the attempt at the connect deadline; the extra second only guards
  // against waiting forever if it is stuck.
  const auto give_up = std::chrono::steady_clock::now() + limit + std::chrono::seconds(1);
  bool finished = false;
  if (run_io) {
    while (!(finished = done()) && std::chrono::steady_clock::now() < give_up) {
      lock.unlock();
      if (io_.stopped()) io_.restart();
      io_.run_one_until(give_up);
      lock.lock();
    }
  } else {
    finished = handshake_cv_.wait_until(lock, give_up, done);
  }
  if (state_ == State::kReady) return Status();
  if (!finished) {
    return Status(ErrorCode::kTimeout, "no Sluice HELLO from " + config_.name + " within " +
                                           std::to_string(limit.count()) + " ms");
  }
  if (state_ == State::kClosed) return Status(ErrorCode::kClosed, "client is shutting down");
  return last_error_;
}

bool NodeConnection::ready() const {
  std::lock_guard lock(mu_);
  return state_ == State::kReady;
}

bool NodeConnection::handshaking() const {
  std::lock_guard lock(mu_);
  return state_ == State::kHandshaking;
}

protocol::HelloReply NodeConnection::hello() const {
  std::lock_guard lock(mu_);
  return hello_;
}

// ---- I/O thread ----------------------------------------------------------------------------

void NodeConnection::start_connect() {
  {
    std::lock_guard lock(mu_);
    if (state_ != State::kConnecting) return;  // shut down since the post
  }
  ++epoch_;
  boost::system::error_code ignored;
  socket_.close(ignored);
  read_begin_ = read_end_ = 0;
  server_error_.clear();
  connect_deadline_ns_ = monotonic_now_ns() + config_.connect_timeout_ns;
  const std::uint64_t epoch = epoch_;
  socket_.async_connect(config_.endpoint, [this, epoch](const boost::system::error_code& ec) {
    on_connected(epoch, ec);
  });
  arm_timer_();
}

void NodeConnection::on_connected(std::uint64_t epoch, const boost::system::error_code& ec) {
  if (epoch != epoch_) return;
  if (ec) {
    fail_connection(Status(ErrorCode::kConnectionFailed,
                           "connect to " + config_.name + " failed: " + ec.message()));
    return;
  }
  boost::system::error_code ignored;
  socket_.set_option(asio::ip::tcp::no_delay(true), ignored);

  std::unique_lock lock(mu_);
  if (state_ != State::kConnecting) return;  // shut down meanwhile
  state_ = State::kHandshaking;
  // HELLO alone: what callers queued meanwhile waits in out_ for the reply (and can still be
  // withdrawn if it times out first).
  sending_.clear();
  protocol::encode_hello_request(
      sending_, kHandshakeId,
      protocol::HelloRequest{protocol::kVersion, config_.client_name, config_.auth_token});
  write_in_flight_ = true;
  lock.unlock();
  asio::async_write(
      socket_, asio::buffer(sending_),
      net::in_slot(write_slot_, [this, epoch](const boost::system::error_code& e, std::size_t) {
        on_written(epoch, e);
      }));
  start_read();
}

void NodeConnection::on_wake() {
  std::unique_lock lock(mu_);
  wake_posted_ = false;
  if (state_ != State::kReady || write_in_flight_ || out_.empty()) return;
  start_write_locked(lock);
}

void NodeConnection::start_write_locked(std::unique_lock<std::mutex>& lock) {
  // Swap rather than copy: callers keep appending to the other buffer while this one is sent,
  // and both keep their capacity.
  sending_.clear();
  sending_.swap(out_);
  unsent_from_ = next_issued_id_locked();  // everything queued has left
  write_in_flight_ = true;
  lock.unlock();
  arm_timer_();
  const std::uint64_t epoch = epoch_;
  asio::async_write(
      socket_, asio::buffer(sending_),
      net::in_slot(write_slot_, [this, epoch](const boost::system::error_code& ec, std::size_t) {
        on_written(epoch, ec);
      }));
}

void NodeConnection::on_written(std::uint64_t epoch, const boost::system::error_code& ec) {
  if (epoch != epoch_) return;
  if (ec) {
    fail_connection(Status(ErrorCode::kConnectionFailed,
                           "write to " + config_.name + " failed: " + ec.message()));
    return;
  }
  std::unique_lock lock(mu_);
  write_in_flight_ = false;
  if (state_ == State::kReady && !out_.empty()) start_write_locked(lock);
}

void NodeConnection::start_read() {
  if (read_begin_ == read_end_) {
    read_begin_ = read_end_ = 0;
  } else if (read_begin_ > 0) {
    std::memmove(read_buf_.data(), read_buf_.data() + read_begin_, read_end_ - read_begin_);
    read_end_ -= read_begin_;
    read_begin_ = 0;
  }
  if (read_buf_.size() < kReadChunk) read_buf_.resize(kReadChunk);
  // A partial frame that fills the buffer: make room (the decoder bounds the frame size).
  if (read_end_ == read_buf_.size()) read_buf_.resize(read_buf_.size() * 2);
  const std::uint64_t epoch = epoch_;
  socket_.async_read_some(
      asio::buffer(read_buf_.data() + read_end_, read_buf_.size() - read_end_),
      net::in_slot(read_slot_, [this, epoch](const boost::system::error_code& ec, std::size_t n) {
        on_read(epoch, ec, n);
      }));
}

void NodeConnection::on_read(std::uint64_t epoch, const boost::system::error_code& ec,
                             std::size_t n) {
  if (epoch != epoch_) return;
  if (ec) {
    std::string why = ec == asio::error::eof
                          ? "connection closed by " + config_.name
                          : "read from " + config_.name + " failed: " + ec.message();
    if (handshaking()) why += " before its HELLO reply (is it a Sluice server?)";
    if (!server_error_.empty()) why += " after ERROR " + server_error_;
    fail_connection(Status(ErrorCode::kConnectionFailed, std::move(why)));
    return;
  }
  read_end_ += n;

  Status fatal;
  bool handshake_done = false;
  // The highest epoch in the headers read, reported before the replies are completed, so that
  // a REDIRECT's refresh is under way by the time its batch looks for it.
  std::uint64_t newest = 0;
  const auto report_epoch = [&] {
    if (config_.observer != nullptr &&
        newest > config_.epoch_floor->load(std::memory_order_relaxed)) {
      config_.observer->on_newer_epoch(*this, newest);
    }
    newest = 0;
  };
  ready_.clear();
  {
    std::unique_lock lock(mu_);
    while (read_begin_ < read_end_) {
      const protocol::DecodeResult r = decoder_.decode(
          std::span<const std::uint8_t>(read_buf_.data() + read_begin_, read_end_ - read_begin_));
      if (r.status == protocol::DecodeStatus::kNeedMore) break;
      if (r.status == protocol::DecodeStatus::kMalformed) {
        // Before HELLO is answered, bad bytes mean the peer is something else (Redis, HTTP).
        fatal = state_ == State::kHandshaking
                    ? Status(ErrorCode::kProtocolError,
                             config_.name + " answered something that is not Sluice (" +
                                 std::string(r.reason) + ")")
                    : Status(ErrorCode::kProtocolError,
                             "malformed reply from " + config_.name + ": " + std::string(r.reason));
        break;
      }
      read_begin_ += r.frame_size;
      const Frame& frame = r.frame;
      newest = std::max(newest, frame.header.epoch);
      if (!frame.header.is_reply() && frame.header.opcode != Opcode::kError) {
        fatal = Status(ErrorCode::kProtocolError, "request frame from " + config_.name);
        break;
      }
      if (frame.header.opcode == Opcode::kError) {
        server_error_ = server_error_status(frame.body).message();
      }
      const std::uint32_t id = frame.header.request_id;
      if (id == kHandshakeId) {
        if (state_ != State::kHandshaking) continue;  // an ERROR before closing, e.g. idle
        if (frame.header.opcode == Opcode::kError) {
          Status refused = server_error_status(frame.body);
          fatal =
              Status(refused.code(), "HELLO refused by " + config_.name + ": " + refused.message());
          break;
        }
        protocol::HelloReply hello;
        if (frame.header.opcode != Opcode::kHello ||
            !protocol::parse_hello_reply(frame.body, hello)) {
          fatal = Status(ErrorCode::kProtocolError, "bad HELLO reply from " + config_.name);
          break;
        }
        if (hello.this_shard != config_.expected_shard) {
          fatal = Status(ErrorCode::kProtocolError,
                         config_.name + " is shard " + std::to_string(hello.this_shard) +
                             ", expected " + std::to_string(config_.expected_shard));
          break;
        }
        epoch_framing_ = hello.version >= kFirstClusterVersion;
        hello_ = std::move(hello);
        state_ = State::kReady;
        ++attempts_finished_;
        backoff_ns_ = 0;
        connect_deadline_ns_ = 0;
        handshake_cv_.notify_all();
        handshake_done = true;
        continue;
      }
      Pending& p = table_[id & mask_];
      if (!p.active || p.id != id) {  // a late reply to a call that timed out
        late_replies_.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      if (unsent_locked(id)) {
        // Its frame is still in out_: answering it would decide it twice once it is sent.
        fatal = Status(ErrorCode::kProtocolError, config_.name + " answered request " +
                                                      std::to_string(id) + " before it was sent");
        break;
      }
      ready_.emplace_back(std::move(p), frame);
      remove_locked(p);
      if (ready_.size() == kMaxReadyBatch) {
        // Bounded batches keep ready_ at its reserved size; frames stay valid (read_buf_ is
        // only touched by this handler).
        lock.unlock();
        report_epoch();
        for (auto& [pending, reply] : ready_) complete(pending, &reply, Status());
        ready_.clear();
        lock.lock();
        if (epoch != epoch_) break;  // a callback closed the client
      }
    }
  }
  if (epoch == epoch_) report_epoch();
  for (auto& [pending, frame] : ready_) complete(pending, &frame, Status());
  ready_.clear();
  if (epoch != epoch_) return;  // a callback closed the client: nothing more to read
  if (!fatal.ok()) {
    fail_connection(fatal);
    return;
  }
  if (handshake_done) {
    // What was queued during the handshake goes now.
    std::unique_lock lock(mu_);
    if (state_ == State::kReady && !write_in_flight_ && !out_.empty()) start_write_locked(lock);
  }
  start_read();
  if (handshake_done && config_.observer != nullptr) config_.observer->on_ready(*this);
}

void NodeConnection::complete(Pending& p, const Frame* reply, const Status& failure) {
  Status error = failure;
  if (reply != nullptr && reply->header.opcode == Opcode::kError) {
    error = server_error_status(reply->body);
    reply = nullptr;
  }
  if (p.sink != nullptr) {
    if (reply != nullptr) {
      p.sink->on_reply(p.part, *reply);
    } else {
      p.sink->on_failure(p.part, error);
    }
    return;
  }
  if (!p.callback && !p.batch_callback) return;
  Result<Decision> decision = reply == nullptr ? Result<Decision>(error)
                              : p.probe        ? probe_echo(*reply)
                                               : Result<Decision>(Decision{});
  if (reply != nullptr && !p.probe &&
      acquire_decision(p, *reply, decision) == Outcome::kHandedOver) {
    return;  // the observer answers it
  }
  if (reply != nullptr && !decision.ok() && decision.status().code() == ErrorCode::kProtocolError) {
    decision = Result<Decision>(ErrorCode::kProtocolError,
                                std::string(p.probe ? "unexpected reply to PING from "
                                                    : "unexpected reply to ACQUIRE from ") +
                                    config_.name);
  }
  if (p.resend.armed && config_.observer != nullptr) {
    config_.observer->on_decided(p.resend.request(), decision, kept_started_ns(p), health_);
  }
  if (p.callback) {
    p.callback(std::move(decision));
    p.callback = nullptr;
  } else {
    p.batch_callback(std::span<const Result<Decision>>(&decision, 1));
    p.batch_callback = nullptr;
  }
}

std::uint64_t NodeConnection::kept_started_ns(const Pending& p) const {
  // Its deadline is its submission plus the timeout: a call with a deadline of its own is a
  // batch's, which keeps no copy here.
  return p.deadline_ns > config_.timeout_ns ? p.deadline_ns - config_.timeout_ns : 0;
}

NodeConnection::Outcome NodeConnection::acquire_decision(Pending& p, const Frame& reply,
                                                         Result<Decision>& out) {
  const protocol::AcquireResult* parsed = one_acquire_result(reply, results_);
  if (parsed == nullptr) {
    out = Result<Decision>(ErrorCode::kProtocolError, "unexpected reply to ACQUIRE");
    return Outcome::kDecided;
  }
  const protocol::AcquireResult& answer = *parsed;
  if (p.resend.armed && config_.observer != nullptr &&
      (answer.status == protocol::ItemStatus::kRedirect ||
       answer.status == protocol::ItemStatus::kUnavailable)) {
    config_.observer->on_resend_needed(p.resend.request(), p.deadline_ns, answer,
                                       reply.header.epoch, p.callback ? &p.callback : nullptr,
                                       p.callback ? nullptr : &p.batch_callback);
    p.callback = nullptr;
    p.batch_callback = nullptr;
    return Outcome::kHandedOver;
  }
  out = to_decision(answer, p.policy_quota, p.policy_window_ms);
  if (p.lease_units != 0 && out.ok()) {
    // The answer to a lease request goes to the observer, granted or not. A grant: the request
    // paid its cost from the units and the observer keeps the rest as a lease; retry_after_ms
    // held the lease's stamp, no wait, and what this client holds still remains for it.
    const AcquireRequest& request = p.resend.request();
    if (config_.observer != nullptr) {
      config_.observer->on_leased(request, answer, kept_started_ns(p), health_);
    }
    if (answer.status == protocol::ItemStatus::kAllowed) {
      out->retry_after_ms = 0;
      if (answer.granted > request.cost) out->remaining += answer.granted - request.cost;
    }
  }
  return Outcome::kDecided;
}

void NodeConnection::take_all_pending_locked(std::vector<Pending>& failed) {
  for (Pending& p : table_) {
    if (!p.active) continue;
    failed.push_back(std::move(p));
    p.active = false;
    p.sink = nullptr;
  }
  early_ = 0;
  config_.in_flight_limit->give_back(in_flight_.exchange(0));
}

void NodeConnection::remove_locked(Pending& p) {
  p.active = false;
  p.sink = nullptr;
  if (p.early) --early_;
  --in_flight_;
  config_.in_flight_limit->give_back(1);
}

void NodeConnection::expire_early_locked(std::uint64_t now_ns, std::vector<Pending>& failed) {
  const std::uint32_t end = next_issued_id_locked();
  for (std::uint32_t id = oldest_id_; early_ > 0 && id != end; id = id_after(id)) {
    Pending& p = table_[id & mask_];
    if (!p.active || p.id != id || !p.early || p.deadline_ns > now_ns) continue;
    // A frame still queued waits for the walk from the front (which withdraws it), or until
    // it is sent: out_ is only ever cut at its front.
    if (unsent_locked(id)) continue;
    failed.push_back(std::move(p));
    remove_locked(p);
  }
}

std::vector<NodeConnection::Pending> NodeConnection::detach_failed() {
  std::vector<Pending> failed;
  failed.swap(failed_);
  return failed;
}

void NodeConnection::complete_failed(std::vector<Pending>& failed, const Status& why) {
  for (Pending& p : failed) complete(p, nullptr, why);
  failed.clear();
  keep_failed_buffer(failed);
}

void NodeConnection::keep_failed_buffer(std::vector<Pending>& failed) {
  // A nested failure path may have put a buffer back meanwhile: keep the bigger one.
  if (failed.capacity() > failed_.capacity()) failed_.swap(failed);
}

void NodeConnection::fail_connection(const Status& why) {
  ++epoch_;
  boost::system::error_code ignored;
  socket_.close(ignored);
  connect_deadline_ns_ = 0;
  std::vector<Pending> failed = detach_failed();
  std::uint32_t oldest = 0;
  bool closing = false;
  {
    std::lock_guard lock(mu_);
    oldest = oldest_id_;
    if (state_ != State::kClosed) {
      if (state_ == State::kReady) {
        // A connection that worked: the next call reconnects at once.
        backoff_ns_ = 0;
        next_attempt_ns_ = 0;
      } else {
        backoff_ns_ = backoff_ns_ == 0 ? kFirstBackoffNs : std::min(backoff_ns_ * 2, kMaxBackoffNs);
        next_attempt_ns_ = monotonic_now_ns() + backoff_ns_;
      }
      state_ = State::kDisconnected;
    }
    closing = state_ == State::kClosed;
    last_error_ = why;
    ++attempts_finished_;
    write_in_flight_ = false;
    if (why.code() == ErrorCode::kTimeout) count_timeouts_locked();
    out_.clear();
    unsent_from_ = next_issued_id_locked();
    take_all_pending_locked(failed);
  }
  handshake_cv_.notify_all();
  // Oldest first, so callers see failures in submission order.
  std::sort(failed.begin(), failed.end(),
            [oldest](const Pending& a, const Pending& b) { return a.id - oldest < b.id - oldest; });
  complete_failed(failed, why);
  if (config_.observer != nullptr && !closing) config_.observer->on_failed(*this);
}

bool NodeConnection::expire(std::uint64_t now_ns) {
  if (connect_deadline_ns_ != 0 && now_ns >= connect_deadline_ns_) {
    // The TCP connect did not finish, or the peer accepted it but sent no HELLO reply.
    const std::string ms = std::to_string(config_.connect_timeout_ns / kNsPerMs);
    fail_connection(Status(ErrorCode::kTimeout,
                           handshaking()
                               ? "no Sluice HELLO from " + config_.name + " within " + ms + " ms"
                               : "connect to " + config_.name + " timed out after " + ms + " ms"));
    return false;
  }
  bool busy = false;
  std::vector<Pending> failed = detach_failed();
  {
    std::lock_guard lock(mu_);
    // Deadlines grow with the id and out_ holds the frames of the newest ids in id order, so
    // the expired requests still in out_ are its first `withdrawn` bytes.
    std::size_t withdrawn = 0;
    while (in_flight_ > 0) {
      Pending& p = table_[oldest_id_ & mask_];
      if (!p.active || p.id != oldest_id_) {
        ++oldest_id_;
        continue;
      }
      if (p.deadline_ns > now_ns) break;
      if (p.id == unsent_from_ && withdrawn + p.bytes <= out_.size()) {
        withdrawn += p.bytes;
        unsent_from_ = id_after(p.id);
        withdrawn_.fetch_add(1, std::memory_order_relaxed);
      }
      failed.push_back(std::move(p));
      remove_locked(p);
      ++oldest_id_;
    }
    out_.erase(out_.begin(), out_.begin() + static_cast<std::ptrdiff_t>(withdrawn));
    if (early_ > 0) expire_early_locked(now_ns, failed);
    timed_out_.fetch_add(failed.size(), std::memory_order_relaxed);
    // A write still in flight keeps the timer on even with nothing pending: a call queued
    // behind a stalled write arms nothing itself (wake_locked() waits for the write), and must
    // still time out (and be withdrawn) at its deadline.
    busy = in_flight_ > 0 || write_in_flight_ || state_ == State::kConnecting ||
           state_ == State::kHandshaking;
  }
  if (failed.empty()) {
    keep_failed_buffer(failed);
    return busy;
  }
  const Status timeout(ErrorCode::kTimeout, "no reply from " + config_.name + " within " +
                                                std::to_string(config_.timeout_ns / kNsPerMs) +
                                                " ms");
  complete_failed(failed, timeout);
  return busy;
}

void NodeConnection::count_timeouts_locked() {
  std::uint64_t unsent = 0;
  for (const Pending& p : table_) {
    if (p.active && unsent_locked(p.id)) ++unsent;
  }
  timed_out_.fetch_add(in_flight_, std::memory_order_relaxed);
  withdrawn_.fetch_add(unsent, std::memory_order_relaxed);
}

ClientCounters NodeConnection::counters() const {
  ClientCounters c;
  // Late replies first: each follows its timeout, so a snapshot under traffic still has
  // late_replies <= timed_out - withdrawn.
  c.late_replies = late_replies_.load(std::memory_order_relaxed);
  c.timed_out = timed_out_.load(std::memory_order_relaxed);
  c.withdrawn = withdrawn_.load(std::memory_order_relaxed);
  return c;
}

void NodeConnection::refuse_new() {
  std::lock_guard lock(mu_);
  state_ = State::kClosed;
}

bool NodeConnection::close_if_idle() {
  {
    std::lock_guard lock(mu_);
    if (state_ == State::kClosed) return true;
    if (in_flight_ > 0) return false;
    if (state_ == State::kDisconnected) return true;
  }
  fail_connection(Status(ErrorCode::kConnectionFailed,
                         config_.name + " was closed: its node left the cluster map"));
  return true;
}

void NodeConnection::shut_down() {
  ++epoch_;
  boost::system::error_code ignored;
  socket_.close(ignored);
  connect_deadline_ns_ = 0;
  std::vector<Pending> failed = detach_failed();
  {
    std::lock_guard lock(mu_);
    state_ = State::kClosed;
    out_.clear();
    unsent_from_ = next_issued_id_locked();
    take_all_pending_locked(failed);
  }
  handshake_cv_.notify_all();
  complete_failed(failed, Status(ErrorCode::kClosed, "client is shutting down"));
}

}  // namespace sluice::client::detail
