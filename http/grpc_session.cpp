#include "http/grpc_session.h"

#include <fmt/core.h>
#include <nghttp2/nghttp2.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <new>
#include <utility>

namespace sluice::http {

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

// ---- GrpcCall ---------------------------------------------------------------------------------

GrpcCall::GrpcCall(std::shared_ptr<detail::CallTarget> target, std::int32_t stream,
                   std::string message, std::chrono::steady_clock::time_point deadline)
    : target_(std::move(target)),
      stream_(stream),
      message_(std::move(message)),
      deadline_(deadline) {}

GrpcCall& GrpcCall::operator=(GrpcCall&& other) noexcept {
  if (this != &other) {
    if (target_) fail(GrpcCode::kInternal, "the server did not answer the call");
    target_ = std::move(other.target_);
    stream_ = other.stream_;
    message_ = std::move(other.message_);
    deadline_ = other.deadline_;
  }
  return *this;
}

GrpcCall::~GrpcCall() {
  if (target_) fail(GrpcCode::kInternal, "the server did not answer the call");
}

void GrpcCall::answer(std::string reply) {
  if (!target_) return;
  auto target = std::move(target_);
  target->deliver(stream_, GrpcCode::kOk, std::move(reply));
}

void GrpcCall::fail(GrpcCode code, std::string_view message) {
  if (!target_) return;
  auto target = std::move(target_);
  target->deliver(stream_, code == GrpcCode::kOk ? GrpcCode::kUnknown : code, std::string(message));
}

namespace detail {

using Clock = std::chrono::steady_clock;

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

// nghttp2's callbacks, called inside nghttp2_session_mem_recv and mem_send.
struct GrpcSession::Callbacks {
  static GrpcSession& self(void* user_data) { return *static_cast<GrpcSession*>(user_data); }

  static int on_begin_headers(nghttp2_session*, const nghttp2_frame* frame, void* user_data) {
    if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
      self(user_data).streams_.try_emplace(frame->hd.stream_id);
    }
    return 0;
  }

  static int on_header(nghttp2_session*, const nghttp2_frame* frame, const std::uint8_t* name,
                       std::size_t name_length, const std::uint8_t* value, std::size_t value_length,
                       std::uint8_t, void* user_data) {
    GrpcSession& g = self(user_data);
    Stream* s = g.find(frame->hd.stream_id);
    if (s == nullptr) return 0;
    s->header_bytes += name_length + value_length + 32;
    if (s->header_bytes > g.limits_.max_header_bytes) {
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
    GrpcSession& g = self(user_data);
    Stream* s = g.find(stream_id);
    if (s == nullptr || s->answered) return 0;
    if (s->body.size() + length > kPrefixBytes + g.limits_.max_message_bytes) {
      g.refuse(stream_id, *s, GrpcCode::kResourceExhausted,
               fmt::format("request message larger than {} bytes", g.limits_.max_message_bytes));
      return 0;
    }
    s->body.append(reinterpret_cast<const char*>(data), length);
    return 0;
  }

  static int on_frame_recv(nghttp2_session*, const nghttp2_frame* frame, void* user_data) {
    GrpcSession& g = self(user_data);
    if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA) return 0;
    Stream* s = g.find(frame->hd.stream_id);
    if (s == nullptr) return 0;
    if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
      g.check_request(frame->hd.stream_id, *s);  // refuses at once what cannot be a call
    }
    if ((frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0) {
      s->request_ended = true;
      if (!s->answered) g.ready_.push_back(frame->hd.stream_id);
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

  // An OK answer's DATA: its prefix, then its message; then the trailers.
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
    if (done < n) {
      std::memcpy(buf + done, s->out.data() + (s->sent + done - kPrefixBytes), n - done);
    }
    s->sent += n;
    if (s->sent == total) {
      *data_flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
      const std::array<nghttp2_nv, 1> trailers{field("grpc-status", "0")};
      nghttp2_submit_trailer(session, stream_id, trailers.data(), trailers.size());
      std::string().swap(s->out);
    }
    return static_cast<ssize_t>(n);
  }
};

GrpcSession::GrpcSession(const GrpcLimits& limits, const MethodTable& methods,
                         SessionCounters counters, CallSink sink)
    : limits_(limits), methods_(methods), counters_(counters), sink_(std::move(sink)) {
  nghttp2_session_callbacks* callbacks = nullptr;
  if (nghttp2_session_callbacks_new(&callbacks) != 0) throw std::bad_alloc();
  nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks, &Callbacks::on_begin_headers);
  nghttp2_session_callbacks_set_on_header_callback(callbacks, &Callbacks::on_header);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, &Callbacks::on_data_chunk);
  nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, &Callbacks::on_frame_recv);
  nghttp2_session_callbacks_set_on_frame_send_callback(callbacks, &Callbacks::on_frame_send);
  nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, &Callbacks::on_stream_close);
  const int made = nghttp2_session_server_new(&session_, callbacks, this);
  nghttp2_session_callbacks_del(callbacks);
  if (made != 0) throw std::bad_alloc();
  const std::array<nghttp2_settings_entry, 2> settings{{
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, limits_.max_streams},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE,
       static_cast<std::uint32_t>(std::min<std::size_t>(
           limits_.max_header_bytes, std::numeric_limits<std::uint32_t>::max()))},
  }};
  nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings.data(), settings.size());
}

