#include "tools/gateway/rls.h"

#include <google/protobuf/arena.h>

#include <atomic>
#include <boost/asio/steady_timer.hpp>
#include <cstddef>
#include <future>
#include <limits>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <unordered_set>
#include <utility>
#include <vector>

#include "net/host_port.h"
#include "rules/envoy_config.h"
#include "tools/gateway/answer.h"

namespace sluice::gateway {
namespace {

using SteadyClock = std::chrono::steady_clock;
using rules::EnvoyLimit;
using rules::EnvoyUnit;
using Code = rls::RateLimitResponse::Code;

std::uint64_t unix_ms() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count());
}

// The limit's name in metrics and in RateLimit-Policy: its `name`, else its config key.
std::string_view limit_label(const EnvoyLimit& limit, std::string_view stats_key) {
  if (limit.detailed_metric) return stats_key;
  return limit.name.empty() ? std::string_view(limit.stats_key) : std::string_view(limit.name);
}

void set_current_limit(rls::RateLimitResponse::DescriptorStatus& status, const EnvoyLimit& limit) {
  auto* current = status.mutable_current_limit();
  current->set_requests_per_unit(limit.requests_per_unit);
  current->set_unit(static_cast<rls::RateLimitResponse::RateLimit::Unit>(limit.unit));
  current->set_name(limit.name);
}

// duration_until_reset as envoyproxy/ratelimit computes it for a plain limit: the rest of the
// unit's window on the UTC clock, in whole seconds (1 .. unit). An extended limit reports the
// decision's own reset.
void set_reset(rls::RateLimitResponse::DescriptorStatus& status, const EnvoyLimit& limit,
               const client::Decision* decision, std::uint64_t now_ms) {
  auto* reset = status.mutable_duration_until_reset();
  if (!limit.extended || decision == nullptr) {
    const std::uint64_t unit = rules::envoy_unit_seconds(limit.unit);
    if (unit == 0) return;
    const std::uint64_t now_s = now_ms / 1000;
    reset->set_seconds(static_cast<std::int64_t>(unit - now_s % unit));
    return;
  }
  reset->set_seconds(static_cast<std::int64_t>(decision->reset_after_ms / 1000));
  reset->set_nanos(static_cast<std::int32_t>(decision->reset_after_ms % 1000 * 1'000'000));
}

}  // namespace

// One ShouldRateLimit call between its arrival and its answer.
struct RlsFront::Pending {
  std::shared_ptr<const rules::RuleSet> rules;  // the snapshot the call decides under
  const rls::RateLimitRequest* request = nullptr;
  rls::RateLimitResponse* response = nullptr;
  Done done;
  SteadyClock::time_point arrived;
  std::string domain_label;
  // Per descriptor: its limit (a config's, or the request's own override), its counted key and
  // metrics name, its units, and where its decision is in the batch.
  struct Item {
    const EnvoyLimit* limit = nullptr;
    std::optional<EnvoyLimit> override_limit;  // the request's own (descriptor.limit)
    std::string counted_key;
    std::string stats_key;
    std::uint64_t hits = 1;
    bool unlimited = false;
    std::optional<std::size_t> batch_index;
    const EnvoyLimit* active() const { return override_limit ? &*override_limit : limit; }
  };
  std::vector<Item> items;
  std::atomic<bool> answered{false};  // the first of the cluster's answer and the deadline wins
  std::optional<Waiting::iterator> waiting;  // RlsFront::waiting_mutex_: its place there
};

RlsFront::RlsFront(client::Client& client, RulesView rules, GatewayMetrics& metrics,
                   boost::asio::io_context& timers, RlsOptions options)
    : client_(client),
      rules_(std::move(rules)),
      metrics_(metrics),
      timers_(timers),
      options_(options),
      tick_timer_(timers) {}

void RlsFront::watch(std::shared_ptr<Pending> pending, SteadyClock::time_point deadline) {
  Pending& p = *pending;
  std::lock_guard lock(waiting_mutex_);
  p.waiting = waiting_.emplace(deadline, std::move(pending));
  if (deadline >= armed_for_) return;  // the timer fires before this deadline anyway
  armed_for_ = deadline;
  boost::asio::post(timers_, [this] { arm(); });
}

void RlsFront::unwatch(Pending& pending) {
  std::lock_guard lock(waiting_mutex_);
  if (!pending.waiting) return;
  waiting_.erase(*pending.waiting);  // the timer stays set: it finds nothing, and moves on
  pending.waiting.reset();
}

