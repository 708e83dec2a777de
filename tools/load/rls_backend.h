// sluice-load's backend for Envoy's Rate Limit Service: a decision is one
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit call (rls_request.h builds it:
// --descriptors descriptors from the decision's key, in --rls-domain) to sluice-gateway
// --grpc-listen, envoyproxy/ratelimit or any other implementation. overall_code OK is allowed,
// OVER_LIMIT denied; a gRPC error (its status), or a response that does not fit the request, is
// an error, and the run goes on. Each call has the deadline --drain, as the Sluice backend's
// client has.
//
// Connections are gRPC channels (--connections of them), each on its own TCP connection (a
// local subchannel pool: gRPC would otherwise share one between channels to the same target),
// and up to --depth calls in flight on each, multiplexed as HTTP/2 streams. A lane is a channel.
//
// Threads: calls are started on the worker's thread with gRPC's asynchronous API on one
// CompletionQueue; a thread of this backend waits on the queue, does gRPC's I/O (a thread in
// Next() polls the connections), and hands finished calls to the worker's event loop in
// batches: one post while the worker has not yet taken the previous ones. Their latency
// therefore includes that hand-over, as an Envoy filter's includes gRPC's own. With
// --busy-poll there is no such thread: the worker's polling loop polls the queue itself, so
// neither a wake-up nor a hand-over is in the latency (as the other backends' sockets).
#pragma once

#include "net/asio.h"  // before any other Asio header

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>
#include <grpcpp/completion_queue.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"
#include "net/handler_slot.h"
#include "tools/load/backend.h"
#include "tools/load/key_generator.h"
#include "tools/load/load_driver.h"
#include "tools/load/rls_request.h"

namespace sluice::load {

class RlsBackend final : public Backend {
 public:
  // `channels` gRPC channels to `target` (HOST:PORT). `audit`: null without --audit.
  RlsBackend(BackendHost& host, const LoadOptions& options, const KeyFormatter& formatter,
             SharedAudit* audit, std::string target, unsigned channels);
  ~RlsBackend() override;

  // Opens every channel and waits until each is connected (TCP and HTTP/2's handshake), within
  // the connect timeout in all.
  client::Status connect() override;
  // The plan before connect(), and what was opened after (connect() opens all or fails).
  unsigned connections() const override { return planned_channels_; }
  unsigned nodes() const override { return 0; }
  void reserve(std::size_t requests) override;
  // Starts the completion thread; with --busy-poll there is none: poll() takes the replies.
  void start() override;
  // A lane is a channel. kAnyLane: the next in turn with fewer than --depth calls in flight.
  // REQUIRES: keys.size() == 1 (validate() keeps --batch at 1).
  void issue(std::uint32_t r, std::span<const std::uint64_t> keys, std::uint32_t lane) override;
  void flush() override {}  // gRPC writes by itself
  // --busy-poll: every call finished by now, taken from the queue on the worker's thread (a
  // queue polled with a deadline of now also does gRPC's I/O), and counted at once.
  void poll() override;
  // Cancels the calls in flight, and returns once the completion thread has seen them end.
  void close() override;

 private:
  // A call in flight, one per request id. Held by pointer: gRPC writes into it until the call
  // ends, and the table may grow meanwhile.
  struct Call {
    std::optional<grpc::ClientContext> context;  // a fresh one per call
    rls::RateLimitRequest request;
    rls::RateLimitResponse response;
    grpc::Status status;
    std::unique_ptr<grpc::ClientAsyncResponseReader<rls::RateLimitResponse>> reader;
    std::uint32_t id = 0;
    std::uint32_t lane = 0;
    std::uint64_t key = 0;
    std::uint64_t issued_unix_ns = 0;  // --audit: the earliest the server can have decided
  };

  std::uint32_t next_open_channel();
  void wait_for_completions();
  void take_completions();
  void count(Call& call, std::uint64_t now_ns);
  void shut_down_queue();

  BackendHost& host_;
  const LoadOptions& o_;
  const KeyFormatter& formatter_;
  SharedAudit* const audit_;
  const std::string target_;
  const unsigned planned_channels_;
  std::vector<std::shared_ptr<grpc::Channel>> channels_;
  std::vector<std::unique_ptr<rls::RateLimitService::Stub>> stubs_;
  std::vector<std::size_t> in_flight_;  // per channel
  std::uint32_t rr_ = 0;                // the next channel, kAnyLane
  std::vector<char> key_buf_;
  grpc::CompletionQueue queue_;
  std::vector<std::unique_ptr<Call>> calls_;  // by request id

  // Finished calls, handed from the completion thread to the worker's.
  std::mutex done_mu_;
  std::vector<Call*> done_;  // guarded by done_mu_
  bool posted_ = false;      // guarded by done_mu_: a take_completions() is queued
  std::vector<Call*> taking_;
  net::HandlerSlot post_slot_;

  std::thread completions_;
  bool queue_shut_down_ = false;
  bool closed_ = false;
};

}  // namespace sluice::load
