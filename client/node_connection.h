// Internal: NodeConnection, the client's pipelined TCP connection to one port of a node (the
// public port or a shard's).
//
// Threading: any thread may submit(); everything else runs on the client's I/O thread. The
// mutex guards the state shared by both sides (state, outgoing bytes, the pending table); the
// socket, the buffer being written, the read buffer and the epoch belong to the I/O thread.
// Replies are matched by request id; callbacks and sinks always run on the I/O thread and
// outside the mutex, so they may submit again.
#pragma once

#include "net/asio.h"  // before any other Asio header

#include <atomic>
#include <cassert>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "client/client.h"
#include "core/clock.h"
#include "net/handler_slot.h"
#include "protocol/frame.h"
#include "protocol/messages.h"

namespace sluice::client::detail {

struct NodeHealth;  // client/router.h

// Receives the outcome of a request submitted with a sink: exactly one call per submitted
// request, on the I/O thread. `reply` is never an ERROR frame (those arrive as failures).
class ReplySink {
 public:
  virtual void on_reply(std::uint32_t part, const protocol::Frame& reply) = 0;
  virtual void on_failure(std::uint32_t part, const Status& status) = 0;

 protected:
  ~ReplySink() = default;
};

// Who is told about a request's outcome: a sink (sync calls, batch parts), an acquire callback,
// or the callback of a one-item batch (which then needs no batch state, unless a cluster's call
// must go again: keep_request). For the callbacks, the rule's quota and window go into the
// Decision.
struct Completion {
  ReplySink* sink = nullptr;
  std::uint32_t part = 0;
  // When the request times out (monotonic_now_ns() clock); 0, or anything later than the
  // connection's own timeout from now, means that timeout. A re-sent item keeps its call's
  // deadline this way.
  std::uint64_t deadline_ns = 0;
  AcquireCallback* callback = nullptr;      // moved from only when submit() succeeds
  BatchCallback* batch_callback = nullptr;  // likewise
  bool probe = false;  // the request is a probe's PING: an echo counts as allowed
  std::uint32_t policy_quota = 0;
  std::uint64_t policy_window_ms = 0;
  // With keep_request: the item asks for a lease of this many units instead (ACQUIRE lease flag),
  // and a grant goes to ConnectionObserver::on_leased before the callback gets its decision.
  std::uint32_t lease_units = 0;
  // A one-item acquire (key at most ResendCopy::kKeyBytes) in a cluster or with the local layer
  // on: the connection keeps a copy; an answer of REDIRECT or UNAVAILABLE goes to
  // ConnectionObserver::on_resend_needed with the callback instead of to the callback, and any
  // other answer (or failure) through ConnectionObserver::on_decided to the callback.
  const AcquireRequest* keep_request = nullptr;
};

// The copy a pending call keeps of its request when Completion::keep_request is given. Copying one
// (a pending entry moves when it is answered) copies the key's bytes only when armed, so a call
// outside a cluster pays for the room, not for the bytes.
struct ResendCopy {
  static constexpr std::size_t kKeyBytes = 64;
  bool armed = false;
  bool peek = false;
  std::uint8_t key_size = 0;
  std::optional<FailurePolicy> failure_policy;
  std::uint32_t cost = 0;
  Rule rule;
  char key[kKeyBytes];

  static_assert(kKeyBytes <= UINT8_MAX);

  ResendCopy() = default;
  // noexcept, so that a pending entry's move stays noexcept (vectors of them move, not copy).
  ResendCopy(const ResendCopy& other) noexcept { *this = other; }
  ResendCopy& operator=(const ResendCopy& other) noexcept {
    if (this == &other) return *this;
    armed = other.armed;
    if (armed) {
      peek = other.peek;
      key_size = other.key_size;
      failure_policy = other.failure_policy;
      cost = other.cost;
      rule = other.rule;
      std::memcpy(key, other.key, key_size);
    }
    return *this;
  }