void RlsFront::arm() {
  SteadyClock::time_point at;
  {
    std::lock_guard lock(waiting_mutex_);
    if (armed_for_ == SteadyClock::time_point::max()) return;
    at = armed_for_ + options_.deadline_tick;
  }
  tick_timer_.expires_at(at);  // cancels a wait for a later time
  tick_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) tick();
  });
}

void RlsFront::tick() {
  std::vector<std::shared_ptr<Pending>> due;
  {
    std::lock_guard lock(waiting_mutex_);
    const auto now = SteadyClock::now();
    while (!waiting_.empty() && waiting_.begin()->first <= now) {
      due.push_back(std::move(waiting_.begin()->second));
      due.back()->waiting.reset();
      waiting_.erase(waiting_.begin());
    }
    armed_for_ = waiting_.empty() ? SteadyClock::time_point::max() : waiting_.begin()->first;
  }
  arm();
  // Every limit of a call not yet answered then follows its failure policy.
  for (const auto& pending : due) finish(*pending, {});
}

bool RlsFront::fails_closed(const EnvoyLimit& limit) const {
  switch (limit.on_failure) {
    case rules::OnFailure::kOpen:
      return false;
    case rules::OnFailure::kClosed:
      return true;
    case rules::OnFailure::kDefault:
      break;
  }
  return options_.failure_policy == client::FailurePolicy::kClosed;
}

void RlsFront::refuse(const Done& done, std::string message) {
  metrics_.rls_answered("", "INVALID_ARGUMENT", std::chrono::nanoseconds(0));
  done(RlsStatus{http::GrpcCode::kInvalidArgument, std::move(message)});
}

void RlsFront::decide(const rls::RateLimitRequest& request, rls::RateLimitResponse& response,
                      Done done, SteadyClock::time_point caller_deadline) {
  const auto invalid = [&](std::string message) { refuse(done, std::move(message)); };
  // The peer's two refusals, with its messages; then our limits.
  if (request.domain().empty()) return invalid("rate limit domain must not be empty");
  if (request.descriptors_size() == 0) {
    return invalid("rate limit descriptor list must not be empty");
  }
  if (static_cast<std::size_t>(request.descriptors_size()) > options_.max_descriptors) {
    return invalid("more than " + std::to_string(options_.max_descriptors) +
                   " descriptors in one request");
  }
  for (int i = 0; i < request.descriptors_size(); ++i) {
    const auto& descriptor = request.descriptors(i);
    if (static_cast<std::size_t>(descriptor.entries_size()) > options_.max_entries) {
      return invalid("descriptor " + std::to_string(i) + ": more than " +
                     std::to_string(options_.max_entries) + " entries");
    }
    if (descriptor.has_limit() &&
        rules::envoy_unit_seconds(static_cast<EnvoyUnit>(descriptor.limit().unit())) == 0) {
      return invalid("descriptor " + std::to_string(i) + ": limit override without a unit");
    }
  }
  auto pending = std::make_shared<Pending>();
  pending->arrived = SteadyClock::now();
  pending->rules = rules_.current();
  pending->request = &request;
  pending->response = &response;
  pending->done = std::move(done);
  const rules::EnvoyConfig& config = pending->rules->envoy();
  pending->domain_label = config.has_domain(request.domain()) ? request.domain() : "unknown";
  pending->items.resize(static_cast<std::size_t>(request.descriptors_size()));

  std::vector<rules::EnvoyEntry> entries;
  std::unordered_set<std::string_view> replaced;
  for (int i = 0; i < request.descriptors_size(); ++i) {
    const auto& descriptor = request.descriptors(i);
    Pending::Item& item = pending->items[static_cast<std::size_t>(i)];
    entries.clear();
    for (const auto& entry : descriptor.entries()) entries.push_back({entry.key(), entry.value()});
    item.hits = descriptor.has_hits_addend() ? descriptor.hits_addend().value()
                                             : std::max<std::uint64_t>(1, request.hits_addend());
    if (descriptor.has_limit()) {
      // Envoy's route chose the limit: the request's own, counted under the same key.
      const auto unit = static_cast<EnvoyUnit>(descriptor.limit().unit());
      EnvoyLimit own;
      own.requests_per_unit = descriptor.limit().requests_per_unit();
      own.unit = unit;
      own.rule = Rule{.algorithm = Algorithm::kFixedWindow,
                      .limit = own.requests_per_unit,
                      .period_ms = rules::envoy_unit_seconds(unit) * 1000};
      own.stats_key = request.domain();
      for (const auto& e : entries)
        own.stats_key += "." + std::string(e.key) + "_" + std::string(e.value);
      item.stats_key = own.stats_key;
      item.counted_key = config.counted_key(request.domain(), entries);
      item.override_limit = std::move(own);
      continue;
    }
    rules::EnvoyMatch found = config.match(request.domain(), entries);
    if (found.limit == nullptr) continue;
    for (const std::string& name : found.limit->replaces) replaced.insert(name);
    if (found.limit->unlimited) {
      item.unlimited = true;
      continue;
    }
    item.limit = found.limit;
    item.counted_key = std::move(found.counted_key);
    item.stats_key = std::move(found.stats_key);
  }
  // A limit another matched limit replaces is not applied (the peer's `replaces`).
  for (Pending::Item& item : pending->items) {
    if (item.limit != nullptr && !item.limit->name.empty() &&
        replaced.count(item.limit->name) != 0) {
      item.limit = nullptr;
    }
  }

  std::vector<client::AcquireRequest> batch;
  for (Pending::Item& item : pending->items) {
    const EnvoyLimit* limit = item.active();
    if (limit == nullptr) continue;
    client::AcquireRequest one;
    one.key = item.counted_key;
    one.rule = limit->rule;
    // hits_addend 0 on a descriptor asks without counting.
    one.peek = item.hits == 0;
    one.cost = static_cast<std::uint32_t>(
        std::clamp<std::uint64_t>(item.hits, 1, std::numeric_limits<std::uint32_t>::max()));
    if (limit->on_failure == rules::OnFailure::kOpen) {
      one.failure_policy = client::FailurePolicy::kOpen;
    } else if (limit->on_failure == rules::OnFailure::kClosed) {
      one.failure_policy = client::FailurePolicy::kClosed;
    }
    item.batch_index = batch.size();
    batch.push_back(one);
  }
  if (batch.empty()) {
    finish(*pending, {});
    return;
  }
  // The deadline: ours, or a little before the caller's, whichever is sooner.
  SteadyClock::time_point deadline = pending->arrived + options_.deadline;
  if (caller_deadline != SteadyClock::time_point::max()) {
    deadline = std::min(deadline, caller_deadline - options_.caller_margin);
  }
  watch(pending, deadline);
  client_.acquire_batch_async(
      batch, [this, pending](std::span<const client::Result<client::Decision>> results) {
        finish(*pending, results);
      });
}