GrpcSession::~GrpcSession() { nghttp2_session_del(session_); }

GrpcSession::Stream* GrpcSession::find(std::int32_t id) {
  auto it = streams_.find(id);
  return it == streams_.end() ? nullptr : &it->second;
}

bool GrpcSession::receive(const std::uint8_t* data, std::size_t size) {
  const ssize_t used = nghttp2_session_mem_recv(session_, data, size);
  if (used < 0) {
    error_ = nghttp2_strerror(static_cast<int>(used));
    return false;
  }
  dispatching_.swap(ready_);
  for (const std::int32_t id : dispatching_) dispatch_call(id);
  dispatching_.clear();
  return true;
}

bool GrpcSession::take_output(std::vector<std::uint8_t>& out) {
  for (;;) {
    const std::uint8_t* data = nullptr;
    const ssize_t n = nghttp2_session_mem_send(session_, &data);
    if (n < 0) {
      error_ = nghttp2_strerror(static_cast<int>(n));
      return false;
    }
    if (n == 0) return true;
    out.insert(out.end(), data, data + n);
  }
}

void GrpcSession::go_away() {
  nghttp2_submit_goaway(session_, NGHTTP2_FLAG_NONE,
                        nghttp2_session_get_last_proc_stream_id(session_), NGHTTP2_NO_ERROR,
                        nullptr, 0);
}

bool GrpcSession::wants_read() const { return nghttp2_session_want_read(session_) != 0; }

bool GrpcSession::finished() const {
  return nghttp2_session_want_read(session_) == 0 && nghttp2_session_want_write(session_) == 0;
}

// The request's headers are in: what is not a call of ours is refused now.
void GrpcSession::check_request(std::int32_t id, Stream& s) {
  if (s.answered) return;
  if (!s.post) return refuse_http(id, s, "405");
  if (!s.grpc_type) return refuse_http(id, s, "415");
  if (s.bad_timeout) return refuse(id, s, GrpcCode::kInternal, "malformed grpc-timeout");
  const auto method = methods_.find(s.path);
  if (method == methods_.end()) {
    return refuse(id, s, GrpcCode::kUnimplemented, "unknown method " + s.path);
  }
  s.handler = &method->second;
}

// The request has ended: one whole uncompressed message goes to its handler.
void GrpcSession::dispatch_call(std::int32_t id) {
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
  counters_.calls.fetch_add(1, std::memory_order_relaxed);
  sink_(handler, id, std::move(message), deadline);
}

void GrpcSession::refuse(std::int32_t id, Stream& s, GrpcCode code, std::string_view message) {
  counters_.refused_calls.fetch_add(1, std::memory_order_relaxed);
  s.handler = nullptr;
  respond_status(id, s, code, message);
}

void GrpcSession::refuse_http(std::int32_t id, Stream& s, std::string_view status) {
  counters_.refused_calls.fetch_add(1, std::memory_order_relaxed);
  s.handler = nullptr;
  s.answered = true;
  const std::array<nghttp2_nv, 1> headers{field(":status", status)};
  nghttp2_submit_response(session_, id, headers.data(), headers.size(), nullptr);
}

// Trailers-only: the status in the one HEADERS frame that ends the stream, its message
// percent-encoded as grpc-message is.
void GrpcSession::respond_status(std::int32_t id, Stream& s, GrpcCode code,
                                 std::string_view message) {
  s.answered = true;
  const std::string number = std::to_string(static_cast<int>(code));
  const std::string encoded = grpc_percent_encode(message);
  const std::array<nghttp2_nv, 4> headers{
      field(":status", "200"), field("content-type", "application/grpc"),
      field("grpc-status", number), field("grpc-message", encoded)};
  nghttp2_submit_response(session_, id, headers.data(), encoded.empty() ? 3 : 4, nullptr);
}

void GrpcSession::respond(std::int32_t id, GrpcCode code, std::string text) {
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
  data.read_callback = &Callbacks::read_answer;
  nghttp2_submit_response(session_, id, headers.data(), headers.size(), &data);
}

GrpcCall make_call(std::shared_ptr<CallTarget> target, std::int32_t stream, std::string message,
                   std::chrono::steady_clock::time_point deadline) {
  return GrpcCall(std::move(target), stream, std::move(message), deadline);
}

}  // namespace detail
}  // namespace sluice::http
