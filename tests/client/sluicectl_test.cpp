// Runs the built sluicectl end to end: its exit statuses and that main wires flags, commands
// and printing together, against an in-process daemon and real sluiced processes (the formats,
// flag messages and commands one by one are tested on the library in tests/sluicectl/); then
// the command lines of all three binaries (sluicectl, sluiced, sluice-load): units, ranges,
// usage errors, --version, IPv6 endpoints, tokens. The build makes client_tests depend on
// sluicectl and passes its path as SLUICECTL_PATH; sluiced and sluice-load are built beside it.
#include <fmt/core.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/frame.h"
#include "protocol/messages.h"
#include "tests/client/test_support.h"
#include "tests/integration/raw_client.h"
#include "tests/support/child_process.h"
#include "tests/support/ports.h"

namespace sluice::client {
namespace {

using test::Child;
using test::listen_endpoint;
using test::listen_port;
using test::require_binary;
using testing::TestServer;

#ifndef SLUICECTL_PATH
#error "SLUICECTL_PATH must be defined by the build (tests/CMakeLists.txt)"
#endif

std::filesystem::path sluicectl_path() { return SLUICECTL_PATH; }

// Fails the test (instead of skipping it) when the binary is missing.
void require_sluicectl() {
  INFO("sluicectl path: " << sluicectl_path().string());
  REQUIRE(std::filesystem::exists(sluicectl_path()));
}

using test::Run;
using test::run_command;

Run run(const std::string& args) {
  return run_command("'" + sluicectl_path().string() + "' " + args);
}

TEST_CASE("sluicectl exits 0 when allowed, 1 when denied, 2 on errors") {
  require_sluicectl();
  TestServer server;
  const std::string s = "--servers " + server.address() + " ";

  Run ping = run(s + "ping");
  CHECK(ping.status == 0);
  CHECK_THAT(ping.output, Catch::StartsWith("pong from " + server.address()));

  for (int i = 0; i < 2; ++i) {
    Run allowed = run(s + "acquire cli:key --limit 2 --period 60s");
    CHECK(allowed.status == 0);
    CHECK_THAT(allowed.output, Catch::StartsWith("ALLOWED  cli:key\n"));
  }
  Run denied = run(s + "acquire cli:key --limit 2 --period 60s --json");
  CHECK(denied.status == 1);
  CHECK_THAT(denied.output, Catch::StartsWith("{\"key\":\"cli:key\",\"allowed\":false,"));
  CHECK(std::count(denied.output.begin(), denied.output.end(), '\n') == 1);

  Run reset = run(s + "reset cli:key");
  CHECK(reset.status == 0);
  CHECK(reset.output == "cli:key: reset (the key existed)\n");

  Run stats = run(s + "stats --json");
  CHECK(stats.status == 0);
  CHECK_THAT(stats.output, Catch::StartsWith("{\"server\":"));
  CHECK_THAT(stats.output, Catch::Contains(",\"total\":{"));

  Run help = run("--help");
  CHECK(help.status == 0);
  CHECK_THAT(help.output, Catch::StartsWith("usage: sluicectl "));

  // A usage error: the reason and the hint, exit status 2, before anything connects.
  Run no_key = run(s + "acquire --limit 2 --period 60s");
  CHECK(no_key.status == 2);
  CHECK(no_key.output == "sluicectl: acquire needs a KEY (see --help)\n");
  CHECK(run(s + "explode").status == 2);
  // An error from the node: its reason, exit status 2.
  Run invalid = run(s + "acquire " + std::string(300, 'k') + " --limit 2 --period 1s");
  CHECK(invalid.status == 2);
  CHECK_THAT(invalid.output, Catch::StartsWith("sluicectl: invalid_key: "));
}

// ---- with no node answering ------------------------------------------------------------

// sluiced and sluice-load are built into the same folder as sluicectl (build/bin).
std::filesystem::path sibling(const char* name);

Run run_binary(const std::filesystem::path& path, const std::string& args) {
  require_binary(path);
  return run_command("'" + path.string() + "' " + args);
}

TEST_CASE(
    "with no node answering, sluicectl and sluice-load answer from --failure-policy open or "
    "closed, and report exits with the error naming every seed") {
  require_sluicectl();
  const std::string first = "127.0.0.1:" + std::to_string(test::free_port_block(1));
  const std::string second = "127.0.0.1:" + std::to_string(test::free_port_block(1));
  const std::string s = "--servers " + first + "," + second + " --timeout 200ms ";
  const std::string rule = " acquire cli:key --limit 2 --period 60s";

  const Run open = run(s + "--failure-policy open" + rule);
  CHECK(open.status == 0);
  CHECK_THAT(open.output, Catch::StartsWith("ALLOWED  cli:key\n"));
  CHECK_THAT(open.output, Catch::Contains("  source       local_fallback\n"));
  const Run closed = run(s + "--failure-policy closed" + rule);
  CHECK(closed.status == 1);
  CHECK_THAT(closed.output, Catch::StartsWith("DENIED  cli:key\n"));
  CHECK_THAT(closed.output, Catch::Contains("  source       local_fallback\n"));
  const Run report = run(s + "--failure-policy report" + rule);
  CHECK(report.status == 2);
  CHECK_THAT(report.output, Catch::StartsWith("sluicectl: connection_failed: no seed answered: "));
  CHECK_THAT(report.output, Catch::Contains("connect to " + first + " failed: ") &&
                                Catch::Contains("; connect to " + second + " failed: "));

  const auto load = sibling("sluice-load");
  const std::string l = "--servers " + first + "," + second + " --requests 200 -q --limit 50 ";
  const Run fallback = run_binary(load, l + "--failure-policy open");
  CHECK(fallback.status == 0);
  CHECK_THAT(fallback.output, Catch::Contains("errors 0\n"));
  CHECK_THAT(fallback.output, Catch::Contains("decided by: cluster 0 local_fallback 200 "));
  const Run refused = run_binary(load, l);
  CHECK(refused.status == 1);
  CHECK_THAT(refused.output, Catch::Contains("no seed answered: connect to " + first));
}

// ---- the command lines of sluicectl, sluiced and sluice-load -------------------------------

std::filesystem::path sibling(const char* name) { return sluicectl_path().parent_path() / name; }

// A command line that must be refused as a usage error: exit status 2, `message` in the output.
struct UsageError {
  std::filesystem::path binary;
  std::string args;
  std::string message;
};

void check_usage_errors(std::span<const UsageError> cases) {
  for (const UsageError& c : cases) {
    INFO(c.binary.filename().string() << " " << c.args);
    const Run r = run_binary(c.binary, c.args);
    CHECK(r.status == 2);
    CHECK_THAT(r.output, Catch::Contains(c.message));
  }
}

TEST_CASE("every binary refuses a bare number as a duration and shows the fix with exit status 2") {
  const auto sluiced = sibling("sluiced");
  const auto load = sibling("sluice-load");
  const UsageError cases[] = {
      {sluicectl_path(), "acquire k --limit 2 --period 60", "--period 60: give a unit, e.g. 60s"},
      {sluiced, "--idle-timeout 5", "--idle-timeout 5: give a unit, e.g. 5s"},
      {load, "--duration 10", "--duration 10: give a unit, e.g. 10s"},
      {load, "--period 60", "--period 60: give a unit, e.g. 60s"},
      {load, "--drain 100", "--drain 100: give a unit, e.g. 100s"},
  };
  check_usage_errors(cases);
}

TEST_CASE("a bare 0 still means off where 0 is allowed") {
  // The flags pass, so the run gets as far as connecting (nothing listens on port 1): exit 1.
  const Run load =
      run_binary(sibling("sluice-load"), "--servers 127.0.0.1:1 --duration 0 --requests 1 -q");
  CHECK(load.status == 1);
  CHECK_THAT(load.output, !Catch::Contains("give a unit"));
  const Run period = run_binary(sibling("sluice-load"), "--period 0");
  CHECK(period.status == 2);
  CHECK_THAT(period.output, Catch::Contains("--period 0: must be 1ms..366d"));
}

TEST_CASE("an out-of-range value names the allowed range and exits 2") {
  const UsageError cases[] = {
      {sluicectl_path(), "acquire k --limit 4294967296 --period 1s",
       "--limit 4294967296: must be 0..4294967295"},
      {sibling("sluiced"), "--port 65536", "--port 65536: must be 0..65535"},
      {sibling("sluiced"), "--max-batch 0", "--max-batch 0: must be 1..65535"},
      {sibling("sluiced"), "--idle-timeout 367d", "--idle-timeout 367d: must be 0..366d"},
      {sibling("sluice-load"), "--connections 1025", "--connections 1025: must be 1..1024"},
      {sibling("sluice-load"), "--limit 4294967296", "--limit 4294967296: must be 0..4294967295"},
      {sibling("sluice-load"), "--rate 1000000001", "--rate 1000000001: must be 0..1000000000"},
  };
  check_usage_errors(cases);
}

TEST_CASE("bad flags are usage errors: exit 2 with the reason on stderr") {
  const UsageError cases[] = {
      {sibling("sluice-load"), "--servers 127.0.0.1",
       "--servers 127.0.0.1: expected HOST:PORT with a port 1..65535"},
      {sibling("sluice-load"), "--servers ::1:7420", "--servers ::1:7420: expected HOST:PORT"},
      {sibling("sluice-load"), "--no-such-flag", "no-such-flag"},
      {sibling("sluice-load"), "stray", "unexpected argument 'stray'"},
      {sibling("sluice-load"), "--dist pareto", "--dist must be uniform, zipf:S, hot:P or seq"},
      {sluicectl_path(), "--servers 127.0.0.1 ping", "--servers 127.0.0.1: expected HOST:PORT"},
      {sibling("sluiced"), "--bind nowhere", "--bind nowhere: expected an IP address"},
      {sibling("sluiced"), "--source-address nowhere",
       "--source-address nowhere: expected an IP address"},
      {sibling("sluiced"), "--no-such-flag", "no-such-flag"},
      {sibling("sluiced"), "stray", "unexpected argument 'stray'"},
      {sibling("sluice-load"), "--failure-policy sideways",
       "--failure-policy sideways: expected open, closed or report"},
      {sibling("sluice-load"), "--gateways 0", "gateways"},
      {sibling("sluice-load"), "--gateways 65536", "gateways"},
      {sibling("sluice-load"), "--backend redis --failure-policy open",
       "--failure-policy, --gateways, --blocked-keys and --lease-duration are for --backend "
       "sluice"},
      {sibling("sluice-load"), "--backend redis --lease-duration 100ms", "--lease-duration"},
      {sibling("sluice-load"), "--lease-duration 61s", "--lease-duration 61s"},
      {sibling("sluice-load"), "--lease-duration 100", "give a unit"},
  };
  check_usage_errors(cases);
}

TEST_CASE("every binary prints the same project version with --version") {
  std::string version;
  for (const auto& binary : {sluicectl_path(), sibling("sluiced"), sibling("sluice-load")}) {
    const std::string name = binary.filename().string();
    INFO(name);
    const Run r = run_binary(binary, "--version");
    CHECK(r.status == 0);
    REQUIRE_THAT(r.output, Catch::Matches(name + " [0-9]+\\.[0-9]+\\.[0-9]+\n"));
    const std::string number = r.output.substr(name.size() + 1);
    if (version.empty()) version = number;
    CHECK(number == version);
  }
}

TEST_CASE("sluice-load --help lists every key distribution") {
  const Run r = run_binary(sibling("sluice-load"), "--help");
  CHECK(r.status == 0);
  CHECK_THAT(r.output, Catch::Contains("uniform | zipf:S | hot:P | seq"));
}

bool has_ipv6_loopback() {
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor acceptor(io);
  boost::system::error_code ec;
  acceptor.open(boost::asio::ip::tcp::v6(), ec);
  if (!ec) acceptor.bind({boost::asio::ip::address_v6::loopback(), 0}, ec);
  return !ec;
}

TEST_CASE("an IPv6 endpoint prints in brackets in sluiced and sluicectl and sluice-load") {
  if (!has_ipv6_loopback()) {
    WARN("no IPv6 loopback on this machine: host_port_test checks format_host_port alone");
    return;
  }
  Child sluiced(sibling("sluiced"),
                {"--bind", "::1", "--port", "0", "--shards", "1", "--max-memory", "16MiB"});
  const std::string line = sluiced.first_line(std::chrono::seconds(10));
  INFO("start-up line: " << line);
  const std::string endpoint = listen_endpoint(line);
  REQUIRE(endpoint.starts_with("[::1]:"));
  REQUIRE(listen_port(line) != 0);

  const Run ping = run("--servers " + endpoint + " ping");
  CHECK(ping.status == 0);
  CHECK_THAT(ping.output, Catch::StartsWith("pong from " + endpoint + " "));

  const Run load =
      run_binary(sibling("sluice-load"), "--servers " + endpoint + " --requests 100 -q");
  CHECK(load.status == 0);
  CHECK_THAT(load.output, Catch::Contains(" at " + endpoint + ","));

  // Nothing listens on port 1: sluice-load names the endpoint it could not reach.
  const Run refused = run_binary(sibling("sluice-load"),
                                 "--backend redis --op ping --servers [::1]:1 --requests 1 -q");
  CHECK(refused.status == 1);
  CHECK_THAT(refused.output, Catch::Contains("connect to [::1]:1 failed"));
  CHECK(sluiced.stop() == 0);
}

TEST_CASE("sluiced accepts the largest sliding-log cap its arena stores and refuses one more") {
  // 67108864 = 8 << 23 timestamps, the largest ring server/table/log_arena.h has.
  // Bounded: a sluiced that took the flag would serve until `timeout` ends it (status 124).
  require_binary(sibling("sluiced"));
  const Run over = run_command("timeout 10 '" + sibling("sluiced").string() +
                               "' --port 0 --shards 1 --sliding-log-cap 67108865");
  CHECK(over.status == 2);
  CHECK_THAT(over.output, Catch::Contains("--sliding-log-cap 67108865: must be 1..67108864"));

  Child sluiced(sibling("sluiced"), {"--port", "0", "--shards", "1", "--max-memory", "16MiB",
                                     "--sliding-log-cap", "67108864"});
  const std::string line = sluiced.first_line(std::chrono::seconds(10));
  INFO("start-up line: " << line);
  CHECK_THAT(line, Catch::Contains("listening on 127.0.0.1:"));
  CHECK(sluiced.stop() == 0);
}

}  // namespace
}  // namespace sluice::client

