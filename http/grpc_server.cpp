#include "http/grpc_server.h"

#include "net/asio.h"  // before any other Asio header

#include <fmt/core.h>
#include <nghttp2/nghttp2.h>

#include <algorithm>
#include <array>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/strand.hpp>
#include <cstring>
#include <limits>
#include <mutex>
#include <optional>
#include <system_error>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "log/log.h"
#include "net/handler_slot.h"

namespace sluice::http {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;
using Clock = std::chrono::steady_clock;
using net::in_slot;

namespace {

constexpr std::size_t kPrefixBytes = 5;  // a gRPC message's compressed flag and length

std::string_view view(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

nghttp2_nv field(std::string_view name, std::string_view value) {
  // nghttp2 copies both (no NO_COPY flag): the strings need only live during the submit.
  return nghttp2_nv{reinterpret_cast<std::uint8_t*>(const_cast<char*>(name.data())),
                    reinterpret_cast<std::uint8_t*>(const_cast<char*>(value.data())), name.size(),
                    value.size(), NGHTTP2_NV_FLAG_NONE};
}

bool is_grpc_content_type(std::string_view type) {
  constexpr std::string_view kGrpc = "application/grpc";
  if (type.substr(0, kGrpc.size()) != kGrpc) return false;
  return type.size() == kGrpc.size() || type[kGrpc.size()] == '+' || type[kGrpc.size()] == ';';
}

}  // namespace

std::optional<std::chrono::nanoseconds> parse_grpc_timeout(std::string_view value) {
  if (value.size() < 2 || value.size() > 9) return std::nullopt;
  std::int64_t amount = 0;
  for (const char c : value.substr(0, value.size() - 1)) {
    if (c < '0' || c > '9') return std::nullopt;
    amount = amount * 10 + (c - '0');
  }
  using namespace std::chrono;
  switch (value.back()) {
    case 'H':
      return duration_cast<nanoseconds>(hours(amount));
    case 'M':
      return duration_cast<nanoseconds>(minutes(amount));
    case 'S':
      return duration_cast<nanoseconds>(seconds(amount));
    case 'm':
      return duration_cast<nanoseconds>(milliseconds(amount));
    case 'u':
      return duration_cast<nanoseconds>(microseconds(amount));
    case 'n':
      return nanoseconds(amount);
    default:
      return std::nullopt;
  }
}

std::string grpc_percent_encode(std::string_view message) {
  std::string out;
  out.reserve(message.size());
  for (const char c : message) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte <= 0x7E && byte != '%') {
      out += c;
    } else {
      out += fmt::format("%{:02X}", byte);
    }
  }
  return out;
}

namespace detail {

struct GrpcServerState {
  GrpcServerState(asio::io_context& io, GrpcLimits limits)
      : io(io), limits(limits), acceptor(asio::make_strand(io)) {}

  asio::io_context& io;
  const GrpcLimits limits;
  std::unordered_map<std::string, GrpcHandler> methods;  // set before start()
  tcp::acceptor acceptor;                                // on its own strand

  std::atomic<std::uint64_t> calls{0};
  std::atomic<std::uint64_t> refused_calls{0};
  std::atomic<std::uint64_t> connections_total{0};
  std::atomic<std::uint64_t> connections_open{0};
  std::atomic<std::uint64_t> connections_refused{0};
  std::atomic<std::uint64_t> protocol_errors{0};
  std::atomic<std::uint64_t> idle_timeouts{0};

  // The open connections, and who waits for them to close (stop()).
  std::mutex mutex;
  bool stopping = false;                            // under mutex
  std::chrono::milliseconds grace{0};               // under mutex
  std::unordered_set<GrpcConnection*> connections;  // under mutex
  std::vector<std::function<void()>> stopped;       // under mutex: run when connections empty

  // Under mutex, with connections empty and stopping: every waiter runs on the io_context.
  void release_waiters() {
    for (auto& waiter : stopped) {
      if (waiter) asio::post(io, std::move(waiter));
    }
    stopped.clear();
  }
};

// One HTTP/2 connection, on its own strand: nghttp2's server session fed from the socket, its
// output written back, and the calls it carries.
class GrpcConnection : public std::enable_shared_from_this<GrpcConnection> {
 public:
  GrpcConnection(std::shared_ptr<GrpcServerState> state, tcp::socket socket)
      : state_(std::move(state)),
        executor_(socket.get_executor()),
        socket_(std::move(socket)),
        watchdog_(executor_) {}

