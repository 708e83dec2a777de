// sluiced: parses flags, starts a Server, stops it on SIGINT or SIGTERM, and rereads its cluster
// file on SIGHUP.
// Exit status: 0 after a clean stop, 1 when the server cannot start, 2 on bad flags.
#include "net/asio.h"  // before any other Asio header

#include <fmt/core.h>
#include <malloc.h>
#include <boost/asio/signal_set.hpp>
#include <boost/program_options.hpp>
#include <csignal>
#include <cstdint>
#include <exception>
#include <functional>
#include <iostream>
#include <limits>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cli/flags.h"
#include "core/version.h"
#include "etcd/etcd_client.h"
#include "log/log.h"
#include "net/host_port.h"
#include "server/auth.h"
#include "server/server.h"

namespace {

namespace po = boost::program_options;
using sluice::server::ServerConfig;

using sluice::cli::count_flag;
using sluice::cli::duration_flag;
using sluice::cli::FlagError;
using sluice::cli::size_flag;

// "1GiB" when the size is a whole number of GiB, and so on down to bytes.
std::string format_size(std::uint64_t bytes) {
  constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (unit < 4 && bytes != 0 && bytes % 1024 == 0) {
    bytes /= 1024;
    ++unit;
  }
  return fmt::format("{}{}", bytes, kUnits[unit]);
}

std::string join_ports(const std::vector<std::uint16_t>& ports) {
  std::string out;
  for (std::size_t i = 0; i < ports.size(); ++i) {
    if (i != 0) out += ',';
    out += std::to_string(ports[i]);
  }
  return out;
}

// Returns the config, or nullopt after printing help.
std::optional<ServerConfig> parse_flags(int argc, char** argv) {
  po::options_description options("sluiced options");
  // Values are read as strings and parsed here: program_options accepts "-1" for an unsigned.
  options.add_options()("help,h", "print this help and exit")(
      "config", po::value<std::string>(),
      "read options from FILE, one `NAME = VALUE` per line (NAME: a flag without --; a switch is "
      "`NAME = true`); flags on the command line win")(
      "bind", po::value<std::string>()->default_value("127.0.0.1"), "address to listen on")(
      "source-address", po::value<std::string>()->default_value(""),
      "local address of the connections this node opens, to other nodes and to etcd (default: "
      "the kernel's choice)")("port", po::value<std::string>()->default_value("7420"),
                              "public port (0 = ephemeral)")(
      "shard-base-port", po::value<std::string>()->default_value("0"),
      "shard i listens on base + i (0 = port + 1 + i)")(
      "shards", po::value<std::string>()->default_value("0"), "shard threads (0 = one per core)")(
      "max-memory", po::value<std::string>()->default_value("1GiB"),
      "memory for counters across all shards (e.g. 64MiB, 1GiB; at least 1MiB)")(
      "max-frame", po::value<std::string>()->default_value("1MiB"), "largest frame body")(
      "max-key", po::value<std::string>()->default_value("256"), "longest key in bytes")(
      "max-batch", po::value<std::string>()->default_value("4096"), "most items per request")(
      "max-connections", po::value<std::string>()->default_value("10000"),
      "open connections across all ports")(
      "max-queued-output", po::value<std::string>()->default_value("4MiB"),
      "per connection: stop reading while this much output waits to be sent")(
      "max-pending-items", po::value<std::string>()->default_value("65536"),
      "per connection: stop reading while this many items wait for other shards")(
      "max-buffer-memory", po::value<std::string>()->default_value("0"),
      "connection buffers across all shards; when a shard's share is spent, the connections "
      "holding the most are closed (0 = max-memory / 4, at least room for 4 connections at "
      "their limits per shard)")(
      "idle-timeout", po::value<std::string>()->default_value("5m"),
      "close a connection silent this long, with a unit (e.g. 30s, 5m; up to 366d; 0 = never)")(
      "shutdown-timeout", po::value<std::string>()->default_value("5s"),
      "on SIGTERM, time for connections to get their last replies and SHUTTING_DOWN (0 = close "
      "at once; a second signal closes at once)")("sliding-log-cap",
                                                  po::value<std::string>()->default_value("10000"),
                                                  "largest limit a sliding_log rule may have")(
      "replication-window", po::value<std::string>()->default_value("1MiB"),
      "bytes of replication sent to one shard of a replica and not yet acknowledged, at most "
      "(64KiB..1GiB); beyond, changes wait in a queue of 65,536 records per replica and shard")(
      "replication-stall-after", po::value<std::string>()->default_value("1s"),
      "a replica whose oldest unacknowledged change is older than this is reported stalled "
      "(log, STATS); the node keeps serving")(
      "node-id", po::value<std::string>()->default_value(""),
      "node name (default bind:port); with --cluster, its id in the cluster file")(
      "cluster", po::value<std::string>()->default_value(""),
      "static cluster mode: the cluster file (one 'ID HOST:PORT' per node, an 'epoch N' line), "
      "the same on every node; SIGHUP rereads it")(
      "etcd", po::value<std::string>()->default_value(""),
      "etcd cluster mode: etcd's client URLs (http://HOST:PORT[,...]); membership, failover and "
      "epochs come from etcd (needs --cluster-name and --node-id)")(
      "cluster-name", po::value<std::string>()->default_value(""),
      "with --etcd: the cluster's name, its key prefix /sluice/NAME/ in etcd")(
      "lease-ttl", po::value<std::string>()->default_value("2s"),
      "with --etcd: the node's lease TTL (whole seconds, at least 2s): a dead node's keys move "
      "to their replica about this long after it dies")(
      "advertise", po::value<std::string>()->default_value(""),
      "with --etcd: HOST:PORT others reach this node at (default: --bind and --port)")(
      "auth-token-file", po::value<std::string>(),
      "require clients to send the token in this file (whole file, trailing whitespace "
      "stripped; keep it mode 0600)")(
      "http-listen", po::value<std::string>()->default_value(""),
      "HOST:PORT to serve /metrics (Prometheus), /healthz and /readyz on, over HTTP (default: "
      "off)")("busy-poll", "shard threads poll instead of sleeping (each keeps a core busy)")(
      "huge-pages",
      "keep counters in 2 MiB transparent huge pages (shards of 64 MiB or more): faster lookups "
      "in large tables, a pause of up to milliseconds per 2 MiB the table grows into")(
      "log-format", po::value<std::string>()->default_value("text"),
      "log lines on stderr: text (RFC 3339 time, level, component; under systemd's journal the "
      "level as a priority and no time) or json (one object per line)")(
      "version", "print the version and exit");

  const po::variables_map vm = sluice::cli::parse_command_line(argc, argv, options);
  if (vm.count("help") != 0) {
    std::cout << "Usage: sluiced [options]\n" << options << std::flush;
    return std::nullopt;
  }
  if (vm.count("version") != 0) {
    fmt::print("sluiced {}\n", sluice::kVersion);
    return std::nullopt;
  }
  auto text = [&](const char* flag) { return vm[flag].as<std::string>(); };
  sluice::cli::configure_log_flag("sluiced", text("log-format"));

  ServerConfig config;
  config.bind = text("bind");
  boost::system::error_code bad_address;
  boost::asio::ip::make_address(config.bind, bad_address);
  if (bad_address) {
    throw FlagError{fmt::format("--bind {}: expected an IP address, e.g. 127.0.0.1, 0.0.0.0, ::1",
                                config.bind)};
  }
  config.source_address = text("source-address");
  if (!config.source_address.empty()) {
    boost::asio::ip::make_address(config.source_address, bad_address);
    if (bad_address) {
      throw FlagError{fmt::format("--source-address {}: expected an IP address, e.g. 127.0.0.2",
                                  config.source_address)};
    }
  }
  config.port = static_cast<std::uint16_t>(count_flag("port", text("port"), 0, 65535));
  config.shard_base_port =
      static_cast<std::uint16_t>(count_flag("shard-base-port", text("shard-base-port"), 0, 65535));
  config.shards = static_cast<unsigned>(count_flag("shards", text("shards"), 0, 1024));
  config.max_memory = size_flag("max-memory", text("max-memory"), 1u << 20,
                                std::numeric_limits<std::size_t>::max());
  config.max_frame = static_cast<std::uint32_t>(
      size_flag("max-frame", text("max-frame"), 64, std::numeric_limits<std::uint32_t>::max()));
  config.max_key = static_cast<std::uint16_t>(count_flag("max-key", text("max-key"), 1, 65535));
  config.max_batch =
      static_cast<std::uint16_t>(count_flag("max-batch", text("max-batch"), 1, 65535));
  config.max_connections = static_cast<std::uint32_t>(count_flag(
      "max-connections", text("max-connections"), 1, std::numeric_limits<std::uint32_t>::max()));
  config.max_queued_output = size_flag("max-queued-output", text("max-queued-output"), 1,
                                       std::numeric_limits<std::uint32_t>::max());
  config.max_pending_items = static_cast<std::uint32_t>(
      count_flag("max-pending-items", text("max-pending-items"), 1, 1u << 24));
  config.max_buffer_memory = text("max-buffer-memory") == "0"
                                 ? 0
                                 : size_flag("max-buffer-memory", text("max-buffer-memory"), 1,
                                             std::numeric_limits<std::size_t>::max());
  constexpr std::uint64_t kMaxIdleMs = 366ull * 24 * 3600 * 1000;
  config.idle_timeout =
      std::chrono::milliseconds(duration_flag("idle-timeout", text("idle-timeout"), 0, kMaxIdleMs));
  config.shutdown_timeout = std::chrono::milliseconds(
      duration_flag("shutdown-timeout", text("shutdown-timeout"), 0, 3'600'000));
  config.sliding_log_cap = static_cast<std::uint32_t>(
      count_flag("sliding-log-cap", text("sliding-log-cap"), 1, sluice::server::kMaxSlidingLogCap));
  config.replication_window_bytes =
      size_flag("replication-window", text("replication-window"),
                sluice::server::kMinReplicationWindow, sluice::server::kMaxReplicationWindow);
  config.replication_stall_after = std::chrono::milliseconds(
      duration_flag("replication-stall-after", text("replication-stall-after"), 1, 3'600'000));
  config.node_id = text("node-id");
  config.cluster_file = text("cluster");
  if (!config.cluster_file.empty() && config.node_id.empty()) {
    throw FlagError{"--cluster needs --node-id: this node's id in the cluster file"};
  }
  config.etcd = text("etcd");
  config.cluster_name = text("cluster-name");
  config.advertise = text("advertise");
  const std::uint64_t ttl_ms = duration_flag("lease-ttl", text("lease-ttl"), 2000, 3'600'000);
  if (ttl_ms % 1000 != 0) throw FlagError{"--lease-ttl: whole seconds (etcd's TTLs are)"};
  config.etcd_lease_ttl = std::chrono::seconds(ttl_ms / 1000);
  if (!config.etcd.empty()) {
    // A malformed URL is a bad flag value (exit 2), not a failure to start.
    if (const auto endpoints = sluice::etcd::parse_endpoints(config.etcd); !endpoints) {
      throw FlagError{"--etcd " + config.etcd + ": " + endpoints.error()};
    }
    if (!config.cluster_file.empty()) {
      throw FlagError{"--etcd and --cluster are two cluster modes: give one"};
    }
    if (config.node_id.empty() || config.cluster_name.empty()) {
      throw FlagError{"--etcd needs --cluster-name and --node-id"};
    }
  } else if (!config.cluster_name.empty() || !config.advertise.empty()) {
    throw FlagError{"--cluster-name and --advertise are for the etcd mode (--etcd)"};
  }
  if (vm.count("auth-token-file") != 0) {
    config.auth_token = sluice::cli::token_file_flag("sluiced", text("auth-token-file"));
  }
  config.http_listen = text("http-listen");
  if (!config.http_listen.empty()) {
    const auto listen = sluice::net::parse_listen_address(config.http_listen);
    if (listen) boost::asio::ip::make_address(listen->host, bad_address);
    if (!listen || bad_address) {
      throw FlagError{fmt::format(
          "--http-listen {}: expected IP:PORT, e.g. 127.0.0.1:9420, 0.0.0.0:9420 or [::1]:9420",
          config.http_listen)};
    }
  }
  config.busy_poll = vm.count("busy-poll") != 0;
  config.huge_pages = vm.count("huge-pages") != 0;
  return config;
}

}  // namespace

