// sluice-gateway: the HTTP side of Sluice for proxies and services in any language
// (docs/GATEWAY.md). Flags, the rules file and its reloads, the client, the HTTP server, signals.
#include "net/asio.h"  // before any other Asio header

#include <fmt/core.h>
#include <fmt/ostream.h>
#include <fmt/ranges.h>

#include <atomic>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/program_options.hpp>
#include <csignal>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cli/flags.h"
#include "client/client.h"
#include "core/version.h"
#include "http/server.h"
#include "log/log.h"
#include "net/host_port.h"
#include "rules/rule_set.h"
#include "rules/rule_source.h"
#include "tools/gateway/gateway.h"
#include "tools/gateway/gateway_metrics.h"
#include "tools/gateway/rls.h"

namespace {

namespace po = boost::program_options;
using sluice::cli::FlagError;

struct Flags {
  std::string listen_host = "127.0.0.1";
  std::uint16_t listen_port = 8080;
  sluice::client::ClientOptions client;
  std::string rules;
  sluice::http::ServerLimits limits;
  unsigned threads = 1;
  sluice::gateway::ForwardedBy forwarded_by = sluice::gateway::ForwardedBy::kNginx;
  sluice::rules::RuleSetOptions rule_options;
  std::optional<sluice::net::HostPort> grpc_listen;  // the Envoy RLS front, when asked for
  sluice::gateway::RlsOptions rls;
  sluice::http::GrpcLimits grpc;  // the RLS front's connections
};

std::optional<Flags> parse_flags(int argc, char** argv) {
  po::options_description options("sluice-gateway options");
  options.add_options()("help,h", "print this help and exit")(
      "config", po::value<std::string>(),
      "read options from FILE, one `NAME = VALUE` per line (NAME: a flag without --; a switch is "
      "`NAME = true`); flags on the command line win")("version", "print the version")(
      "listen", po::value<std::string>()->default_value("127.0.0.1:8080"),
      "HOST:PORT to serve /check, /v1/acquire, /healthz, /readyz and /metrics on")(
      "servers", po::value<std::string>()->default_value("127.0.0.1:7420"),
      "the cluster's seeds, HOST:PORT[,HOST:PORT...]")("rules", po::value<std::string>(),
                                                       "the rules file (docs/RULES.md); required")(
      "auth-token-file", po::value<std::string>(), "the cluster's shared secret")(
      "failure-policy", po::value<std::string>()->default_value("open"),
      "open or closed: for policies that name none, when the cluster cannot answer")(
      "gateways", po::value<std::string>()->default_value("1"),
      "gateways sharing each limit: the local fallback admits limit / N")(
      "timeout", po::value<std::string>()->default_value("50ms"),
      "the cluster's deadline per request; past it the failure policy decides")(
      "threads", po::value<std::string>()->default_value("1"),
      "threads serving HTTP and gRPC (with 1, the client runs on that thread too)")(
      "max-connections", po::value<std::string>()->default_value("10000"),
      "HTTP connections at once, and gRPC connections at once (counted apart)")(
      "max-header-bytes", po::value<std::string>()->default_value("8KiB"),
      "request line and headers; more: 431 (gRPC: a call's header list; more: its stream reset)")(
      "max-body-bytes", po::value<std::string>()->default_value("64KiB"),
      "request body; more: 413")(
      "idle-timeout", po::value<std::string>()->default_value("60s"),
      "close a keep-alive connection (or a gRPC one with no call open) idle this long")(
      "request-timeout", po::value<std::string>()->default_value("10s"),
      "a request must arrive whole within this")(
      "proxy", po::value<std::string>()->default_value("nginx"),
      "whose headers /check reads: nginx (X-Original-*, X-Real-IP) or forwarded (Traefik, "
      "Caddy: X-Forwarded-*, the last X-Forwarded-For address)")(
      "max-key", po::value<std::string>()->default_value("256"),
      "the cluster's --max-key: counted keys are kept within it")(
      "sliding-log-cap", po::value<std::string>()->default_value("10000"),
      "the cluster's --sliding-log-cap: a sliding_log policy above it is refused")(
      "grpc-listen", po::value<std::string>(),
      "HOST:PORT to serve Envoy's Rate Limit Service (ShouldRateLimit) on; off by default")(
      "rls-deadline", po::value<std::string>()->default_value("15ms"),
      "the longest a ShouldRateLimit call waits for the cluster (less when the caller's "
      "deadline is sooner); past it the failure policy answers")(
      "rls-headers", po::value<std::string>()->default_value("draft"),
      "response_headers_to_add: draft (RateLimit-Policy, RateLimit, Retry-After), legacy "
      "(RateLimit-Limit, -Remaining, -Reset as envoyproxy/ratelimit), both or none")(
      "rls-merge-domains", po::bool_switch(),
      "envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG: config files of one domain add up")(
      "rls-max-descriptors", po::value<std::string>()->default_value("64"),
      "descriptors in one ShouldRateLimit call; more: INVALID_ARGUMENT")(
      "rls-max-entries", po::value<std::string>()->default_value("32"),
      "entries in one descriptor; more: INVALID_ARGUMENT")(
      "rls-max-message-bytes", po::value<std::string>()->default_value("64KiB"),
      "a ShouldRateLimit request's size; more: RESOURCE_EXHAUSTED")(
      "rls-max-streams", po::value<std::string>()->default_value("256"),
      "calls open at once on one gRPC connection (HTTP/2's SETTINGS_MAX_CONCURRENT_STREAMS)")(
      "log-format", po::value<std::string>()->default_value("text"),
      "log lines on stderr: text (RFC 3339 time, level, component; under systemd's journal the "
      "level as a priority and no time) or json (one object per line)");
  const po::variables_map vm = sluice::cli::parse_command_line(argc, argv, options);
  if (vm.count("help") != 0) {
    fmt::print("Usage: sluice-gateway --rules PATH [options]\n{}", fmt::streamed(options));
    return std::nullopt;
  }
  if (vm.count("version") != 0) {
    fmt::print("sluice-gateway {}\n", sluice::kVersion);
    return std::nullopt;
  }
  const auto text = [&](const char* name) { return vm[name].as<std::string>(); };
  sluice::cli::configure_log_flag("sluice-gateway", text("log-format"));
  Flags f;
  const auto listen = sluice::net::parse_host_port(text("listen"));
  boost::system::error_code not_ip;
  if (listen) boost::asio::ip::make_address(listen->host, not_ip);
  if (!listen || not_ip) {
    throw FlagError{"--listen " + text("listen") +
                    ": expected IP:PORT, e.g. 127.0.0.1:8080 or [::1]:8080"};
  }
  f.listen_host = listen->host;
  f.listen_port = listen->port;
  f.client.servers = sluice::cli::servers_flag("servers", text("servers"));
  if (vm.count("rules") == 0) throw FlagError{"--rules PATH is required"};
  f.rules = text("rules");
  if (vm.count("auth-token-file") != 0) {
    f.client.auth_token = sluice::cli::token_file_flag("sluice-gateway", text("auth-token-file"));
  }
  const auto policy = sluice::client::parse_failure_policy(text("failure-policy"));
  if (!policy || *policy == sluice::client::FailurePolicy::kReport) {
    throw FlagError{"--failure-policy " + text("failure-policy") + ": expected open or closed"};
  }
  f.client.failure_policy = *policy;
  f.client.gateways =
      static_cast<std::uint32_t>(sluice::cli::count_flag("gateways", text("gateways"), 1, 65535));
  f.client.timeout =
      std::chrono::milliseconds(sluice::cli::duration_flag("timeout", text("timeout"), 1, 60'000));
  f.client.client_name = "sluice-gateway";
  f.threads = static_cast<unsigned>(sluice::cli::count_flag("threads", text("threads"), 1, 256));
  f.limits.max_connections = static_cast<std::uint32_t>(
      sluice::cli::count_flag("max-connections", text("max-connections"), 1, 1'000'000));
  f.limits.max_header_bytes =
      sluice::cli::size_flag("max-header-bytes", text("max-header-bytes"), 256, 1024 * 1024);
  f.limits.max_body_bytes =
      sluice::cli::size_flag("max-body-bytes", text("max-body-bytes"), 0, 64 * 1024 * 1024);
  f.limits.idle_timeout = std::chrono::milliseconds(
      sluice::cli::duration_flag("idle-timeout", text("idle-timeout"), 1, 86'400'000));
  f.limits.read_timeout = std::chrono::milliseconds(
      sluice::cli::duration_flag("request-timeout", text("request-timeout"), 1, 3'600'000));
  const auto proxy = sluice::gateway::parse_forwarded_by(text("proxy"));
  if (!proxy) throw FlagError{"--proxy " + text("proxy") + ": expected nginx or forwarded"};
  f.forwarded_by = *proxy;
  f.rule_options.max_key_bytes = static_cast<std::size_t>(
      sluice::cli::count_flag("max-key", text("max-key"), sluice::rules::kMinMaxKeyBytes, 65535));
  f.rule_options.sliding_log_cap = static_cast<std::uint32_t>(
      sluice::cli::count_flag("sliding-log-cap", text("sliding-log-cap"), 1, 1u << 24));
  if (vm.count("grpc-listen") != 0) {
    const auto grpc = sluice::net::parse_host_port(text("grpc-listen"));
    boost::system::error_code bad_ip;
    if (grpc) boost::asio::ip::make_address(grpc->host, bad_ip);
    if (!grpc || bad_ip) {
      throw FlagError{"--grpc-listen " + text("grpc-listen") +
                      ": expected IP:PORT, e.g. 127.0.0.1:8081"};
    }
    f.grpc_listen = *grpc;
  }
  f.rls.failure_policy = f.client.failure_policy;
  f.rls.deadline = std::chrono::milliseconds(
      sluice::cli::duration_flag("rls-deadline", text("rls-deadline"), 1, 60'000));
  const std::string headers = text("rls-headers");
  if (headers != "draft" && headers != "legacy" && headers != "both" && headers != "none") {
    throw FlagError{"--rls-headers " + headers + ": expected draft, legacy, both or none"};
  }
  f.rls.headers = headers == "draft" || headers == "both";
  f.rls.legacy_headers = headers == "legacy" || headers == "both";
  f.rule_options.merge_envoy_domains = vm["rls-merge-domains"].as<bool>();
  f.rls.max_descriptors = static_cast<std::size_t>(
      sluice::cli::count_flag("rls-max-descriptors", text("rls-max-descriptors"), 1, 4096));
  f.rls.max_entries = static_cast<std::size_t>(
      sluice::cli::count_flag("rls-max-entries", text("rls-max-entries"), 1, 4096));
  f.rls.max_message_bytes = sluice::cli::size_flag(
      "rls-max-message-bytes", text("rls-max-message-bytes"), 256, 64 * 1024 * 1024);
  // The gRPC port's connections share the HTTP port's limits, each port counting its own.
  f.grpc.max_connections = f.limits.max_connections;
  f.grpc.idle_timeout = f.limits.idle_timeout;
  f.grpc.max_header_bytes = f.limits.max_header_bytes;
  f.grpc.max_streams = static_cast<std::uint32_t>(
      sluice::cli::count_flag("rls-max-streams", text("rls-max-streams"), 1, 65'535));
  return f;
}

void say(const std::string& line) { sluice::log::info("gateway", line); }

}  // namespace

int main(int argc, char** argv) {
  std::optional<Flags> flags;
  try {
    flags = parse_flags(argc, argv);
  } catch (const FlagError& e) {
    fmt::print(stderr, "sluice-gateway: {}\nTry 'sluice-gateway --help'.\n", e.what());
    return 2;
  }
  if (!flags) return 0;
  std::signal(SIGPIPE, SIG_IGN);

  // The rules file, watched: a change (a rewrite, a rename over it, a ConfigMap's symlink swap)
  // is read and swapped in when good; a bad file is refused, logged once, and the rules stay.
  sluice::rules::RuleSourceOptions source_options;
  source_options.rules = flags->rule_options;
  auto source = sluice::rules::RuleSource::open(
      flags->rules, [](std::string_view message) { sluice::log::info("rules", message); },
      source_options);
  if (!source) {
    for (const auto& d : source.error()) sluice::log::error("rules", d.to_string());
    sluice::log::error("rules",
                       fmt::format("{}: refused ({} error{})", flags->rules, source.error().size(),
                                   source.error().size() == 1 ? "" : "s"));
    return 1;
  }
  sluice::rules::RuleSource& rules = **source;

  // With one thread (the default) the client runs on the servers' io_context: a decision is
  // read, asked of the cluster and answered on that thread, with no hand-over between threads
  // (each costs a context switch, most of a call's CPU time: docs/BENCHMARKS.md). With more,
  // the client keeps an I/O thread of its own, as an io_context it shares must be run by one
  // thread at a time.
  boost::asio::io_context io;
  const bool client_on_io = flags->threads == 1;
  auto client = client_on_io ? sluice::client::Client::connect(flags->client, io)
                             : sluice::client::Client::connect(flags->client);
  if (!client.ok()) {
    say("cannot start the client: " + client.status().to_string());
    return 1;
  }
  if (!(*client)->seeded()) {
    say(fmt::format("no seed answers yet ({}): the failure policy ({}) decides until one does",
                    fmt::join(flags->client.servers, ","),
                    sluice::client::failure_policy_name(flags->client.failure_policy)));
  }

  sluice::gateway::GatewayMetrics metrics;
  sluice::gateway::RulesView view;
  view.current = [&rules] { return rules.current(); };
  view.reloads = [&rules] {
    return sluice::gateway::RulesView::Reloads{rules.reloads_ok(), rules.reloads_failed()};
  };
  sluice::gateway::GatewayOptions options;
  options.failure_policy = flags->client.failure_policy;
  options.max_key_bytes = flags->rule_options.max_key_bytes;
  options.forwarded_by = flags->forwarded_by;
  sluice::gateway::Gateway gateway(**client, std::move(view), metrics, options);

  sluice::http::Server server(
      io, flags->limits,
      [&](const sluice::http::Request& request, sluice::http::Responder responder) {
        gateway.handle(request, std::move(responder));
      });
  gateway.set_server(&server);
  try {
    server.start(flags->listen_host, flags->listen_port);
  } catch (const std::exception& e) {
    say(fmt::format("cannot listen on {}: {}",
                    sluice::net::format_host_port(flags->listen_host, flags->listen_port),
                    e.what()));
    return 1;
  }
  // Envoy's Rate Limit Service, beside the HTTP server: its deadlines run on `io`.
  std::optional<sluice::gateway::RlsFront> rls_front;
  std::optional<sluice::gateway::RlsServer> rls_server;
  if (flags->grpc_listen) {
    sluice::gateway::RulesView rls_view;
    rls_view.current = [&rules] { return rules.current(); };
    rls_view.reloads = [&rules] {
      return sluice::gateway::RulesView::Reloads{rules.reloads_ok(), rules.reloads_failed()};
    };
    rls_front.emplace(**client, std::move(rls_view), metrics, io, flags->rls);
    rls_server.emplace(*rls_front, io, flags->grpc);
    gateway.set_grpc_counters([&rls_server] { return rls_server->counters(); });
    try {
      rls_server->start(flags->grpc_listen->host, flags->grpc_listen->port);
    } catch (const std::exception& e) {
      say(e.what());
      return 1;
    }
    const auto& envoy = rules.current()->envoy();
    say(fmt::format("serving Envoy's Rate Limit Service on {} ({} envoy domains, {} limits)",
                    sluice::net::format_host_port(flags->grpc_listen->host, rls_server->port()),
                    envoy.domain_count(), envoy.limit_count()));
  }
  // SIGHUP: read the rules file now (RuleSource logs what happened).
  boost::asio::signal_set hangups(io, SIGHUP);
  // SIGINT, SIGTERM: stop serving; io.run() returns once the connections are closed.
  boost::asio::signal_set stops(io, SIGINT, SIGTERM);
  stops.async_wait([&](const boost::system::error_code& ec, int signal) {
    if (ec) return;
    say(fmt::format("signal {}: stopping", signal));
    hangups.cancel();
    server.stop();
    // The RLS front stops taking calls (GOAWAY) and answers those in flight, which end by their
    // deadline; then a client on `io` is closed, which leaves `io` with no work, so io.run()
    // returns.
    const auto close_client = [&] {
      if (client_on_io) (*client)->close();
    };
    if (rls_server) {
      rls_server->stop(std::chrono::milliseconds(200), close_client);
    } else {
      close_client();
    }
  });
  std::function<void(const boost::system::error_code&, int)> on_hangup =
      [&](const boost::system::error_code& ec, int) {
        if (ec) return;
        rules.reload();
        hangups.async_wait(on_hangup);
      };
  hangups.async_wait(on_hangup);
  say(fmt::format("listening on {} (rules {}: {} policies, hash {}; servers {})",
                  sluice::net::format_host_port(flags->listen_host, server.port()), flags->rules,
                  rules.current()->policies().size(), rules.current()->hash(),
                  fmt::join(flags->client.servers, ",")));
  std::vector<std::thread> threads;
  for (unsigned i = 1; i < flags->threads; ++i) threads.emplace_back([&] { io.run(); });
  io.run();
  for (auto& t : threads) t.join();
  // The client first: its destructor fails what is still in flight and joins its I/O thread,
  // where decisions are answered, while the gateway, its metrics and `io` still exist.
  client->reset();
  say("stopped");
  return 0;
}