  ~GrpcConnection() {
    unregister();
    if (session_ != nullptr) nghttp2_session_del(session_);
  }

  // On the strand, once.
  void start(bool stopping, std::chrono::milliseconds grace) {
    nghttp2_session_callbacks* callbacks = nullptr;
    nghttp2_option* option = nullptr;
    if (nghttp2_session_callbacks_new(&callbacks) != 0 || nghttp2_option_new(&option) != 0) {
      throw std::bad_alloc();
    }
    nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks, &on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(callbacks, &on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, &on_data_chunk);
    nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, &on_frame_recv);
    nghttp2_session_callbacks_set_on_frame_send_callback(callbacks, &on_frame_send);
    nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, &on_stream_close);
    const int made = nghttp2_session_server_new2(&session_, callbacks, this, option);
    nghttp2_option_del(option);
    nghttp2_session_callbacks_del(callbacks);
    if (made != 0) throw std::bad_alloc();
    const std::array<nghttp2_settings_entry, 2> settings{{
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, state_->limits.max_streams},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE,
         static_cast<std::uint32_t>(std::min<std::size_t>(
             state_->limits.max_header_bytes, std::numeric_limits<std::uint32_t>::max()))},
    }};
    nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings.data(), settings.size());
    last_read_ = Clock::now();
    arm_watchdog();
    if (stopping) go_away(grace);
    read();
    flush();
  }

  // Any thread: the answer of call `stream` (OK with a message, or a status and message).
  void deliver(std::int32_t stream, GrpcCode code, std::string text) {
    asio::dispatch(executor_,
                   [self = shared_from_this(), stream, code, text = std::move(text)]() mutable {
                     self->respond(stream, code, std::move(text));
                     self->flush();
                   });
  }

  // On the strand: GOAWAY now, closed once its calls are answered, or at `grace`.
  void go_away(std::chrono::milliseconds grace) {
    if (closed_ || going_away_) return;
    going_away_ = true;
    nghttp2_submit_goaway(session_, NGHTTP2_FLAG_NONE,
                          nghttp2_session_get_last_proc_stream_id(session_), NGHTTP2_NO_ERROR,
                          nullptr, 0);
    hard_deadline_ = Clock::now() + grace;
    watchdog_.cancel();  // re-armed with the hard deadline
    flush();
  }

  const asio::any_io_executor& executor() const { return executor_; }

 private:
  // What a request stream has said so far, and the answer being sent on it.
  struct Stream {
    const GrpcHandler* handler = nullptr;
    std::string path;
    std::string body;  // prefix and message, as received
    Clock::time_point deadline = Clock::time_point::max();
    std::size_t header_bytes = 0;
    bool post = false;
    bool grpc_type = false;
    bool bad_timeout = false;
    bool request_ended = false;    // the client's END_STREAM came
    bool answered = false;         // a response was submitted (or the server refused the call)
    std::array<char, 5> prefix{};  // an OK answer: its prefix, then its message
    std::string out;
    std::size_t sent = 0;  // of prefix and message
  };

  static GrpcConnection& self(void* user_data) { return *static_cast<GrpcConnection*>(user_data); }

  Stream* find(std::int32_t id) {
    auto it = streams_.find(id);
    return it == streams_.end() ? nullptr : &it->second;
  }

  // ---- nghttp2's callbacks (inside nghttp2_session_mem_recv / mem_send, on the strand) ----

  static int on_begin_headers(nghttp2_session*, const nghttp2_frame* frame, void* user_data) {
    if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
      self(user_data).streams_.try_emplace(frame->hd.stream_id);
    }
    return 0;
  }

  static int on_header(nghttp2_session*, const nghttp2_frame* frame, const std::uint8_t* name,
                       std::size_t name_length, const std::uint8_t* value, std::size_t value_length,
                       std::uint8_t, void* user_data) {
    GrpcConnection& c = self(user_data);
    Stream* s = c.find(frame->hd.stream_id);
    if (s == nullptr) return 0;
    s->header_bytes += name_length + value_length + 32;
    if (s->header_bytes > c.state_->limits.max_header_bytes) {
      return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;  // the stream is reset
    }
    if (frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;  // trailers: nothing we read
    const std::string_view n = view(name, name_length);
    const std::string_view v = view(value, value_length);
    if (n == ":method") {
      s->post = v == "POST";
    } else if (n == ":path") {
      s->path = v;
    } else if (n == "content-type") {
      s->grpc_type = is_grpc_content_type(v);
    } else if (n == "grpc-timeout") {
      const auto timeout = parse_grpc_timeout(v);
      if (timeout) {
        s->deadline = Clock::now() + *timeout;
      } else {
        s->bad_timeout = true;
      }
    }
    return 0;
  }

  static int on_data_chunk(nghttp2_session*, std::uint8_t, std::int32_t stream_id,
                           const std::uint8_t* data, std::size_t length, void* user_data) {
    GrpcConnection& c = self(user_data);
    Stream* s = c.find(stream_id);
    if (s == nullptr || s->answered) return 0;
    if (s->body.size() + length > kPrefixBytes + c.state_->limits.max_message_bytes) {
      c.refuse(
          stream_id, *s, GrpcCode::kResourceExhausted,
          fmt::format("request message larger than {} bytes", c.state_->limits.max_message_bytes));
      return 0;
    }
    s->body.append(reinterpret_cast<const char*>(data), length);
    return 0;
  }

  static int on_frame_recv(nghttp2_session*, const nghttp2_frame* frame, void* user_data) {
    GrpcConnection& c = self(user_data);
    if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA) return 0;
    Stream* s = c.find(frame->hd.stream_id);
    if (s == nullptr) return 0;
    if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
      c.check_request(frame->hd.stream_id, *s);  // refuses at once what cannot be a call
    }
    if ((frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0) {
      s->request_ended = true;
      if (!s->answered) c.ready_.push_back(frame->hd.stream_id);
    }
    return 0;
  }

  static int on_frame_send(nghttp2_session* session, const nghttp2_frame* frame, void* user_data) {
    // Our answer ended the stream before the client ended its request (a refusal): the rest of
    // the request is not wanted.
    if ((frame->hd.type == NGHTTP2_HEADERS || frame->hd.type == NGHTTP2_DATA) &&
        (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0) {
      Stream* s = self(user_data).find(frame->hd.stream_id);
      if (s != nullptr && !s->request_ended) {
        nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, frame->hd.stream_id,
                                  NGHTTP2_NO_ERROR);
      }
    }
    return 0;
  }

  static int on_stream_close(nghttp2_session*, std::int32_t stream_id, std::uint32_t,
                             void* user_data) {
    self(user_data).streams_.erase(stream_id);
    return 0;
  }

  static ssize_t read_answer(nghttp2_session* session, std::int32_t stream_id, std::uint8_t* buf,
                             std::size_t length, std::uint32_t* data_flags, nghttp2_data_source*,
                             void* user_data) {
    Stream* s = self(user_data).find(stream_id);
    if (s == nullptr) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    const std::size_t total = kPrefixBytes + s->out.size();
    const std::size_t n = std::min(length, total - s->sent);
    std::size_t done = 0;
    if (s->sent < kPrefixBytes) {
      done = std::min(n, kPrefixBytes - s->sent);
      std::memcpy(buf, s->prefix.data() + s->sent, done);
    }
    if (done < n)
      std::memcpy(buf + done, s->out.data() + (s->sent + done - kPrefixBytes), n - done);
    s->sent += n;
    if (s->sent == total) {
      *data_flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
      const std::array<nghttp2_nv, 1> trailers{field("grpc-status", "0")};
      nghttp2_submit_trailer(session, stream_id, trailers.data(), trailers.size());
      std::string().swap(s->out);
    }
    return static_cast<ssize_t>(n);
  }

  // ---- calls ----

  // The request's headers are in: what is not a call of ours is refused now.
  void check_request(std::int32_t id, Stream& s) {
    if (s.answered) return;
    if (!s.post) return refuse_http(id, s, "405");
    if (!s.grpc_type) return refuse_http(id, s, "415");
    if (s.bad_timeout) return refuse(id, s, GrpcCode::kInternal, "malformed grpc-timeout");
    const auto method = state_->methods.find(s.path);
    if (method == state_->methods.end()) {
      return refuse(id, s, GrpcCode::kUnimplemented, "unknown method " + s.path);
    }
    s.handler = &method->second;
  }

  // The request has ended: one whole uncompressed message goes to its handler.
  void dispatch_call(std::int32_t id) {
    Stream* s = find(id);
    if (s == nullptr || s->answered || s->handler == nullptr) return;
    const std::string& body = s->body;
    if (body.size() < kPrefixBytes) {
      return refuse(id, *s, GrpcCode::kInternal, "the request has no whole message");
    }
    const auto b = [&](std::size_t i) { return static_cast<std::uint8_t>(body[i]); };
    const std::size_t length = (std::size_t{b(1)} << 24) | (std::size_t{b(2)} << 16) |
                               (std::size_t{b(3)} << 8) | std::size_t{b(4)};
    if (b(0) > 1 || body.size() != kPrefixBytes + length) {
      return refuse(id, *s, GrpcCode::kInternal, "the request is not one whole message");
    }
    if (b(0) == 1) {
      return refuse(id, *s, GrpcCode::kUnimplemented,
                    "compressed messages are not accepted (grpc-accept-encoding: identity)");
    }
    s->body.erase(0, kPrefixBytes);
    std::string message = std::move(s->body);
    const GrpcHandler& handler = *s->handler;
    const Clock::time_point deadline = s->deadline;
    s->handler = nullptr;  // handed over: the answer comes through respond()
    state_->calls.fetch_add(1, std::memory_order_relaxed);
    handler(GrpcCall(shared_from_this(), id, std::move(message), deadline));
  }

  void refuse(std::int32_t id, Stream& s, GrpcCode code, std::string_view message) {
    state_->refused_calls.fetch_add(1, std::memory_order_relaxed);
    s.handler = nullptr;
    respond_status(id, s, code, grpc_percent_encode(message));
  }

  void refuse_http(std::int32_t id, Stream& s, std::string_view status) {
    state_->refused_calls.fetch_add(1, std::memory_order_relaxed);
    s.handler = nullptr;
    s.answered = true;
    const std::array<nghttp2_nv, 1> headers{field(":status", status)};
    nghttp2_submit_response(session_, id, headers.data(), headers.size(), nullptr);
  }

  // Trailers-only: the status in the one HEADERS frame that ends the stream.
  void respond_status(std::int32_t id, Stream& s, GrpcCode code, const std::string& encoded) {
    s.answered = true;
    const std::string number = std::to_string(static_cast<int>(code));
    const std::array<nghttp2_nv, 4> headers{
        field(":status", "200"), field("content-type", "application/grpc"),
        field("grpc-status", number), field("grpc-message", encoded)};
    nghttp2_submit_response(session_, id, headers.data(), encoded.empty() ? 3 : 4, nullptr);
  }

  // On the strand: a handler's answer.
  void respond(std::int32_t id, GrpcCode code, std::string text) {
    if (closed_) return;
    Stream* s = find(id);
    if (s == nullptr || s->answered) return;  // reset by the client, or answered
    if (code != GrpcCode::kOk) return respond_status(id, *s, code, text);
    s->answered = true;
    const auto length = static_cast<std::uint32_t>(text.size());
    s->prefix = {0, static_cast<char>(length >> 24), static_cast<char>(length >> 16),
                 static_cast<char>(length >> 8), static_cast<char>(length)};
    s->out = std::move(text);
    const std::array<nghttp2_nv, 2> headers{field(":status", "200"),
                                            field("content-type", "application/grpc")};
    nghttp2_data_provider data{};
    data.read_callback = &read_answer;
    nghttp2_submit_response(session_, id, headers.data(), headers.size(), &data);
  }

  // ---- the socket ----

  void read() {
    socket_.async_read_some(
        asio::buffer(input_),
        in_slot(read_slot_, [self = shared_from_this()](const error_code& ec, std::size_t n) {
          self->on_read(ec, n);
        }));
  }

  void on_read(const error_code& ec, std::size_t n) {
    if (closed_) return;
    if (ec) return close();
    last_read_ = Clock::now();
    const ssize_t used = nghttp2_session_mem_recv(session_, input_.data(), n);
    if (used < 0) {
      // Not HTTP/2, or against its rules: nghttp2 has queued its GOAWAY; the connection ends
      // once that is written.
      state_->protocol_errors.fetch_add(1, std::memory_order_relaxed);
      log::warning("grpc",
                   fmt::format("connection ended: {}", nghttp2_strerror(static_cast<int>(used))));
      broken_ = true;
      flush();
      return;
    }
    dispatching_.swap(ready_);
    for (const std::int32_t id : dispatching_) dispatch_call(id);
    dispatching_.clear();
    flush();
    if (!closed_ && nghttp2_session_want_read(session_) != 0) read();
  }

  // Writes what nghttp2 has to send; one write at a time, the rest gathered meanwhile.
  void flush() {
    if (closed_ || writing_) return;
    output_.clear();
    for (;;) {
      const std::uint8_t* data = nullptr;
      const ssize_t n = nghttp2_session_mem_send(session_, &data);
      if (n < 0) {
        broken_ = true;
        break;
      }
      if (n == 0) break;
      output_.insert(output_.end(), data, data + n);
    }
    if (output_.empty()) {
      if (broken_ ||
          (nghttp2_session_want_read(session_) == 0 && nghttp2_session_want_write(session_) == 0)) {
        close();
      }
      return;
    }
    writing_ = true;
    write_started_ = Clock::now();
    asio::async_write(
        socket_, asio::buffer(output_),
        in_slot(write_slot_, [self = shared_from_this()](const error_code& ec, std::size_t) {
          self->writing_ = false;
          if (ec) return self->close();
          self->flush();
        }));
  }

  void arm_watchdog() {
    // Idle: from the last read, while no call is open; with one open, looked at again later.
    const auto idle = state_->limits.idle_timeout;
    Clock::time_point at = hard_deadline_;
    if (!going_away_) at = streams_.empty() ? last_read_ + idle : Clock::now() + idle;
    if (writing_) at = std::min(at, write_started_ + idle);
    watchdog_.expires_at(at);
    watchdog_.async_wait(in_slot(
        watch_slot_, [self = shared_from_this()](const error_code&) { self->on_watchdog(); }));
  }

  void on_watchdog() {
    if (closed_) return;
    const auto now = Clock::now();
    const auto idle = state_->limits.idle_timeout;
    if (going_away_ && now >= hard_deadline_) return close();
    if (writing_ && now - write_started_ >= idle) {
      state_->idle_timeouts.fetch_add(1, std::memory_order_relaxed);
      return close();
    }
    if (!going_away_ && streams_.empty() && now - last_read_ >= idle) {
      // GOAWAY, and a second to write it before the socket is closed.
      state_->idle_timeouts.fetch_add(1, std::memory_order_relaxed);
      go_away(std::chrono::milliseconds(1000));
    }
    arm_watchdog();
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
    watchdog_.cancel();
    unregister();  // closed: a call still held elsewhere keeps only the object
  }

  // Off the server's list (once): stop()'s waiters run when the list is empty.
  void unregister() {
    std::lock_guard lock(state_->mutex);
    if (state_->connections.erase(this) == 0) return;
    state_->connections_open.fetch_sub(1, std::memory_order_relaxed);
    if (state_->stopping && state_->connections.empty()) state_->release_waiters();
  }

  std::shared_ptr<GrpcServerState> state_;
  asio::any_io_executor executor_;
  tcp::socket socket_;
  asio::steady_timer watchdog_;
  nghttp2_session* session_ = nullptr;
  std::unordered_map<std::int32_t, Stream> streams_;
  std::vector<std::int32_t> ready_;        // requests ended during one mem_recv
  std::vector<std::int32_t> dispatching_;  // ready_'s, being handed to their handlers
  std::array<std::uint8_t, 16 * 1024> input_{};
  std::vector<std::uint8_t> output_;
  Clock::time_point last_read_{};
  Clock::time_point write_started_{};
  Clock::time_point hard_deadline_ = Clock::time_point::max();
  bool writing_ = false;
  bool going_away_ = false;
  bool broken_ = false;
  bool closed_ = false;
  net::HandlerSlot read_slot_;
  net::HandlerSlot write_slot_;
  net::HandlerSlot watch_slot_;
};

}  // namespace detail