  // REQUIRES: request.key.size() <= kKeyBytes.
  void keep(const AcquireRequest& request) {
    assert(request.key.size() <= kKeyBytes);
    armed = true;
    peek = request.peek;
    key_size = static_cast<std::uint8_t>(request.key.size());
    failure_policy = request.failure_policy;
    cost = request.cost;
    rule = request.rule;
    std::memcpy(key, request.key.data(), request.key.size());
  }
  AcquireRequest request() const {
    return AcquireRequest{std::string_view(key, key_size), rule, cost, peek, failure_policy};
  }
};

// The client's bound on calls in flight (ClientOptions::max_in_flight), shared by its
// connections: a call takes a unit when it is queued and gives it back when it leaves the
// pending table (answered, timed out, failed or closed).
class InFlightLimit {
 public:
  explicit InFlightLimit(std::size_t max) : max_(max) {}
  std::size_t max() const { return max_; }
  // False, taking nothing, when max() calls are already in flight.
  bool try_take() {
    std::size_t n = count_.load(std::memory_order_relaxed);
    do {
      if (n >= max_) return false;
    } while (!count_.compare_exchange_weak(n, n + 1, std::memory_order_relaxed));
    return true;
  }
  void give_back(std::size_t n) { count_.fetch_sub(n, std::memory_order_relaxed); }

 private:
  const std::size_t max_;
  std::atomic<std::size_t> count_{0};
};

// The first protocol version with the cluster: framing version 2 (the epoch), CLUSTER, the
// REDIRECT and UNAVAILABLE statuses (docs/PROTOCOL.md, section 10).
inline constexpr std::uint8_t kFirstClusterVersion = 3;

class NodeConnection;

// What a connection tells the client about itself, on the I/O thread and outside its mutex.
class ConnectionObserver {
 public:
  // A reply's header carried `epoch`, above ConnectionConfig::epoch_floor. Called before the
  // replies read with it are completed.
  virtual void on_newer_epoch(NodeConnection& connection, std::uint64_t epoch) = 0;
  // The connection's HELLO was answered (at every connect).
  virtual void on_ready(NodeConnection& connection) = 0;
  // The connection failed (a connect refused or timed out, a connection lost): its node may be
  // down, and the map that moves its keys elsewhere may be out already.
  virtual void on_failed(NodeConnection& connection) = 0;
  // A call submitted with Completion::keep_request was answered REDIRECT or UNAVAILABLE (`answer`,
  // in a reply of epoch `reply_epoch`). The observer takes over its callback (exactly one of
  // `done` and `batch_done` is given; it is moved from) and answers it by `deadline_ns`.
  virtual void on_resend_needed(const AcquireRequest& request, std::uint64_t deadline_ns,
                                const protocol::AcquireResult& answer, std::uint64_t reply_epoch,
                                AcquireCallback* done, BatchCallback* batch_done) = 0;
  // A call submitted with Completion::keep_request is answered `result` (a decision, or why
  // there is none), just before its callback gets it: the observer may change it. It was
  // submitted at `started_ns` (monotonic_now_ns()), on a connection to the node of `health`.
  virtual void on_decided(const AcquireRequest& request, Result<Decision>& result,
                          std::uint64_t started_ns, NodeHealth* health) = 0;
  // A lease request (Completion::lease_units) for `request` was answered `answer`: ALLOWED
  // grants `answer.granted` units, stamped `answer.retry_after_ms` (the request paid its cost
  // from them); DENIED grants none. Called before the request's decision goes to on_decided and
  // the callback. `health` names the node that answered (null: none known).
  virtual void on_leased(const AcquireRequest& request, const protocol::AcquireResult& answer,
                         std::uint64_t started_ns, NodeHealth* health) = 0;

 protected:
  ~ConnectionObserver() = default;
};

struct ConnectionConfig {
  std::string name;  // "host:port", for messages
  boost::asio::ip::tcp::endpoint endpoint;
  std::uint16_t expected_shard = protocol::kPublicPort;  // what HELLO must report
  std::string client_name;
  std::string auth_token;  // sent in every HELLO; empty = none
  std::uint64_t timeout_ns = 0;
  std::uint64_t connect_timeout_ns = 0;
  InFlightLimit* in_flight_limit = nullptr;  // the client's; outlives the connection
  // The epoch every frame's header carries (framing version 2): the client's map's. Any thread.
  const std::atomic<std::uint64_t>* map_epoch = nullptr;  // the client's; never null
  // Replies with a higher epoch than this are reported to `observer` (null: to nobody).
  const std::atomic<std::uint64_t>* epoch_floor = nullptr;
  ConnectionObserver* observer = nullptr;
};

class NodeConnection {
 public:
  // `arm_timer` is called on the I/O thread whenever requests may be waiting on a deadline.
  NodeConnection(boost::asio::io_context& io, ConnectionConfig config,
                 std::function<void()> arm_timer);
  NodeConnection(const NodeConnection&) = delete;
  NodeConnection& operator=(const NodeConnection&) = delete;