int main(int argc, char** argv) {
  std::optional<ServerConfig> config;
  try {
    config = parse_flags(argc, argv);
  } catch (const FlagError& e) {
    fmt::print(stderr, "sluiced: {}\nTry 'sluiced --help'.\n", e.what());
    return 2;
  }
  if (!config) return 0;
  if (const std::string warning = sluice::server::unauthenticated_bind_warning(*config);
      !warning.empty()) {
    sluice::log::warning("node", warning);
  }

  // Asio sends with MSG_NOSIGNAL; this also covers any other write to a closed socket.
  std::signal(SIGPIPE, SIG_IGN);
  // Buffers of 128 KiB or more (a connection's grown input, a burst of output) are mapped on
  // their own and unmapped when freed, instead of staying cached in the allocator's heaps after
  // their connection ends. Setting the threshold also stops glibc from raising it by itself.
  ::mallopt(M_MMAP_THRESHOLD, 128 * 1024);
  try {
    sluice::server::Server server(*config);
    // Installed before start() so that a signal during start-up already means "stop".
    boost::asio::io_context signals_io(1);
    boost::asio::signal_set signals(signals_io, SIGINT, SIGTERM);
    // The first signal stops gracefully (--shutdown-timeout); a second one closes everything.
    signals.async_wait([&](const boost::system::error_code& ec, int signal) {
      if (ec) return;
      sluice::log::info("node", fmt::format("signal {}: stopping", signal));
      server.stop();
      signals.async_wait([&server](const boost::system::error_code& again, int) {
        if (!again) server.stop_now();
      });
    });
    // SIGHUP: reread the cluster file; a refused file leaves the map in force.
    boost::asio::signal_set hangups(signals_io, SIGHUP);
    std::function<void(const boost::system::error_code&, int)> on_hangup =
        [&](const boost::system::error_code& ec, int) {
          if (ec) return;
          if (config->cluster_file.empty()) {
            sluice::log::warning("cluster",
                                 "SIGHUP ignored: not in static cluster mode (--cluster)");
          } else if (const std::string refused = server.reload_cluster(); refused.empty()) {
            sluice::log::info(
                "cluster",
                fmt::format("{} reread: epoch {}{}", config->cluster_file, server.cluster_epoch(),
                            server.cluster_member()
                                ? ""
                                : " (this node is not listed: it serves no key, it "
                                  "redirects every one)"));
          } else {
            sluice::log::error("cluster",
                               fmt::format("{} refused, the map of epoch {} stays: {}",
                                           config->cluster_file, server.cluster_epoch(), refused));
          }
          hangups.async_wait(on_hangup);
        };
    hangups.async_wait(on_hangup);
    server.start();
    fmt::print(
        "sluiced {} listening on {} (public), shard ports {} ({} shards), max memory {}, buffer "
        "memory {}{}\n",
        sluice::kVersion, sluice::net::format_host_port(config->bind, server.port()),
        join_ports(server.shard_ports()), server.shard_count(), format_size(config->max_memory),
        format_size(server.max_buffer_memory()),
        sluice::server::requires_authentication(*config) ? ", token required" : "");
    if (!config->etcd.empty()) {
      fmt::print("sluiced: node {} of the etcd cluster {} at {} (lease TTL {} s)\n",
                 config->node_id, config->cluster_name, config->etcd,
                 config->etcd_lease_ttl.count());
    }
    if (!config->http_listen.empty()) {
      const auto listen = sluice::net::parse_listen_address(config->http_listen);
      fmt::print("sluiced: metrics on http://{}/metrics (also /healthz, /readyz)\n",
                 sluice::net::format_host_port(listen->host, server.http_port()));
    }
    if (!config->cluster_file.empty()) {
      fmt::print("sluiced: node {} of the static cluster {} (epoch {})\n", config->node_id,
                 config->cluster_file, server.cluster_epoch());
    }
    std::fflush(stdout);
    sluice::log::info("node",
                      fmt::format("listening on {} (public), shard ports {} ({} shards)",
                                  sluice::net::format_host_port(config->bind, server.port()),
                                  join_ports(server.shard_ports()), server.shard_count()));
    // Runs until the server has stopped (a second signal may still arrive meanwhile).
    std::thread waiter([&] {
      server.wait();
      boost::asio::post(signals_io, [&signals, &hangups] {
        signals.cancel();
        hangups.cancel();
      });
    });
    signals_io.run();
    waiter.join();
  } catch (const std::exception& e) {
    sluice::log::error("node", e.what());
    return 1;
  }
  sluice::log::info("node", "stopped");
  return 0;
}
