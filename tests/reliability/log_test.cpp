// sluiced's log as an operator reads it: every line has a time, a level and a component, in
// text and in JSON; starting and stopping each log one line; SIGTERM with no client connected
// stops it well under a second.
#include <catch2/catch.hpp>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/reliability/reliability_support.h"
#include "tests/support/log_lines.h"
#include "tests/support/ports.h"

namespace sluice::test {
namespace {

struct Stopped {
  std::vector<std::string> lines;
  long long stop_ms = 0;
};

// Starts sluiced with `format`, stops it with SIGTERM; its log lines and how long the stop took.
Stopped run_and_stop(const std::string& format) {
  const std::string log = (std::filesystem::temp_directory_path() /
                           ("sluiced-log-" + format + "-" + std::to_string(::getpid()) + ".log"))
                              .string();
  const std::uint16_t port = free_port_block(3);
  Stopped out;
  {
    Child node(SLUICED_PATH,
               {"--bind", "127.0.0.1", "--port", std::to_string(port), "--shards", "2",
                "--max-memory", "16MiB", "--log-format", format},
               log);
    REQUIRE(listen_port(node.first_line(10s)) == port);
    // The log line of the start follows the start-up line on stdout.
    const auto until = SteadyClock::now() + 10s;
    for (;;) {
      std::ifstream in(log);
      const std::string text((std::istreambuf_iterator<char>(in)), {});
      if (text.find("listening on") != std::string::npos) break;
      REQUIRE(SteadyClock::now() < until);
      std::this_thread::sleep_for(10ms);
    }
    const auto stopping = SteadyClock::now();
    node.send_signal(SIGTERM);
    const auto status = node.wait_exit(10s);
    out.stop_ms = ms(SteadyClock::now() - stopping);
    REQUIRE(status == 0);
  }
  std::ifstream in(log);
  for (std::string line; std::getline(in, line);) out.lines.push_back(line);
  std::filesystem::remove(log);
  return out;
}

TEST_CASE("sluiced's text log: time, level, component on each line, start and stop once each") {
  const Stopped run = run_and_stop("text");
  REQUIRE(run.lines.size() >= 3);
  for (const auto& l : run.lines) {
    INFO(l);
    const auto parsed = parse_text_log_line(l);
    REQUIRE(parsed.has_value());
    CHECK(parsed->program == "sluiced");
  }
  CHECK(count_containing(run.lines, " info sluiced/node: listening on 127.0.0.1:") == 1);
  CHECK(count_containing(run.lines, " info sluiced/node: signal 15: stopping") == 1);
  CHECK(count_containing(run.lines, " info sluiced/node: stopped") == 1);
  report_figure(
      fmt::format("sluiced stopped {} ms after SIGTERM with no client connected", run.stop_ms));
  CHECK(run.stop_ms < 500);
}

TEST_CASE("sluiced's JSON log: one object per line with time, level, program and component") {
  const Stopped run = run_and_stop("json");
  REQUIRE(run.lines.size() >= 3);
  for (const auto& l : run.lines) {
    INFO(l);
    const auto parsed = parse_json_log_line(l);
    REQUIRE(parsed.has_value());
    CHECK(parsed->program == "sluiced");
  }
  CHECK(count_containing(run.lines, R"("component":"node","message":"stopped")") == 1);
  CHECK(run.stop_ms < 500);
}

TEST_CASE("sluiced refuses an unknown --log-format with exit status 2") {
  const Run run = run_command(std::string(SLUICED_PATH) + " --log-format xml");
  INFO(run.output);
  CHECK(run.status == 2);
  CHECK(run.output.find("--log-format xml: expected text or json") != std::string::npos);
}

}  // namespace
}  // namespace sluice::test