  const ConnectionConfig& config() const { return config_; }
  // The breaker of the node this connection goes to (null: none), passed to on_decided. Set
  // once on the I/O side, before any call is routed to the connection.
  void set_health(NodeHealth* health) { health_ = health; }
  NodeHealth* health() const { return health_; }

  // Queues one request: `encode(out, request_id, framing)` appends exactly one frame to `out`,
  // its header in `framing` (framing_locked()). Connects
  // first when disconnected (at most once per backoff interval). A failed Status means nothing
  // was queued and nobody will be called; the caller reports it. kOverloaded when the client
  // already has max_in_flight calls in flight.
  template <typename Encode>
  Status submit(Encode&& encode, const Completion& completion) {
    std::unique_lock lock(mu_);
    if (!config_.in_flight_limit->try_take()) return overloaded();
    if (Status admitted = admit_locked(); !admitted.ok()) {
      config_.in_flight_limit->give_back(1);
      return admitted;
    }
    const std::uint32_t id = next_request_id_locked();
    const std::size_t before = out_.size();
    encode(out_, id, framing_locked());
    insert_locked(id, completion, static_cast<std::uint32_t>(out_.size() - before));
    wake_locked();
    return Status();
  }

  // The framing of the frames this connection sends: version 2 with the client's epoch once a
  // HELLO negotiated protocol 3 or later, else version 1 (an older node knows no other, and
  // before the first HELLO the node's version is unknown). REQUIRES: mu_ held.
  protocol::Framing framing_locked() const {
    if (!epoch_framing_) return protocol::Framing{};
    return protocol::Framing::with_epoch(config_.map_epoch->load(std::memory_order_relaxed));
  }

  // Starts connecting now if disconnected, ignoring the backoff (used at start-up).
  void begin_connect();
  // Starts connecting if disconnected and its backoff has passed (a connection nobody calls
  // through, e.g. while the client's map has no active node); no-op otherwise.
  void connect_when_due();
  // Whether HELLO has been answered and the connection is up.
  bool ready() const;
  // Starts connecting if disconnected and waits until HELLO is answered or the attempt fails.
  // With `run_io` the caller runs the io_context itself while waiting (a client on an external
  // io_context that nobody runs yet); otherwise the I/O thread does the work.
  Status wait_ready(std::chrono::milliseconds limit, bool run_io);
  protocol::HelloReply hello() const;
  // Calls in flight (a hint for choosing among connections; read without the mutex).
  std::size_t load() const { return in_flight_.load(std::memory_order_relaxed); }

  // I/O thread: fails requests whose deadline passed and a connect that took too long. A
  // request whose bytes are still queued (not yet handed to the socket) is withdrawn: they are
  // never sent. True while anything is pending or a connect is in progress (the timer must
  // keep running).
  bool expire(std::uint64_t now_ns);
  // Timed-out, withdrawn and late-reply counts (any thread).
  ClientCounters counters() const;
  // Any thread: refuses new requests (kClosed) and sends nothing more that is queued; what is
  // pending waits for shut_down().
  void refuse_new();
  // I/O thread: fails everything with kClosed, closes the socket and refuses new requests.
  void shut_down();
  // I/O thread: closes the socket when nothing is in flight (a node that left the cluster map);
  // the next request reconnects. True when the connection is (now) idle and closed.
  bool close_if_idle();

 private:
  enum class State : std::uint8_t { kDisconnected, kConnecting, kHandshaking, kReady, kClosed };