void RlsFront::finish(Pending& pending, std::span<const client::Result<client::Decision>> results) {
  // The other of the answer and the deadline came first.
  if (pending.answered.exchange(true)) return;
  unwatch(pending);
  const bool timed_out = results.empty() && std::any_of(pending.items.begin(), pending.items.end(),
                                                        [](const Pending::Item& i) {
                                                          return i.batch_index.has_value();
                                                        });
  const std::uint64_t now_ms = unix_ms();
  rls::RateLimitResponse& response = *pending.response;
  std::vector<LimitOutcome> outcomes;
  bool over = false;
  for (const Pending::Item& item : pending.items) {
    auto* status = response.add_statuses();
    status->set_code(rls::RateLimitResponse::OK);
    if (item.unlimited) {
      status->set_limit_remaining(std::numeric_limits<std::uint32_t>::max());
      continue;
    }
    const EnvoyLimit* limit = item.active();
    if (limit == nullptr) continue;  // no limit, or replaced: OK without current_limit
    const std::string_view label = limit_label(*limit, item.stats_key);
    const client::Result<client::Decision>* result =
        item.batch_index && *item.batch_index < results.size() ? &results[*item.batch_index]
                                                               : nullptr;
    LimitOutcome outcome;
    outcome.policy = label;
    outcome.shadow = limit->shadow;
    outcome.limit = limit->rule.limit;
    outcome.period_ms = limit->rule.period_ms;
    set_current_limit(*status, *limit);
    if (result != nullptr && result->ok()) {
      client::Decision d = **result;
      // hits_addend 0 counted nothing: what is left is the one-unit peek's remaining plus the
      // unit it asked about (the peer's INCRBY 0 reports limit - count).
      if (item.hits == 0 && d.allowed && d.remaining < std::numeric_limits<std::uint32_t>::max()) {
        ++d.remaining;
      }
      outcome.decision = d;
      metrics_.decided(label, d.allowed ? "allowed" : "denied", client::source_name(d.source));
      if (d.allowed) {
        status->set_limit_remaining(d.remaining);
      } else if (limit->shadow) {
        metrics_.shadow_denied(label);  // counted, answered OK
      } else {
        status->set_code(rls::RateLimitResponse::OVER_LIMIT);
        over = true;
      }
      set_reset(*status, *limit, &d, now_ms);
    } else {
      metrics_.decided(label, "error", timed_out ? "deadline" : "");
      outcome.fails_closed = fails_closed(*limit);
      if (outcome.fails_closed && !limit->shadow) {
        status->set_code(rls::RateLimitResponse::OVER_LIMIT);
        over = true;
        set_reset(*status, *limit, nullptr, now_ms);
      } else {
        status->clear_current_limit();  // failed open: as if no limit applied
      }
    }
    outcomes.push_back(outcome);
  }
  response.set_overall_code(over ? rls::RateLimitResponse::OVER_LIMIT : rls::RateLimitResponse::OK);
  if (options_.headers || options_.legacy_headers) {
    const Answer answer = combine(outcomes, now_ms);
    for (const client::HeaderField& field : answer.headers) {
      const bool draft = field.name == "RateLimit-Policy" || field.name == "RateLimit" ||
                         field.name == "Retry-After";
      const bool legacy = field.name == "RateLimit-Limit" || field.name == "RateLimit-Remaining" ||
                          field.name == "RateLimit-Reset";
      if ((draft && options_.headers) || (legacy && options_.legacy_headers)) {
        auto* header = response.add_response_headers_to_add();
        header->set_key(std::string(field.name));
        header->set_value(field.value);
      }
    }
  }
  metrics_.rls_answered(pending.domain_label, over ? "OVER_LIMIT" : "OK",
                        SteadyClock::now() - pending.arrived);
  Done done = std::move(pending.done);
  done(RlsStatus{});
}