namespace sluice::client {
namespace {

// A blocking TCP connection to 127.0.0.1:port that sends nothing; -1 when connect fails.
int connect_silent(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// kRefused: over the connection count; kRefusedNoFd: through the spare descriptor (EMFILE).
enum class Outcome { kRefused, kRefusedNoFd, kClosed, kReset, kSilent, kOther };

// What the server did with a connection that sent nothing, waiting until `deadline` at most:
// an ERROR TOO_MANY_CONNECTIONS then end of stream (kRefused), end of stream alone, a reset,
// or nothing (kSilent: it is being served and waits for a request).
Outcome outcome(int fd, std::chrono::steady_clock::time_point deadline) {
  protocol::Bytes input;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(std::max<std::int64_t>(left.count(), 0))) <= 0) {
      return Outcome::kSilent;
    }
    std::uint8_t chunk[4096];
    const ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
    if (n < 0) return Outcome::kReset;
    if (n > 0) {
      input.insert(input.end(), chunk, chunk + n);
      continue;
    }
    if (input.empty()) return Outcome::kClosed;
    const protocol::DecodeResult decoded = protocol::FrameDecoder().decode(input);
    protocol::ErrorReply error;
    const bool refused = decoded.status == protocol::DecodeStatus::kOk &&
                         decoded.frame.header.opcode == protocol::Opcode::kError &&
                         decoded.frame_size == input.size() &&
                         protocol::parse_error(decoded.frame.body, error) &&
                         error.code == protocol::WireErrorCode::kTooManyConnections;
    if (!refused) return Outcome::kOther;
    return error.message.find("file descriptors") != std::string_view::npos ? Outcome::kRefusedNoFd
                                                                            : Outcome::kRefused;
  }
}