  struct Pending {
    std::uint32_t id = 0;
    bool active = false;
    std::uint32_t part = 0;
    std::uint64_t deadline_ns = 0;
    std::uint32_t bytes = 0;  // the frame's size in out_, for withdrawing it
    ReplySink* sink = nullptr;
    AcquireCallback callback;
    BatchCallback batch_callback;
    bool probe = false;
    bool early = false;  // its deadline is before an older request's (see early_)
    std::uint32_t policy_quota = 0;
    std::uint64_t policy_window_ms = 0;
    std::uint32_t lease_units = 0;
    ResendCopy resend;
  };
  static_assert(std::is_nothrow_move_constructible_v<Pending>);
  static_assert(std::is_nothrow_move_assignable_v<Pending>);

  static constexpr std::uint32_t kHandshakeId = 0;  // HELLO only; never in the table

  Status overloaded() const;
  bool handshaking() const;  // TCP connected, HELLO sent, no reply yet
  Status admit_locked();
  std::uint32_t next_request_id_locked();
  void insert_locked(std::uint32_t id, const Completion& completion, std::uint32_t bytes);
  // The id after `id`, skipping the handshake's; next_issued_id_locked(): the next submit's.
  static std::uint32_t id_after(std::uint32_t id) {
    return id + 1 == kHandshakeId ? id + 2 : id + 1;
  }
  std::uint32_t next_issued_id_locked() const { return id_after(next_id_ - 1); }
  // True while the request's frame is still in out_. REQUIRES: the request is pending.
  bool unsent_locked(std::uint32_t id) const { return id - unsent_from_ < next_id_ - unsent_from_; }
  void grow_table_locked();
  void wake_locked();

  // I/O thread.
  void on_wake();
  void start_connect();
  void on_connected(std::uint64_t epoch, const boost::system::error_code& ec);
  void start_write_locked(std::unique_lock<std::mutex>& lock);
  void on_written(std::uint64_t epoch, const boost::system::error_code& ec);
  void start_read();
  void on_read(std::uint64_t epoch, const boost::system::error_code& ec, std::size_t n);
  void handle_handshake(const protocol::Frame& frame);
  void fail_connection(const Status& why);
  // Moves every call in flight to `failed`. REQUIRES: mu_ held.
  void take_all_pending_locked(std::vector<Pending>& failed);
  // Takes `p` out of the table (it is answered, failed or timed out). REQUIRES: mu_ held.
  void remove_locked(Pending& p);
  // Expires the requests with an early deadline that have been sent. REQUIRES: mu_ held.
  void expire_early_locked(std::uint64_t now_ns, std::vector<Pending>& failed);
  // A connect timed out: counts its calls as timed out, and those still queued as withdrawn.
  void count_timeouts_locked();
  void complete(Pending& pending, const protocol::Frame* reply, const Status& failure);
  // The decision in a one-item ACQUIRE reply, into `out` (kDecided); or, for a call with a
  // ResendCopy answered REDIRECT or UNAVAILABLE, kHandedOver: its callback went to the observer.
  enum class Outcome : std::uint8_t { kDecided, kHandedOver };
  Outcome acquire_decision(Pending& pending, const protocol::Frame& reply, Result<Decision>& out);
  // When a call that keeps its request (Completion::keep_request) was submitted.
  std::uint64_t kept_started_ns(const Pending& pending) const;
  // The failure paths complete a list detached from failed_: a callback may close the client,
  // which fails calls again (shut_down()) while the outer list is still being walked.
  std::vector<Pending> detach_failed();
  // Completes every call in `failed` with `why`, then keeps its buffer for the next failure.
  void complete_failed(std::vector<Pending>& failed, const Status& why);
  void keep_failed_buffer(std::vector<Pending>& failed);

  boost::asio::io_context& io_;
  const ConnectionConfig config_;
  NodeHealth* health_ = nullptr;
  const std::function<void()> arm_timer_;

