// Internal: the async batch machinery (acquire_batch_async, probe_batch_async). A batch's items
// are grouped by owner and cut into parts, one frame each, within the server's max_batch and
// max_frame; results go back by item index. Batches are pooled, so a warm client allocates
// nothing per batch. docs/CLIENT.md, section 5, describes the life of a batch.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "client/client.h"
#include "client/connection.h"
#include "protocol/messages.h"

namespace sluice::client::detail {

// One async batch. Completion is counted with one extra hold for the submitting thread, so the
// batch cannot finish (and be reused) while that thread still reads it; whoever drops the last
// hold completes it on the I/O thread.
class AsyncBatch final : public ReplySink {
 public:
  explicit AsyncBatch(Client::Impl& impl) : impl_(impl) {}

  // Plans, submits and arranges for `done` to run. The caller must not touch the batch after.
  void run(std::span<const AcquireRequest> items, bool probe, BatchCallback& done);

  void on_reply(std::uint32_t part, const protocol::Frame& reply) override;
  void on_failure(std::uint32_t part, const Status& status) override;

 private:
  struct Part {
    std::size_t owner = 0;    // the router's owner index
    std::uint32_t begin = 0;  // into order_
    std::uint32_t end = 0;
  };
  struct Policy {
    std::uint32_t quota = 0;
    std::uint64_t window_ms = 0;
  };

  void plan(std::span<const AcquireRequest> items);
  // Runs under the connection's mutex, on the submitting thread.
  void encode(std::span<const AcquireRequest> items, const Part& part, protocol::Bytes& out,
              std::uint32_t id);
  void release();
  void complete();

  Client::Impl& impl_;
  bool probe_ = false;
  BatchCallback done_;
  std::atomic<std::size_t> outstanding_{0};
  std::vector<Result<Decision>> results_;
  std::vector<Policy> policies_;
  std::vector<std::uint32_t> owner_;  // planning scratch
  std::vector<std::uint32_t> start_;  // per owner: where its items start in order_
  std::vector<std::uint32_t> next_;
  std::vector<std::uint32_t> order_;  // item indices grouped by owner, then by part
  std::vector<Part> parts_;
  std::vector<protocol::AcquireResult> scratch_;  // I/O thread
  HandlerSlot post_slot_;
};

// Batches are pooled: a warm client reuses them and their vectors, so a batch call allocates
// nothing. Any thread takes one; the I/O thread gives it back after running its callback.
class BatchPool {
 public:
  explicit BatchPool(Client::Impl& impl) : impl_(impl) {}
  ~BatchPool();
  AsyncBatch& take();
  void give(AsyncBatch& batch);

 private:
  Client::Impl& impl_;
  std::mutex mu_;
  std::vector<std::unique_ptr<AsyncBatch>> all_;
  std::vector<AsyncBatch*> free_;
};

}  // namespace sluice::client::detail