// Not in sanitizer builds: their runtimes need descriptors of their own (UBSan checks that memory
// is readable through a pipe), so a sluiced run out of descriptors reports false errors there.
#if !defined(SLUICE_SANITIZED)
TEST_CASE("under a low open-file limit sluiced serves what fits and refuses the rest cleanly") {
  const std::filesystem::path prlimit = "/usr/bin/prlimit";
  if (!std::filesystem::exists(prlimit)) {
    WARN("no /usr/bin/prlimit (util-linux): cannot start sluiced with a low open-file limit");
    return;
  }
  require_binary(sibling("sluiced"));
  const std::string log_path =
      (std::filesystem::temp_directory_path() / fmt::format("sluiced-fd-{}.log", ::getpid()))
          .string();
  // 64 descriptors, one shard: 3 + 6 + 16 + 6 for the node leaves 33 connections of the
  // default 10000.
  Child sluiced(prlimit,
                {"--nofile=64:64", sibling("sluiced").string(), "--port", "0", "--shards", "1",
                 "--max-memory", "16MiB"},
                log_path);
  const std::string line = sluiced.first_line(std::chrono::seconds(10));
  INFO("start-up line: " << line);
  REQUIRE(listen_endpoint(line).starts_with("127.0.0.1:"));
  const std::uint16_t port = listen_port(line);
  REQUIRE(port != 0);

  const auto started = std::chrono::steady_clock::now();
  test::RawClient good(port);
  good.hello();
  CHECK(good.ping());

  constexpr int kFlood = 200;
  std::vector<int> flood;
  for (int i = 0; i < kFlood; ++i) {
    const int fd = connect_silent(port);
    REQUIRE(fd >= 0);
    flood.push_back(fd);
    if (i % 20 == 19) CHECK(good.ping());  // served throughout, within its 5 s deadline
  }
  std::map<Outcome, int> outcomes;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  for (const int fd : flood) ++outcomes[outcome(fd, deadline)];
  CHECK(good.ping());
  for (const int fd : flood) ::close(fd);
  CHECK(good.ping());
  const auto elapsed = std::chrono::steady_clock::now() - started;
  CHECK(sluiced.stop() == 0);

  INFO("refused " << outcomes[Outcome::kRefused] << " (out of descriptors "
                  << outcomes[Outcome::kRefusedNoFd] << "), closed " << outcomes[Outcome::kClosed]
                  << ", reset " << outcomes[Outcome::kReset] << ", served "
                  << outcomes[Outcome::kSilent] << ", other " << outcomes[Outcome::kOther]);
  // 33 connections fit and the good client holds one; every other one is refused.
  CHECK(outcomes[Outcome::kSilent] == 32);
  CHECK(outcomes[Outcome::kRefused] + outcomes[Outcome::kRefusedNoFd] +
            outcomes[Outcome::kClosed] ==
        kFlood - 32);
  // A refused connection keeps its descriptor until its client closes (or a 1 s grace), and
  // these clients keep theirs open, so the flood runs the node out of descriptors: the rest
  // are refused through the spare one.
  CHECK(outcomes[Outcome::kRefusedNoFd] > 0);
  CHECK(outcomes[Outcome::kReset] == 0);
  CHECK(outcomes[Outcome::kOther] == 0);

  std::ifstream log_file(log_path);
  std::stringstream log_stream;
  log_stream << log_file.rdbuf();
  const std::string log = log_stream.str();
  std::filesystem::remove(log_path);
  INFO("stderr:\n" << log);
  CHECK_THAT(log, Catch::Contains("open-file limit 64 (hard 64) is below --max-connections "
                                  "10000 plus 31 descriptors the node needs: serving at "
                                  "most 33 connections"));
  // The warning once, then at most one accept line a second (beside the lines of the start and
  // the stop).
  std::istringstream lines_of(log);
  long long lines = 0;
  long long warnings = 0;
  for (std::string line; std::getline(lines_of, line);) {
    lines += line.find(": accept: ") != std::string::npos ? 1 : 0;
    warnings += line.find(" warning sluiced/node: open-file limit") != std::string::npos ? 1 : 0;
  }
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(elapsed).count();
  CHECK(warnings == 1);
  CHECK(lines <= 1 + seconds);
  fmt::print(
      "RELIABILITY: fd limit: ulimit -n 64, {} connections: {} served (the good one included), "
      "{} refused with TOO_MANY_CONNECTIONS ({} of them through the spare descriptor), {} closed "
      "without a reply, {} reset or other; {} stderr lines in {} s\n",
      kFlood + 1, outcomes[Outcome::kSilent] + 1,
      outcomes[Outcome::kRefused] + outcomes[Outcome::kRefusedNoFd],
      outcomes[Outcome::kRefusedNoFd], outcomes[Outcome::kClosed],
      outcomes[Outcome::kReset] + outcomes[Outcome::kOther], lines, seconds);
}
#endif  // !SLUICE_SANITIZED