// One call between its arrival and its answer: the request parsed from the call's message,
// and the response the front fills in. Both live on an arena whose first block is part of the
// call, so with --threads 1 a usual call's messages cost no allocation of their own (they were
// two fifths of the gateway's time in malloc and free: docs/BENCHMARKS.md); a larger call takes
// more blocks, and so does a response filled on the client's own I/O thread (--threads above 1:
// protobuf gives each thread its own part of an arena).
struct RlsServer::Call {
  static constexpr std::size_t kArenaBlock = 4096;

  explicit Call(http::GrpcCall c) : grpc(std::move(c)) {}
  http::GrpcCall grpc;
  alignas(std::max_align_t) char block[kArenaBlock];
  google::protobuf::Arena arena{block, kArenaBlock};
  rls::RateLimitRequest& request =
      *google::protobuf::Arena::CreateMessage<rls::RateLimitRequest>(&arena);
  rls::RateLimitResponse& response =
      *google::protobuf::Arena::CreateMessage<rls::RateLimitResponse>(&arena);
};

RlsServer::RlsServer(RlsFront& front, boost::asio::io_context& io, http::GrpcLimits limits)
    : front_(front), server_(io, [&] {
        limits.max_message_bytes = front.options().max_message_bytes;
        return limits;
      }()) {
  server_.add_method(std::string(kMethod), [this](http::GrpcCall call) { serve(std::move(call)); });
}

void RlsServer::serve(http::GrpcCall grpc) {
  auto call = std::make_shared<Call>(std::move(grpc));
  const std::string_view message = call->grpc.message();
  RlsFront::Done done = [call](RlsStatus status) {
    if (status.ok()) return call->grpc.answer(call->response.SerializeAsString());
    call->grpc.fail(status.code, status.message);
  };
  if (!call->request.ParseFromArray(message.data(), static_cast<int>(message.size()))) {
    return front_.refuse(done, "the request is not a RateLimitRequest message");
  }
  front_.decide(call->request, call->response, std::move(done), call->grpc.deadline());
}

void RlsServer::start(const std::string& host, std::uint16_t port) {
  try {
    server_.start(host, port);
  } catch (const std::exception& e) {
    throw std::runtime_error("gRPC cannot listen on " + net::format_host_port(host, port) + ": " +
                             e.what());
  }
}

void RlsServer::stop(std::chrono::milliseconds grace, std::function<void()> stopped) {
  server_.stop(grace, std::move(stopped));
}

void RlsServer::shutdown(std::chrono::milliseconds grace) {
  std::promise<void> done;
  server_.stop(grace, [&done] { done.set_value(); });
  done.get_future().wait();
}

}  // namespace sluice::gateway