// ---- GrpcCall ---------------------------------------------------------------------------------

GrpcCall::GrpcCall(std::shared_ptr<detail::GrpcConnection> connection, std::int32_t stream,
                   std::string message, std::chrono::steady_clock::time_point deadline)
    : connection_(std::move(connection)),
      stream_(stream),
      message_(std::move(message)),
      deadline_(deadline) {}

GrpcCall& GrpcCall::operator=(GrpcCall&& other) noexcept {
  if (this != &other) {
    if (connection_) fail(GrpcCode::kInternal, "the server did not answer the call");
    connection_ = std::move(other.connection_);
    stream_ = other.stream_;
    message_ = std::move(other.message_);
    deadline_ = other.deadline_;
  }
  return *this;
}

GrpcCall::~GrpcCall() {
  if (connection_) fail(GrpcCode::kInternal, "the server did not answer the call");
}

void GrpcCall::answer(std::string reply) {
  if (!connection_) return;
  auto connection = std::move(connection_);
  connection->deliver(stream_, GrpcCode::kOk, std::move(reply));
}

void GrpcCall::fail(GrpcCode code, std::string_view message) {
  if (!connection_) return;
  auto connection = std::move(connection_);
  connection->deliver(stream_, code == GrpcCode::kOk ? GrpcCode::kUnknown : code,
                      grpc_percent_encode(message));
}