TEST_CASE("sluiced raises its soft open-file limit to the hard one before fitting connections") {
  const std::filesystem::path prlimit = "/usr/bin/prlimit";
  rlimit own{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &own) == 0);
  if (!std::filesystem::exists(prlimit) || own.rlim_max < 10'100) {
    WARN("needs /usr/bin/prlimit and a hard open-file limit of at least 10100");
    return;
  }
  require_binary(sibling("sluiced"));
  const std::string log_path =
      (std::filesystem::temp_directory_path() / fmt::format("sluiced-fd-raise-{}.log", ::getpid()))
          .string();
  // Soft 64 alone would serve 33; raised to the hard limit it holds the default 10000.
  Child sluiced(prlimit,
                {fmt::format("--nofile=64:{}", own.rlim_max), sibling("sluiced").string(), "--port",
                 "0", "--shards", "1", "--max-memory", "16MiB"},
                log_path);
  const std::string line = sluiced.first_line(std::chrono::seconds(10));
  INFO("start-up line: " << line);
  REQUIRE(listen_endpoint(line).starts_with("127.0.0.1:"));
  const std::uint16_t port = listen_port(line);
  REQUIRE(port != 0);

  constexpr int kConnections = 100;
  std::vector<int> open;
  for (int i = 0; i < kConnections; ++i) {
    const int fd = connect_silent(port);
    REQUIRE(fd >= 0);
    open.push_back(fd);
  }
  test::RawClient good(port);
  good.hello();
  CHECK(good.ping());
  int served = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
  for (const int fd : open) served += outcome(fd, deadline) == Outcome::kSilent ? 1 : 0;
  for (const int fd : open) ::close(fd);
  CHECK(served == kConnections);
  CHECK(sluiced.stop() == 0);

  std::ifstream log_file(log_path);
  std::stringstream log_stream;
  log_stream << log_file.rdbuf();
  std::filesystem::remove(log_path);
  // Nothing to warn about: only the lines of the start and the stop.
  INFO("stderr:\n" << log_stream.str());
  CHECK(log_stream.str().find(" warning ") == std::string::npos);
  CHECK(log_stream.str().find(" error ") == std::string::npos);
  CHECK(log_stream.str().find(" info sluiced/node: stopped") != std::string::npos);
}

}  // namespace
}  // namespace sluice::client

