#include "server/server.h"

#include <utility>

#include <fmt/core.h>
#include <pthread.h>
#include <algorithm>
#include <atomic>
#include <boost/asio/ip/address.hpp>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <system_error>
#include <thread>

#include "server/shard.h"

namespace sluice::server {

namespace {

// HELLO numbers shards with 16 bits and reserves 0xFFFF for the public port.
constexpr unsigned kMaxShards = 1024;
constexpr std::chrono::milliseconds kMaxIdleTimeout{366ll * 24 * 3600 * 1000};

}  // namespace

struct Server::Impl {
  ServerContext context;
  std::vector<std::thread> threads;
  std::atomic<bool> started{false};
  std::atomic<bool> stop_requested{false};
  std::mutex wait_mutex;
};

Server::Server(ServerConfig config) : impl_(std::make_unique<Impl>()) {
  ServerContext& context = impl_->context;
  context.config = std::move(config);
  unsigned shards = context.config.shards;
  if (shards == 0) shards = std::max(1u, std::thread::hardware_concurrency());
  if (shards > kMaxShards) {
    throw std::invalid_argument(fmt::format("{} shards requested, at most {}", shards, kMaxShards));
  }
  if (context.config.max_frame == 0 || context.config.max_key == 0 ||
      context.config.max_batch == 0) {
    throw std::invalid_argument("max_frame, max_key and max_batch must be at least 1");
  }
  // Longer idle timeouts would overflow steady_clock arithmetic; nobody needs more than this.
  context.config.idle_timeout = std::min(context.config.idle_timeout, kMaxIdleTimeout);
  context.shard_count = shards;
  context.clock = context.config.clock != nullptr ? context.config.clock : &SystemClock::instance();
  context.shards.reserve(shards);
  for (unsigned i = 0; i < shards; ++i)
    context.shards.push_back(std::make_unique<Shard>(context, i));
}

Server::~Server() {
  stop();
  wait();
}

void Server::start() {
  if (impl_->started.exchange(true)) throw std::logic_error("Server::start() called twice");
  ServerContext& context = impl_->context;
  const ServerConfig& config = context.config;

  boost::system::error_code ec;
  const auto address = boost::asio::ip::make_address(config.bind, ec);
  if (ec) {
    throw std::system_error(std::make_error_code(std::errc::invalid_argument),
                            fmt::format("bad bind address '{}'", config.bind));
  }

  // The public port: the first shard picks it (ephemeral when 0), the others share it through
  // SO_REUSEPORT and the kernel spreads incoming connections over them.
  context.public_port = context.shards[0]->listen_public(address, config.port);
  for (unsigned i = 1; i < context.shard_count; ++i) {
    context.shards[i]->listen_public(address, context.public_port);
  }

  context.shard_ports.resize(context.shard_count);
  for (unsigned i = 0; i < context.shard_count; ++i) {
    unsigned wanted = 0;
    if (config.shard_base_port != 0) {
      wanted = config.shard_base_port + i;
    } else if (config.port != 0) {
      wanted = config.port + 1u + i;
    }
    if (wanted > 65535) {
      throw std::system_error(std::make_error_code(std::errc::invalid_argument),
                              fmt::format("shard {} would listen on port {}", i, wanted));
    }
    context.shard_ports[i] =
        context.shards[i]->listen_shard(address, static_cast<std::uint16_t>(wanted));
  }

  context.node_id = config.node_id.empty() ? fmt::format("{}:{}", config.bind, context.public_port)
                                           : config.node_id;

  for (auto& shard : context.shards) shard->spawn();
  impl_->threads.reserve(context.shard_count);
  for (auto& shard : context.shards) {
    Shard* s = shard.get();
    impl_->threads.emplace_back([s] {
      const std::string name = fmt::format("sluiced-{}", s->index());
      pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
      s->run();
    });
  }
}

void Server::stop() {
  if (!impl_->started.load() || impl_->stop_requested.exchange(true)) return;
  for (auto& shard : impl_->context.shards) shard->request_stop();
}

void Server::wait() {
  std::lock_guard<std::mutex> lock(impl_->wait_mutex);
  for (std::thread& thread : impl_->threads) {
    if (thread.joinable()) thread.join();
  }
}

std::uint16_t Server::port() const { return impl_->context.public_port; }

std::vector<std::uint16_t> Server::shard_ports() const { return impl_->context.shard_ports; }

unsigned Server::shard_count() const { return impl_->context.shard_count; }

}  // namespace sluice::server
std::size_t Server::TEST_peak_queued_output() const {
  std::size_t peak = 0;
  for (const auto& shard : impl_->context.shards)
    peak = std::max(peak, shard->TEST_peak_queued_output());
  return peak;
}

