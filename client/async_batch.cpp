#include "client/async_batch.h"

#include <utility>  // before Asio: Boost 1.74's awaitable.hpp needs std::exchange

#include <algorithm>
#include <boost/asio/post.hpp>

#include "client/client_impl.h"
#include "client/router.h"
#include "core/key_hash.h"

namespace sluice::client {

namespace asio = boost::asio;
using protocol::Frame;
using protocol::Opcode;

namespace detail {
namespace {

// Bytes an ACQUIRE item takes on the wire beyond its key, rounded up (docs/PROTOCOL.md).
constexpr std::size_t kItemOverhead = 32;
constexpr std::size_t kFrameOverhead = 64;

}  // namespace

void AsyncBatch::run(std::span<const AcquireRequest> items, bool probe, BatchCallback& done) {
  probe_ = probe;
  done_ = std::move(done);
  plan(items);
  outstanding_.store(parts_.size() + 1, std::memory_order_relaxed);
  for (std::uint32_t p = 0; p < parts_.size(); ++p) {
    Completion completion;
    completion.sink = this;
    completion.part = p;
    const Part part = parts_[p];
    Status queued =
        impl_.router->connection(part.owner)
            .submit([&](protocol::Bytes& out, std::uint32_t id) { encode(items, part, out, id); },
                    completion);
    if (!queued.ok()) on_failure(p, queued);
  }
  if (outstanding_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    // Every part was refused (or there were none): still answer on the I/O thread.
    asio::post(impl_.io, in_slot(post_slot_, [this] { complete(); }));
  }
}

void AsyncBatch::on_reply(std::uint32_t part, const Frame& reply) {
  const Part& p = parts_[part];
  const std::size_t count = p.end - p.begin;
  if (probe_) {
    const Result<Decision> echoed = probe_echo(reply);
    if (!echoed.ok()) return on_failure(part, unexpected_reply("PING"));
    for (std::uint32_t i = p.begin; i < p.end; ++i) results_[order_[i]] = echoed;
  } else {
    if (reply.header.opcode != Opcode::kAcquire ||
        !protocol::parse_acquire_reply(reply.body, scratch_) || scratch_.size() != count) {
      return on_failure(part, unexpected_reply("ACQUIRE"));
    }
    for (std::size_t i = 0; i < count; ++i) {
      const std::uint32_t item = order_[p.begin + i];
      results_[item] = to_decision(scratch_[i], policies_[item].quota, policies_[item].window_ms);
    }
  }
  release();
}

void AsyncBatch::on_failure(std::uint32_t part, const Status& status) {
  const Part& p = parts_[part];
  for (std::uint32_t i = p.begin; i < p.end; ++i) results_[order_[i]] = Result<Decision>(status);
  release();
}

void AsyncBatch::plan(std::span<const AcquireRequest> items) {
  Router& router = *impl_.router;
  const ServerInfo& info = impl_.info;
  const auto rejected = static_cast<std::uint32_t>(router.size());
  results_.assign(items.size(), Result<Decision>(ErrorCode::kClosed, "not sent"));
  policies_.resize(items.size());
  owner_.resize(items.size());
  // A counting sort of item indices by owner, keeping item order within an owner.
  start_.assign(router.size() + 2, 0);
  for (std::size_t i = 0; i < items.size(); ++i) {
    policies_[i] = Policy{items[i].rule.limit, items[i].rule.period_ms};
    if (Status key_ok = impl_.check_key(items[i].key); !key_ok.ok()) {
      results_[i] = Result<Decision>(std::move(key_ok));
      owner_[i] = rejected;
    } else {
      owner_[i] = static_cast<std::uint32_t>(router.route(hash_key(items[i].key)));
    }
    ++start_[owner_[i] + 1];
  }
  for (std::size_t c = 1; c < start_.size(); ++c) start_[c] += start_[c - 1];
  order_.resize(items.size());
  next_.assign(start_.begin(), start_.end());
  for (std::size_t i = 0; i < items.size(); ++i) {
    order_[next_[owner_[i]]++] = static_cast<std::uint32_t>(i);
  }
  // Cut each owner's run into frames within the server's limits.
  const std::size_t max_items = std::max<std::size_t>(1, info.max_batch);
  const std::size_t max_bytes =
      info.max_frame > kFrameOverhead * 2 ? info.max_frame - kFrameOverhead : info.max_frame;
  parts_.clear();
  for (std::size_t c = 0; c < router.size(); ++c) {
    std::uint32_t i = start_[c];
    const std::uint32_t end = start_[c + 1];
    while (i < end) {
      Part part{c, i, i};
      std::size_t bytes = 0;
      while (part.end < end && part.end - part.begin < max_items) {
        const std::size_t item_bytes = items[order_[part.end]].key.size() + kItemOverhead;
        if (part.end > part.begin && bytes + item_bytes > max_bytes) break;
        bytes += item_bytes;
        ++part.end;
      }
      parts_.push_back(part);
      i = part.end;
    }
  }
}

void AsyncBatch::encode(std::span<const AcquireRequest> items, const Part& part,
                        protocol::Bytes& out, std::uint32_t id) {
  const std::size_t frame = protocol::begin_acquire_request(out, id);
  for (std::uint32_t k = part.begin; k < part.end; ++k) {
    const AcquireRequest& r = items[order_[k]];
    protocol::add_acquire_item(out, frame, protocol::AcquireItem{r.key, r.rule, r.cost, r.peek});
  }
  protocol::finish_acquire_request(out, frame);
  // A probe sends the same bytes as a PING, which the shard echoes without deciding.
  if (probe_) protocol::set_opcode(out, frame, Opcode::kPing);
}

void AsyncBatch::release() {
  if (outstanding_.fetch_sub(1, std::memory_order_acq_rel) == 1) complete();
}

// I/O thread, once. The batch goes back to the pool before the callback runs, so a caller that
// submits again from the callback (or as soon as it sees it) reuses it: the pool never needs
// more batches than are in flight. The results move out of the batch (vectors swapped, no
// copy) into a local that the callback's span points into: a batch completed inside the
// callback (close() fails the others) cannot touch them. The batch takes the I/O thread's spare
// vector instead, and the results' vector becomes the next spare.
void AsyncBatch::complete() {
  const BatchCallback done = std::move(done_);
  done_ = nullptr;
  std::vector<Result<Decision>> results;
  results.swap(impl_.completed_results);  // empty if a completion up the stack holds it
  results.swap(results_);
  impl_.batches.give(*this);
  done(std::span<const Result<Decision>>(results));
  if (results.capacity() > impl_.completed_results.capacity()) {
    impl_.completed_results.swap(results);
  }
}

BatchPool::~BatchPool() = default;

AsyncBatch& BatchPool::take() {
  std::lock_guard lock(mu_);
  if (free_.empty()) {
    all_.push_back(std::make_unique<AsyncBatch>(impl_));
    free_.reserve(all_.size());
    return *all_.back();
  }
  AsyncBatch* batch = free_.back();
  free_.pop_back();
  return *batch;
}

void BatchPool::give(AsyncBatch& batch) {
  std::lock_guard lock(mu_);
  free_.push_back(&batch);
}

}  // namespace detail

void Client::Impl::batch_async(std::span<const AcquireRequest> items, bool probe,
                               BatchCallback& done) {
  if (items.size() != 1) return batches.take().run(items, probe, done);
  // One item: a plain acquire whose callback takes a span of one; no batch state to touch.
  Status queued = submit_acquire(items[0], nullptr, &done, probe);
  if (queued.ok()) return;
  asio::post(io, [done = std::move(done), queued = std::move(queued)]() mutable {
    const Result<Decision> refused(std::move(queued));
    done(std::span<const Result<Decision>>(&refused, 1));
  });
}

}  // namespace sluice::client
