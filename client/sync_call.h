// Internal: how a thread that is not the I/O thread waits for one node-level call (PING, STATS,
// CLUSTER, RELOAD, DRAIN, RESET): a SyncCall is the call's ReplySink, start_call() queues it on
// a connection, and wait() blocks until the I/O thread has finished it.
#pragma once

#include "net/asio.h"  // before any other Asio header

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <utility>

#include "client/node_connection.h"
#include "client/status.h"
#include "protocol/cluster_messages.h"
#include "protocol/frame.h"

namespace sluice::client::detail {

// A sync call's sink: the caller blocks in wait() until the I/O thread finishes it. The notify
// happens under the mutex, so the caller cannot return (destroying the sink) before the I/O
// thread is done touching it. Subclasses parse the reply in on_reply() and call finish().
template <typename T>
class SyncCall : public ReplySink {
 public:
  using Value = T;

  // With `run_io` (connect() on an external io_context that nobody runs yet), runs it while
  // waiting; the connection's own timeout ends the wait.
  Result<T> wait(boost::asio::io_context* run_io = nullptr) {
    std::unique_lock lock(mu_);
    while (!result_.has_value()) {
      if (run_io == nullptr) {
        cv_.wait(lock, [&] { return result_.has_value(); });
        break;
      }
      lock.unlock();
      if (run_io->stopped()) run_io->restart();
      run_io->run_one_for(std::chrono::milliseconds(10));
      lock.lock();
    }
    return std::move(*result_);
  }
  void finish(Result<T> result) {
    std::lock_guard lock(mu_);
    result_.emplace(std::move(result));
    cv_.notify_one();
  }
  void on_failure(std::uint32_t, const Status& status) override { finish(Result<T>(status)); }

 protected:
  ~SyncCall() = default;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<Result<T>> result_;
};

// Queues a node-level request whose reply goes to `call`: `encode(out, request_id, framing)`
// appends its frame. A failed Status means nothing was queued and `call` will not be called.
// `deadline_ns` (monotonic_now_ns() clock): 0 is the connection's own timeout.
template <typename Encode>
Status start_call(NodeConnection& connection, ReplySink& call, Encode encode,
                  std::uint64_t deadline_ns = 0) {
  Completion completion;
  completion.sink = &call;
  completion.deadline_ns = deadline_ns;
  return connection.submit(encode, completion);
}

// CLUSTER: the node's map, as it sent it.
class ClusterCall final : public SyncCall<protocol::ClusterMapMessage> {
 public:
  void on_reply(std::uint32_t, const protocol::Frame& reply) override {
    protocol::ClusterMapMessage map;
    if (reply.header.opcode != protocol::Opcode::kCluster ||
        !protocol::parse_cluster_reply(reply.body, map)) {
      return finish(unexpected_reply("CLUSTER"));
    }
    finish(std::move(map));
  }
};

inline void encode_cluster(protocol::Bytes& out, std::uint32_t id,
                           const protocol::Framing& framing) {
  protocol::encode_cluster_request(out, id, framing);
}

}  // namespace sluice::client::detail
