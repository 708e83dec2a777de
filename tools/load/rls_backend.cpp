#include "tools/load/rls_backend.h"

#include <fmt/core.h>
#include <grpc/support/time.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "core/clock.h"

namespace sluice::load {

namespace asio = boost::asio;
using client::ErrorCode;
using client::Status;
using net::in_slot;

namespace {

std::uint64_t unix_now_ns() { return SystemClock::instance().now_ns(); }

std::string_view channel_state_name(grpc_connectivity_state state) {
  switch (state) {
    case GRPC_CHANNEL_IDLE:
      return "IDLE";
    case GRPC_CHANNEL_CONNECTING:
      return "CONNECTING";
    case GRPC_CHANNEL_READY:
      return "READY";
    case GRPC_CHANNEL_TRANSIENT_FAILURE:
      return "TRANSIENT_FAILURE";
    case GRPC_CHANNEL_SHUTDOWN:
      return "SHUTDOWN";
  }
  return "unknown";
}

}  // namespace

RlsBackend::RlsBackend(BackendHost& host, const LoadOptions& options, const KeyFormatter& formatter,
                       SharedAudit* audit, std::string target, unsigned channels)
    : host_(host),
      o_(options),
      formatter_(formatter),
      audit_(audit),
      target_(std::move(target)),
      planned_channels_(channels),
      in_flight_(channels, 0),
      key_buf_(formatter.max_length()) {}

RlsBackend::~RlsBackend() { shut_down_queue(); }

// ---- setup ----------------------------------------------------------------------------------

Status RlsBackend::connect() {
  const auto deadline = std::chrono::system_clock::now() + o_.connect_timeout;
  for (unsigned i = 0; i < planned_channels_; ++i) {
    grpc::ChannelArguments args;
    // A connection of its own per channel, and no retry hidden inside a measured call.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetInt(GRPC_ARG_ENABLE_RETRIES, 0);
    auto channel = grpc::CreateCustomChannel(target_, grpc::InsecureChannelCredentials(), args);
    if (!channel->WaitForConnected(deadline)) {
      return Status(
          ErrorCode::kConnectionFailed,
          fmt::format("connect to {} failed: channel {} not ready within {} ms ({})", target_, i,
                      o_.connect_timeout.count(), channel_state_name(channel->GetState(false))));
    }
    stubs_.push_back(rls::RateLimitService::NewStub(channel));
    channels_.push_back(std::move(channel));
  }
  return Status();
}

void RlsBackend::reserve(std::size_t requests) {
  for (std::size_t r = calls_.size(); r < requests; ++r) {
    auto call = std::make_unique<Call>();
    call->id = static_cast<std::uint32_t>(r);
    prepare_rls_request(call->request, o_.rls_domain, o_.descriptors, o_.cost);
    calls_.push_back(std::move(call));
  }
}

void RlsBackend::start() {
  if (!o_.busy_poll) completions_ = std::thread([this] { wait_for_completions(); });
}

// ---- sending --------------------------------------------------------------------------------

std::uint32_t RlsBackend::next_open_channel() {
  const auto count = static_cast<std::uint32_t>(channels_.size());
  std::uint32_t channel = rr_;
  for (std::uint32_t tried = 0; tried < count; ++tried) {
    channel = (rr_ + tried) % count;
    if (in_flight_[channel] < o_.depth) break;
  }
  rr_ = (channel + 1) % count;
  return channel;
}

void RlsBackend::issue(std::uint32_t r, std::span<const std::uint64_t> keys, std::uint32_t lane) {
  const std::uint32_t channel = lane == kAnyLane ? next_open_channel() : lane;
  Call& call = *calls_[r];
  call.lane = channel;
  call.key = keys.front();
  call.issued_unix_ns = audit_ ? unix_now_ns() : 0;
  set_rls_request_key(call.request, formatter_.format(call.key, key_buf_));
  call.response.Clear();
  call.context.emplace();
  call.context->set_deadline(std::chrono::system_clock::now() + o_.drain_timeout);
  call.reader = stubs_[channel]->PrepareAsyncShouldRateLimit(&*call.context, call.request, &queue_);
  call.reader->StartCall();
  call.reader->Finish(&call.response, &call.status, &call);
  ++in_flight_[channel];
}

// ---- receiving ------------------------------------------------------------------------------

// The completion thread: every finished call goes to done_, and the worker is woken once for
// all that gather before it takes them.
void RlsBackend::wait_for_completions() {
  void* tag = nullptr;
  bool ok = false;
  while (queue_.Next(&tag, &ok)) {
    bool post = false;
    {
      std::lock_guard lock(done_mu_);
      done_.push_back(static_cast<Call*>(tag));
      post = !posted_;
      posted_ = true;
    }
    if (post) asio::post(host_.io(), in_slot(post_slot_, [this] { take_completions(); }));
  }
}

void RlsBackend::poll() {
  if (closed_ || queue_shut_down_ || completions_.joinable()) return;
  void* tag = nullptr;
  bool ok = false;
  std::uint64_t now_ns = 0;
  while (!closed_ && queue_.AsyncNext(&tag, &ok, gpr_time_0(GPR_CLOCK_MONOTONIC)) ==
                         grpc::CompletionQueue::GOT_EVENT) {
    now_ns = monotonic_now_ns();
    count(*static_cast<Call*>(tag), now_ns);
  }
  if (now_ns != 0 && !closed_) host_.handler_done(now_ns);
}

void RlsBackend::take_completions() {
  {
    std::lock_guard lock(done_mu_);
    taking_.swap(done_);
    posted_ = false;
  }
  if (closed_) {  // cancelled by close(): the host counted them already
    taking_.clear();
    return;
  }
  const std::uint64_t now_ns = monotonic_now_ns();
  for (Call* call : taking_) {
    count(*call, now_ns);
    if (closed_) break;
  }
  taking_.clear();
  if (!closed_) host_.handler_done(now_ns);
}

void RlsBackend::count(Call& call, std::uint64_t now_ns) {
  Tally& tally = host_.tally();
  TimelineEntry& t = tally.step(now_ns);
  if (!call.status.ok()) {
    tally.errors(1, t,
                 fmt::format("gRPC {}: {}", grpc_code_name(call.status.error_code()),
                             call.status.error_message()));
  } else {
    const RlsAnswer answer = read_rls_response(call.response, o_.descriptors);
    switch (answer.outcome) {
      case RlsAnswer::Outcome::kAllowed:
        tally.allowed(t);
        if (audit_) {
          std::lock_guard lock(audit_->mu);
          audit_->audit.record(call.key, call.issued_unix_ns, unix_now_ns(), o_.cost);
        }
        break;
      case RlsAnswer::Outcome::kDenied:
        tally.denied(t);
        break;
      case RlsAnswer::Outcome::kError:
        tally.errors(1, t, answer.error);
        break;
    }
  }
  // The call is over: its context and reader go before the request id can be issued again.
  call.reader.reset();
  call.context.reset();
  --in_flight_[call.lane];
  host_.request_done(call.id, call.lane, now_ns);  // may issue on this Call again
}

// ---- ending ---------------------------------------------------------------------------------

void RlsBackend::close() {
  if (closed_) return;
  closed_ = true;
  for (auto& call : calls_) {
    if (call->context) call->context->TryCancel();
  }
  shut_down_queue();
}

// No call is started after this; every tag still in the queue is drained (by the completion
// thread, or here when it never started) before the queue may be destroyed.
void RlsBackend::shut_down_queue() {
  if (queue_shut_down_) return;
  queue_shut_down_ = true;
  queue_.Shutdown();
  if (completions_.joinable()) {
    completions_.join();
    return;
  }
  void* tag = nullptr;
  bool ok = false;
  while (queue_.Next(&tag, &ok)) {
  }
}

}  // namespace sluice::load
