#include "client/seed_finder.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "client/sync_call.h"
#include "core/clock.h"
#include "protocol/cluster_messages.h"

namespace sluice::client::detail {

namespace asio = boost::asio;

std::uint64_t SeedBackoff::next_wait_ns(std::uint64_t random) {
  const std::uint64_t fifth = base_ns_ / 5;
  const std::uint64_t wait = base_ns_ - fifth + random % (2 * fifth + 1);
  base_ns_ = std::min(kMaxNs, base_ns_ * 2);
  return wait;
}

SeedFinder::SeedFinder(asio::io_context& io, const ClientOptions& options, MapTracker& maps,
                       ConnectionFactory& connections)
    : io_(io),
      options_(options),
      maps_(maps),
      connections_(connections),
      timer_(io),
      random_((reinterpret_cast<std::uintptr_t>(this) ^ monotonic_now_ns()) | 1) {}

void SeedFinder::start(std::vector<NodeConnection*> tried) {
  // Posted: the I/O thread may already be reporting HELLOs (on_ready), and owns this state.
  asio::post(io_, [this, tried = std::move(tried)]() mutable {
    if (closed_) return;
    seeds_ = std::move(tried);
    seeking_ = true;
    arm();
  });
}

void SeedFinder::close() {
  closed_ = true;
  seeking_ = false;
  timer_.cancel();
}

void SeedFinder::arm() {
  // xorshift64, as for the breaker's probes: waits differ between clients, nothing more.
  random_ ^= random_ << 13;
  random_ ^= random_ >> 7;
  random_ ^= random_ << 17;
  timer_.expires_after(std::chrono::nanoseconds(backoff_.next_wait_ns(random_)));
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) round();
  });
}

void SeedFinder::round() {
  if (!seeking_) return;
  for (std::size_t i = 0; i < seeds_.size(); ++i) {
    if (seeds_[i] == nullptr) {
      Result<asio::ip::tcp::endpoint> endpoint = resolve(io_, options_.servers[i]);
      if (!endpoint.ok()) continue;
      seeds_[i] =
          &connections_.add_connection(options_.servers[i], *endpoint, protocol::kPublicPort);
    }
    if (seeds_[i]->ready()) {
      ask(i);  // answered HELLO while another seed was being asked
    } else {
      seeds_[i]->begin_connect();  // at once, whatever the connection's own backoff says
    }
  }
  arm();
}

void SeedFinder::on_ready(NodeConnection& connection) {
  if (!seeking_) return;
  for (std::size_t i = 0; i < seeds_.size(); ++i) {
    if (seeds_[i] == &connection) return ask(i);
  }
}

void SeedFinder::ask(std::size_t seed) {
  if (!seeking_ || asking_) return;
  NodeConnection& connection = *seeds_[seed];
  // A node of an older protocol knows no CLUSTER and is outside any cluster.
  if (connection.hello().version < kFirstClusterVersion) return found(seed, std::nullopt);
  Completion completion;
  completion.sink = this;
  completion.part = static_cast<std::uint32_t>(seed);
  asking_ = connection.submit(encode_cluster, completion).ok();
}

void SeedFinder::on_reply(std::uint32_t seed, const protocol::Frame& reply) {
  asking_ = false;
  if (!seeking_) return;
  protocol::ClusterMapMessage message;
  if (reply.header.opcode != protocol::Opcode::kCluster ||
      !protocol::parse_cluster_reply(reply.body, message)) {
    return;
  }
  Result<std::optional<SeedMap>> map = seed_map(message, options_.servers[seed]);
  if (!map.ok()) return;
  found(seed, std::move(map).value());
}

void SeedFinder::on_failure(std::uint32_t, const Status&) { asking_ = false; }

void SeedFinder::found(std::size_t seed, std::optional<SeedMap> map) {
  seeking_ = false;
  timer_.cancel();
  maps_.seed_answered(*seeds_[seed], options_.servers[seed], std::move(map));
  // The other seeds' connections carry nothing: closed (a later call never goes to them).
  for (std::size_t i = 0; i < seeds_.size(); ++i) {
    if (i != seed && seeds_[i] != nullptr) seeds_[i]->close_if_idle();
  }
}

}  // namespace sluice::client::detail