// ---- GrpcServer -------------------------------------------------------------------------------

namespace {

void accept_next(const std::shared_ptr<detail::GrpcServerState>& state) {
  state->acceptor.async_accept(
      asio::make_strand(state->io), [state](const error_code& ec, tcp::socket socket) {
        if (ec == asio::error::operation_aborted || !state->acceptor.is_open()) return;
        if (!ec) {
          bool stopping = false;
          std::chrono::milliseconds grace{0};
          std::shared_ptr<detail::GrpcConnection> connection;
          {
            std::lock_guard lock(state->mutex);
            stopping = state->stopping;
            grace = state->grace;
            if (state->connections.size() >= state->limits.max_connections) {
              state->connections_refused.fetch_add(1, std::memory_order_relaxed);
              error_code ignored;
              socket.close(ignored);
            } else {
              error_code ignored;
              socket.set_option(tcp::no_delay(true), ignored);
              connection = std::make_shared<detail::GrpcConnection>(state, std::move(socket));
              state->connections.insert(connection.get());
              state->connections_open.fetch_add(1, std::memory_order_relaxed);
              state->connections_total.fetch_add(1, std::memory_order_relaxed);
            }
          }
          if (connection) {
            asio::dispatch(connection->executor(),
                           [connection, stopping, grace] { connection->start(stopping, grace); });
          }
        }
        accept_next(state);
      });
}

}  // namespace