  mutable std::mutex mu_;
  std::condition_variable handshake_cv_;
  State state_ = State::kDisconnected;
  std::uint64_t attempts_finished_ = 0;  // connect attempts that succeeded or failed
  Status last_error_;                    // why the last connection or attempt ended
  std::uint64_t next_attempt_ns_ = 0;    // no reconnect before this (backoff)
  std::uint64_t backoff_ns_ = 0;
  // Frames queued by submit(), not yet handed to the socket: those of ids [unsent_from_,
  // next_id_), in id order, each still pending (a reply cannot precede its request; a
  // timeout withdraws its frame; a failure clears them all). Sent only once HELLO is
  // answered, so a request never reaches a peer that has not proved to be the right shard.
  protocol::Bytes out_;
  std::uint32_t unsent_from_ = 1;
  bool wake_posted_ = false;      // an on_wake() is queued
  net::HandlerSlot wake_slot_;    // wake-ups: allocated under mu_, freed on the I/O thread
  bool write_in_flight_ = false;  // an async_write is in flight
  // Pending table: a ring indexed by request id; ids are sequential, so [oldest_id_,
  // next_id_) covers everything in flight and deadlines grow with the id (one timeout for all).
  std::vector<Pending> table_;
  std::uint32_t mask_ = 0;
  std::uint32_t next_id_ = 1;
  std::uint32_t oldest_id_ = 1;
  // Deadlines grow with the id, except for requests given an earlier one (Completion::
  // deadline_ns, a re-sent item): expire() walks from the oldest id and stops at the first
  // that is not due, so while early_ > 0 it also scans the table for those. Their frames are
  // withdrawn only from the front of out_, like the others.
  std::uint64_t last_deadline_ns_ = 0;     // the latest deadline given so far
  std::size_t early_ = 0;                  // requests pending with an early deadline
  std::atomic<std::size_t> in_flight_{0};  // changed under mu_; load() reads it without
  // Written on the I/O thread, read by counters() from any thread.
  std::atomic<std::uint64_t> timed_out_{0};
  std::atomic<std::uint64_t> withdrawn_{0};
  std::atomic<std::uint64_t> late_replies_{0};
  protocol::HelloReply hello_;
  bool epoch_framing_ = false;  // the last HELLO negotiated protocol 3 or later

  // I/O thread only.
  boost::asio::ip::tcp::socket socket_;
  std::uint64_t epoch_ = 0;  // bumped per connect attempt; stale handlers compare and leave
  std::uint64_t connect_deadline_ns_ = 0;
  protocol::Bytes sending_;  // the buffer async_write is sending
  std::vector<std::uint8_t> read_buf_;
  net::HandlerSlot read_slot_;
  net::HandlerSlot write_slot_;
  std::size_t read_begin_ = 0;
  std::size_t read_end_ = 0;
  protocol::FrameDecoder decoder_;
  std::string server_error_;  // the last ERROR frame's text, for the close message
  std::vector<std::pair<Pending, protocol::Frame>> ready_;  // replies matched in one read
  std::vector<Pending> failed_;  // a spare buffer, empty while a failure path holds it
  std::vector<protocol::AcquireResult> results_;
};

// The client's per-call wire work, shared by the calls and bench/client_bench.cpp: appends one
// ACQUIRE frame of one item to `out`.
// `lease_units` != 0: the item asks for a lease of that many units (ACQUIRE's lease flag).
void encode_acquire(protocol::Bytes& out, std::uint32_t request_id, const AcquireRequest& request,
                    const protocol::Framing& framing = {}, std::uint32_t lease_units = 0);

// The one item of a one-item ACQUIRE reply, parsed into `scratch`; nullptr for any other frame.
// The connection's decode path and decision_from_reply() both take replies apart with it.
const protocol::AcquireResult* one_acquire_result(const protocol::Frame& reply,
                                                  std::vector<protocol::AcquireResult>& scratch);

// The decision in a one-item ACQUIRE reply (an ERROR frame's status for an ERROR frame).
// `scratch` is reused between calls.
Result<Decision> decision_from_reply(const protocol::Frame& reply,
                                     std::vector<protocol::AcquireResult>& scratch,
                                     std::uint32_t policy_quota, std::uint64_t policy_window_ms);

// What a probe reports for one item of an echoed PING: allowed, every other field zero.
Result<Decision> probe_echo(const protocol::Frame& reply);

// Maps one acquire reply item to the client's result.
Result<Decision> to_decision(const protocol::AcquireResult& result, std::uint32_t policy_quota,
                             std::uint64_t policy_window_ms);

// A Status for an ERROR frame's body.
Status server_error_status(std::span<const std::uint8_t> body);

// kProtocolError: "unexpected reply to WHAT".
Status unexpected_reply(std::string_view what);

}  // namespace sluice::client::detail
