#include "client/async_batch.h"

#include "net/asio.h"  // before any other Asio header

#include <algorithm>
#include <chrono>
#include <cstring>

#include "client/client_impl.h"
#include "client/router.h"
#include "core/key_hash.h"

namespace sluice::client {

namespace asio = boost::asio;
using protocol::Frame;
using protocol::ItemStatus;
using protocol::Opcode;

namespace detail {
namespace {

// Bytes an ACQUIRE item takes on the wire beyond its key, rounded up (docs/PROTOCOL.md).
constexpr std::size_t kItemOverhead = 32;
constexpr std::size_t kFrameOverhead = 64;

Result<Decision> no_owner(std::uint64_t epoch) { return Result<Decision>(no_active_node(epoch)); }

Result<Decision> closing() {
  return Result<Decision>(ErrorCode::kClosed, "client is shutting down");
}

}  // namespace

std::uint64_t retry_pause_ns(std::uint64_t& state) {
  // xorshift64: the pauses need to differ between clients and calls, not to be unpredictable.
  state ^= state << 13;
  state ^= state >> 7;
  state ^= state << 17;
  return kMinRetryPauseNs + state % (kMaxRetryPauseNs - kMinRetryPauseNs + 1);
}

AsyncBatch::AsyncBatch(Client::Impl& impl)
    : impl_(impl),
      jitter_((reinterpret_cast<std::uintptr_t>(this) ^ monotonic_now_ns()) | 1),
      pause_timer_(impl.io) {
  // Room for any key up to the default limit: a one-item batch handed a longer key than it has
  // seen so far (the pool gives batches out in whatever order they came back) does not grow.
  key_bytes_.reserve(protocol::kDefaultMaxKey);
  // Room for one item's part and answer: a one-item batch that so far answered only locally (a
  // blocked key, a lease) sends its first item without growing them.
  parts_.reserve(1);
  scratch_.reserve(1);
}

void AsyncBatch::run(std::span<const AcquireRequest> items, bool probe, BatchCallback& done) {
  done_ = std::move(done);
  start(items, probe);
}

void AsyncBatch::run_one(const AcquireRequest& item, bool probe, AcquireCallback* done,
                         BatchCallback* batch_done) {
  if (done != nullptr) {
    one_done_ = std::move(*done);
  } else {
    done_ = std::move(*batch_done);
  }
  start(std::span<const AcquireRequest>(&item, 1), probe);
}

void AsyncBatch::resume_one(const AcquireRequest& item, std::uint64_t deadline_ns,
                            const protocol::AcquireResult& answer, std::uint64_t reply_epoch,
                            AcquireCallback* done, BatchCallback* batch_done) {
  if (done != nullptr) {
    one_done_ = std::move(*done);
  } else {
    done_ = std::move(*batch_done);
  }
  probe_ = false;
  clustered_ = true;
  deadline_ns_ = deadline_ns;
  keep_copies(std::span<const AcquireRequest>(&item, 1));
  results_.assign(1, Result<Decision>(ErrorCode::kClosed, "not sent"));
  policies_.assign(1, Policy{item.rule.limit, item.rule.period_ms});
  // The one hold, which absorbed() releases: as if the item's first part had been answered.
  outstanding_.store(1, std::memory_order_relaxed);
  std::uint64_t now = 0;
  absorb(0, answer, reply_epoch, now);
  absorbed(reply_epoch);
}

void AsyncBatch::keep_copies(std::span<const AcquireRequest> items) {
  // The keys are packed in one reused buffer, which is filled before any view into it is taken.
  std::size_t bytes = 0;
  for (const AcquireRequest& item : items) bytes += item.key.size();
  key_bytes_.resize(bytes);
  copies_.resize(items.size());
  std::size_t at = 0;
  for (std::size_t i = 0; i < items.size(); ++i) {
    const std::string_view key = items[i].key;
    if (!key.empty()) std::memcpy(key_bytes_.data() + at, key.data(), key.size());
    copies_[i] = items[i];
    copies_[i].key = std::string_view(key_bytes_.data() + at, key.size());
    at += key.size();
  }
  items_ = copies_;
  redirected_.assign(items.size(), 0);
  retry_order_.clear();
  retry_parts_.clear();
  wait_epoch_ = 0;
}

void AsyncBatch::start(std::span<const AcquireRequest> items, bool probe) {
  probe_ = probe;
  const std::shared_ptr<const Router> router = impl_.maps.current_router();
  clustered_ = router->clustered();
  const bool own_policy = std::any_of(items.begin(), items.end(), [](const AcquireRequest& r) {
    return r.failure_policy.has_value();
  });
  if (clustered_ || (!probe && (impl_.layer.active() || own_policy))) {
    // A copy that outlives the call: for the items sent again, and for the local layer, which
    // settles every answer once the batch completes.
    deadline_ns_ = monotonic_now_ns() + impl_.timeout_ns;
    keep_copies(items);
  } else {
    items_ = items;
  }
  plan(*router);
  outstanding_.store(parts_.size() + 1, std::memory_order_relaxed);
  for (std::uint32_t p = 0; p < parts_.size(); ++p) submit(*router, p);
  if (outstanding_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    // Every part was refused (or there were none): still answer on the I/O thread.
    asio::post(impl_.io, net::in_slot(post_slot_, [this] { complete(); }));
  }
}

void AsyncBatch::submit(const Router& router, std::uint32_t id) {
  const Part part = part_at(id);
  NodeConnection* connection = router.connection(part.owner);
  if (connection == nullptr) return on_failure(id, router.owner(part.owner).unreachable);
  Completion completion;
  completion.sink = this;
  completion.part = id;
  // A retry has what is left of its call's time, not a timeout of its own.
  if ((id & kRetryPart) != 0) completion.deadline_ns = deadline_ns_;
  const std::vector<std::uint32_t>& order = order_of(id);
  Status queued = connection->submit(
      [&](protocol::Bytes& out, std::uint32_t request_id, const protocol::Framing& framing) {
        encode(part, order, out, request_id, framing);
      },
      completion);
  if (!queued.ok()) on_failure(id, queued);
}

void AsyncBatch::on_reply(std::uint32_t id, const Frame& reply) {
  const Part p = part_at(id);
  impl_.layer.note_call(p.health, false);
  const std::vector<std::uint32_t>& order = order_of(id);
  const std::size_t count = p.end - p.begin;
  if (probe_) {
    const Result<Decision> echoed = probe_echo(reply);
    if (!echoed.ok()) return on_failure(id, unexpected_reply("PING"));
    for (std::uint32_t i = p.begin; i < p.end; ++i) results_[order[i]] = echoed;
    return release();
  }
  if (reply.header.opcode != Opcode::kAcquire ||
      !protocol::parse_acquire_reply(reply.body, scratch_) || scratch_.size() != count) {
    return on_failure(id, unexpected_reply("ACQUIRE"));
  }
  std::uint64_t now = 0;
  for (std::size_t i = 0; i < count; ++i) {
    absorb(order[p.begin + i], scratch_[i], reply.header.epoch, now);
  }
  absorbed(reply.header.epoch);
}

void AsyncBatch::absorb(std::uint32_t item, const protocol::AcquireResult& r,
                        std::uint64_t reply_epoch, std::uint64_t& now) {
  if (clustered_ && r.status == ItemStatus::kRedirect && redirected_[item] == 0) {
    // Followed once; a second REDIRECT is the item's answer (kNotOwner).
    redirected_[item] = 1;
    redirect_wait_.push_back(item);
    impl_.redirects_followed.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  // A second REDIRECT under another epoch than our map's: the node and this client do not
  // agree on the map yet (nodes adopt a new epoch a few milliseconds apart, and a refresh may
  // have asked a node that had not). It is asked again after a pause, as for UNAVAILABLE,
  // rather than taken as the answer; a reply above our epoch starts a refresh meanwhile.
  const bool behind =
      clustered_ && r.status == ItemStatus::kRedirect && reply_epoch != impl_.maps.epoch();
  if (clustered_ && (r.status == ItemStatus::kUnavailable || behind)) {
    if (now == 0) now = monotonic_now_ns();
    if (now + kMaxRetryPauseNs < deadline_ns_) {
      unavailable_wait_.push_back(item);
      return;
    }
  }
  results_[item] = to_decision(r, policies_[item].quota, policies_[item].window_ms);
}

void AsyncBatch::absorbed(std::uint64_t reply_epoch) {
  if (!redirect_wait_.empty()) {
    wait_epoch_ = std::max(wait_epoch_, reply_epoch);
    if (!waiting_for_map_) {
      // A node with a newer map than ours: its items wait for the refresh its reply started.
      if (reply_epoch > impl_.maps.epoch() && impl_.maps.wait_for_map(*this)) {
        waiting_for_map_ = true;
        hold();
      } else {
        resend(redirect_wait_);
      }
    }
  }
  if (!unavailable_wait_.empty() && !pausing_) start_pause();
  release();
}

void AsyncBatch::on_failure(std::uint32_t id, const Status& status) {
  const Part p = part_at(id);
  if (LocalLayer::owner_failure(status)) impl_.layer.note_call(p.health, true);
  const std::vector<std::uint32_t>& order = order_of(id);
  const bool retry = (id & kRetryPart) != 0;
  for (std::uint32_t i = p.begin; i < p.end; ++i) {
    const std::uint32_t item = order[i];
    if (retry && redirected_[item] != 0 && status.code() == ErrorCode::kConnectionFailed) {
      results_[item] = Result<Decision>(
          ErrorCode::kNotOwner,
          "answered REDIRECT, and the key's owner in the client's map cannot be reached: " +
              status.message());
    } else {
      results_[item] = Result<Decision>(status);
    }
  }
  release();
}

void AsyncBatch::on_map() {
  waiting_for_map_ = false;
  if (impl_.maps.epoch() < wait_epoch_ && impl_.maps.wait_for_map(*this)) {
    waiting_for_map_ = true;  // a second refresh is under way: keep the hold
    return;
  }
  resend(redirect_wait_);
  release();
}

void AsyncBatch::cancel_pause() { pause_timer_.cancel(); }

void AsyncBatch::start_pause() {
  pausing_ = true;
  hold();
  pause_timer_.expires_after(std::chrono::nanoseconds(retry_pause_ns(jitter_)));
  pause_timer_.async_wait(
      net::in_slot(pause_slot_, [this](const boost::system::error_code& ec) { on_pause_end(ec); }));
}

void AsyncBatch::on_pause_end(const boost::system::error_code& ec) {
  pausing_ = false;
  if (ec || impl_.closed) {
    for (const std::uint32_t item : unavailable_wait_) results_[item] = closing();
    unavailable_wait_.clear();
  } else {
    impl_.unavailable_retries.fetch_add(unavailable_wait_.size(), std::memory_order_relaxed);
    resend(unavailable_wait_);
  }
  release();
}

void AsyncBatch::resend(std::vector<std::uint32_t>& items) {
  if (items.empty()) return;
  if (impl_.closed) {
    for (const std::uint32_t item : items) results_[item] = closing();
    items.clear();
    return;
  }
  const std::shared_ptr<const Router> router = impl_.maps.current_router();
  retry_owners_.clear();
  for (const std::uint32_t item : items) {
    const std::size_t owner = router->route(hash_key(items_[item].key));
    if (owner == Router::kNoOwner) {
      results_[item] = no_owner(router->epoch());
    } else {
      retry_owners_.emplace_back(owner, item);
    }
  }
  items.clear();
  std::sort(retry_owners_.begin(), retry_owners_.end());
  const auto first_part = static_cast<std::uint32_t>(retry_parts_.size());
  for (std::size_t i = 0; i < retry_owners_.size();) {
    const std::size_t owner = retry_owners_[i].first;
    const auto begin = static_cast<std::uint32_t>(retry_order_.size());
    for (; i < retry_owners_.size() && retry_owners_[i].first == owner; ++i) {
      retry_order_.push_back(retry_owners_[i].second);
    }
    cut(*router, owner, retry_order_, begin, static_cast<std::uint32_t>(retry_order_.size()),
        retry_parts_);
  }
  const auto end_part = static_cast<std::uint32_t>(retry_parts_.size());
  outstanding_.fetch_add(end_part - first_part, std::memory_order_relaxed);
  for (std::uint32_t p = first_part; p < end_part; ++p) submit(*router, kRetryPart | p);
}

void AsyncBatch::plan(const Router& router) {
  const std::span<const AcquireRequest> items = items_;
  const auto rejected = static_cast<std::uint32_t>(router.size());
  results_.assign(items.size(), Result<Decision>(ErrorCode::kClosed, "not sent"));
  policies_.resize(items.size());
  owner_.resize(items.size());
  // A counting sort of item indices by owner, keeping item order within an owner.
  start_.assign(router.size() + 2, 0);
  for (std::size_t i = 0; i < items.size(); ++i) {
    policies_[i] = Policy{items[i].rule.limit, items[i].rule.period_ms};
    owner_[i] = rejected;
    const KeyHash hash = items[i].key.empty() ? KeyHash{} : hash_key(items[i].key);
    const std::size_t owner = items[i].key.empty() ? Router::kNoOwner : router.route(hash);
    if (items[i].key.empty()) {
      results_[i] = Result<Decision>(ErrorCode::kInvalidKey, "key is empty");
    } else if (owner == Router::kNoOwner) {
      results_[i] = no_owner(router.epoch());
    } else if (Status key_ok = check_key(items[i].key, router.owner(owner).limits); !key_ok.ok()) {
      results_[i] = Result<Decision>(std::move(key_ok));
    } else if (std::optional<Result<Decision>> local =
                   probe_ ? std::nullopt
                          : impl_.layer.answer(items[i], hash, router.owner(owner))) {
      results_[i] = std::move(*local);  // decided here, not sent
    } else {
      owner_[i] = static_cast<std::uint32_t>(owner);
    }
    ++start_[owner_[i] + 1];
  }
  for (std::size_t c = 1; c < start_.size(); ++c) start_[c] += start_[c - 1];
  order_.resize(items.size());
  next_.assign(start_.begin(), start_.end());
  for (std::size_t i = 0; i < items.size(); ++i) {
    order_[next_[owner_[i]]++] = static_cast<std::uint32_t>(i);
  }
  parts_.clear();
  for (std::size_t c = 0; c < router.size(); ++c)
    cut(router, c, order_, start_[c], start_[c + 1], parts_);
}

void AsyncBatch::cut(const Router& router, std::size_t owner,
                     const std::vector<std::uint32_t>& order, std::uint32_t first,
                     std::uint32_t end, std::vector<Part>& parts) {
  // Frames within the owner's limits.
  const NodeLimits& limits = router.owner(owner).limits;
  const std::size_t max_items = std::max<std::size_t>(1, limits.max_batch);
  const std::size_t max_bytes =
      limits.max_frame > kFrameOverhead * 2 ? limits.max_frame - kFrameOverhead : limits.max_frame;
  std::uint32_t i = first;
  while (i < end) {
    Part part{owner, i, i, router.owner(owner).health};
    std::size_t bytes = 0;
    while (part.end < end && part.end - part.begin < max_items) {
      const std::size_t item_bytes = items_[order[part.end]].key.size() + kItemOverhead;
      if (part.end > part.begin && bytes + item_bytes > max_bytes) break;
      bytes += item_bytes;
      ++part.end;
    }
    parts.push_back(part);
    i = part.end;
  }
}

void AsyncBatch::encode(const Part& part, const std::vector<std::uint32_t>& order,
                        protocol::Bytes& out, std::uint32_t id, const protocol::Framing& framing) {
  const std::size_t frame = protocol::begin_acquire_request(out, id, framing);
  for (std::uint32_t k = part.begin; k < part.end; ++k) {
    const AcquireRequest& r = items_[order[k]];
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
// vector instead, and the results' vector becomes the next spare. A one-item acquire's result
// moves into a local the same way.
void AsyncBatch::complete() {
  if (items_.data() == copies_.data() && !probe_) {  // copied: the layer may settle them
    const std::uint64_t started =
        deadline_ns_ > impl_.timeout_ns ? deadline_ns_ - impl_.timeout_ns : 0;
    for (std::size_t i = 0; i < results_.size(); ++i) {
      impl_.layer.finish(items_[i], results_[i], started);
    }
  }
  if (one_done_) {
    const AcquireCallback done = std::move(one_done_);
    one_done_ = nullptr;
    Result<Decision> result = std::move(results_[0]);
    impl_.batches.give(*this);
    done(std::move(result));
    return;
  }
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

AsyncBatch& BatchPool::take(bool one_item) {
  std::lock_guard lock(mu_);
  std::vector<AsyncBatch*>& free = one_item ? free_one_ : free_;
  if (free.empty()) {
    all_.push_back(std::make_unique<AsyncBatch>(impl_));
    all_.back()->one_item_ = one_item;
    // Both lists can hold every batch: give() never allocates.
    free_.reserve(all_.size());
    free_one_.reserve(all_.size());
    return *all_.back();
  }
  AsyncBatch* batch = free.back();
  free.pop_back();
  return *batch;
}

void BatchPool::give(AsyncBatch& batch) {
  std::lock_guard lock(mu_);
  (batch.one_item_ ? free_one_ : free_).push_back(&batch);
}

}  // namespace detail

void Client::Impl::batch_async(std::span<const AcquireRequest> items, bool probe,
                               BatchCallback& done) {
  if (items.size() != 1) return batches.take(/*one_item=*/false).run(items, probe, done);
  // One item: a plain acquire whose callback takes a span of one; no batch state to touch.
  Status queued = submit_acquire(items[0], nullptr, &done, probe);
  if (queued.ok()) return;
  Result<Decision> refused(std::move(queued));
  if (!probe) layer.finish(items[0], refused, 0);
  asio::post(io, [done = std::move(done), refused = std::move(refused)]() mutable {
    done(std::span<const Result<Decision>>(&refused, 1));
  });
}

}  // namespace sluice::client