GrpcServer::GrpcServer(asio::io_context& io, GrpcLimits limits)
    : state_(std::make_shared<detail::GrpcServerState>(io, limits)) {}

GrpcServer::~GrpcServer() { stop(std::chrono::milliseconds(0)); }

void GrpcServer::add_method(std::string path, GrpcHandler handler) {
  state_->methods[std::move(path)] = std::move(handler);
}

void GrpcServer::start(const std::string& host, std::uint16_t port) {
  const tcp::endpoint endpoint(asio::ip::make_address(host), port);
  state_->acceptor.open(endpoint.protocol());
  state_->acceptor.set_option(tcp::acceptor::reuse_address(true));
  state_->acceptor.bind(endpoint);
  state_->acceptor.listen(asio::socket_base::max_listen_connections);
  port_ = state_->acceptor.local_endpoint().port();
  accept_next(state_);
}

void GrpcServer::stop(std::chrono::milliseconds grace, std::function<void()> stopped) {
  auto state = state_;
  std::vector<std::shared_ptr<detail::GrpcConnection>> open;
  {
    std::lock_guard lock(state->mutex);
    state->stopped.push_back(std::move(stopped));
    if (!state->stopping) {
      state->stopping = true;
      state->grace = grace;
      for (detail::GrpcConnection* c : state->connections) {
        // A connection being destroyed is still listed until its destructor takes the lock.
        auto held = c->weak_from_this().lock();
        if (held) open.push_back(std::move(held));
      }
    }
    if (state->connections.empty()) state->release_waiters();
  }
  asio::dispatch(state->acceptor.get_executor(), [state] {
    error_code ignored;
    state->acceptor.close(ignored);
  });
  for (auto& c : open) {
    asio::dispatch(c->executor(), [c, grace] { c->go_away(grace); });
  }
}

GrpcCounters GrpcServer::counters() const {
  const auto get = [](const std::atomic<std::uint64_t>& a) {
    return a.load(std::memory_order_relaxed);
  };
  return GrpcCounters{get(state_->calls),
                      get(state_->refused_calls),
                      get(state_->connections_total),
                      get(state_->connections_open),
                      get(state_->connections_refused),
                      get(state_->protocol_errors),
                      get(state_->idle_timeouts)};
}

const GrpcLimits& GrpcServer::limits() const { return state_->limits; }

}  // namespace sluice::http