// ---- --auth-token-file on sluiced, sluicectl and sluice-load -------------------------------

namespace sluice::client {
namespace {

// A file in the temporary directory with the given content and mode, removed by the destructor.
class TempFile {
 public:
  TempFile(const std::string& name, std::string_view content, ::mode_t mode = 0600)
      : path_(
            (std::filesystem::temp_directory_path() / fmt::format("sluice-{}-{}", name, ::getpid()))
                .string()) {
    std::ofstream out(path_, std::ios::binary | std::ios::trunc);
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
    out.close();
    REQUIRE(::chmod(path_.c_str(), mode) == 0);
  }
  ~TempFile() { std::filesystem::remove(path_); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string read_whole(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

constexpr std::string_view kSecret = "tools-token-5b1c9e";

TEST_CASE(
    "sluicectl and sluice-load with --auth-token-file are served by sluiced with that token") {
  require_sluicectl();
  const TempFile token("token", std::string(kSecret) + "\n");
  const TempFile wrong("wrong-token", "tools-token-5b1c9f\n");
  const TempFile log("auth-sluiced-log", "", 0600);
  Child sluiced(
      sibling("sluiced"),
      {"--port", "0", "--shards", "2", "--max-memory", "16MiB", "--auth-token-file", token.path()},
      log.path());
  const std::string line = sluiced.first_line(std::chrono::seconds(10));
  INFO("start-up line: " << line);
  CHECK_THAT(line, Catch::EndsWith(", token required"));
  REQUIRE(listen_endpoint(line).starts_with("127.0.0.1:"));
  const std::uint16_t port = listen_port(line);
  REQUIRE(port != 0);
  const std::string address = fmt::format("127.0.0.1:{}", port);
  const std::string s = "--servers " + address + " ";
  const std::string with_token = "--auth-token-file '" + token.path() + "' ";

  std::vector<Run> runs;
  runs.push_back(run(s + with_token + "ping"));
  CHECK(runs.back().status == 0);
  CHECK_THAT(runs.back().output, Catch::StartsWith("pong from " + address));
  runs.push_back(run(s + with_token + "acquire tools:key --limit 5 --period 60s"));
  CHECK(runs.back().status == 0);
  CHECK_THAT(runs.back().output, Catch::StartsWith("ALLOWED"));

  const std::string refused =
      "sluicectl: unauthenticated: HELLO refused by " + address + ": wrong or missing token\n";
  runs.push_back(run(s + "ping"));  // no token at all
  CHECK(runs.back().status == 2);
  CHECK(runs.back().output == refused);
  runs.push_back(
      run(s + "--auth-token-file '" + wrong.path() + "' acquire k --limit 1 --period 1s"));
  CHECK(runs.back().status == 2);
  CHECK(runs.back().output == refused);

  const std::filesystem::path load = sibling("sluice-load");
  runs.push_back(run_binary(load, s + with_token + "--connections 4 --requests 200 -q"));
  CHECK(runs.back().status == 0);
  CHECK_THAT(runs.back().output, Catch::Contains(" at " + address + ","));
  runs.push_back(run_binary(load, s + "--requests 10 -q"));
  CHECK(runs.back().status == 1);
  CHECK(runs.back().output ==
        "sluice-load: unauthenticated: HELLO refused by " + address + ": wrong or missing token\n");

  runs.push_back(run(s + with_token + "stats --json"));
  CHECK(runs.back().status == 0);
  const std::string& stats = runs.back().output;
  REQUIRE_THAT(stats, Catch::StartsWith("{\"server\":"));
  const std::string totals = stats.substr(0, stats.find('}'));
  CHECK_THAT(totals, Catch::Contains("\"auth_failures\":3"));  // the three refused runs

  CHECK(sluiced.stop() == 0);
  const std::string sluiced_log = read_whole(log.path());
  // A private token file and a loopback bind: no warning. (A low open-file limit could add a
  // line of its own, so only warnings are looked for.)
  CHECK_THAT(sluiced_log, !Catch::Contains("warning"));
  // The token shows nowhere: not in any tool's output, nor in sluiced's.
  for (const Run& r : runs) {
    INFO(r.output);
    CHECK_THAT(r.output, !Catch::Contains(std::string(kSecret.substr(0, 8))));
  }
  CHECK_THAT(sluiced_log + line, !Catch::Contains(std::string(kSecret.substr(0, 8))));
}

TEST_CASE("sluiced on a loopback address without a token starts without a warning") {
  const TempFile log("noauth-sluiced-log", "", 0600);
  Child sluiced(sibling("sluiced"),
                {"--bind", "127.0.0.1", "--port", "0", "--shards", "1", "--max-memory", "16MiB"},
                log.path());
  const std::string line = sluiced.first_line(std::chrono::seconds(10));
  INFO("start-up line: " << line);
  CHECK(listen_endpoint(line).starts_with("127.0.0.1:"));
  CHECK(listen_port(line) != 0);
  CHECK_THAT(line, !Catch::Contains("token"));
  CHECK(sluiced.stop() == 0);
  const std::string sluiced_log = read_whole(log.path());
  CHECK_THAT(sluiced_log, !Catch::Contains("warning"));
  CHECK_THAT(sluiced_log, !Catch::Contains("loopback"));
}

TEST_CASE("a token file readable by others is used, with a warning naming it") {
  require_sluicectl();
  const TempFile token("open-token", std::string(kSecret), 0644);
  TestServer server(std::string{kSecret});
  const Run r =
      run("--servers " + server.address() + " --auth-token-file '" + token.path() + "' ping");
  CHECK(r.status == 0);
  CHECK_THAT(r.output, Catch::StartsWith("sluicectl: warning: --auth-token-file " + token.path() +
                                         " is readable by group or others (mode 0644)"));
  CHECK_THAT(r.output, Catch::Contains("pong from "));
  CHECK_THAT(r.output, !Catch::Contains(std::string(kSecret)));
}

TEST_CASE(
    "every binary refuses an unusable --auth-token-file with exit status 2, naming the file") {
  const TempFile empty("empty-token", "\n");
  const std::string secret_start = "do-not-show-";
  const TempFile too_long("long-token", secret_start + std::string(1024, 'x'));
  const std::string missing =
      (std::filesystem::temp_directory_path() / "sluice-missing-token-file").string();
  const TempFile good("good-token", "s3cret");
  const auto sluiced = sibling("sluiced");
  const auto load = sibling("sluice-load");
  std::vector<UsageError> cases;
  for (const auto& binary : {sluicectl_path(), sluiced, load}) {
    const std::string tail = binary == sluicectl_path() ? " ping" : "";
    cases.push_back({binary, "--auth-token-file " + empty.path() + tail,
                     "--auth-token-file " + empty.path() + ": empty (or only whitespace)"});
    cases.push_back({binary, "--auth-token-file " + too_long.path() + tail,
                     "--auth-token-file " + too_long.path() + ": longer than 1024 bytes"});
    cases.push_back({binary, "--auth-token-file " + missing + tail,
                     "--auth-token-file " + missing + ": cannot open: No such file or directory"});
  }
  cases.push_back({load, "--backend redis --auth-token-file " + good.path(),
                   "--auth-token-file is for --backend sluice"});
  cases.push_back({load, "--backend redis --auth-token-file " + missing,  // refused unread
                   "--auth-token-file is for --backend sluice"});
  check_usage_errors(cases);
  for (const UsageError& c : cases) {
    INFO(c.binary.filename().string() << " " << c.args);
    CHECK_THAT(run_binary(c.binary, c.args).output, !Catch::Contains(secret_start));
  }
}

}  // namespace
}  // namespace sluice::client
