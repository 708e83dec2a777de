// Scraping a node's /metrics in tests: GET over a real connection, the samples by their full
// name with labels (`sluice_decisions_total{algorithm="gcra",outcome="allowed"}`), and
// Debian's promtool (`promtool check metrics`) run on the text.
#pragma once

#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "tests/http/http_test_support.h"
#include "tests/support/child_process.h"

namespace sluice::test {

inline constexpr const char* kPromtool = "/usr/bin/promtool";

// The response to GET `target` on 127.0.0.1:`port` (a test failure when none comes).
inline http_support::ParsedResponse http_get(std::uint16_t port, const std::string& target) {
  http_support::HttpClient client(port);
  REQUIRE(client.send(http_support::get(target)));
  auto response = client.read_response();
  REQUIRE(response);
  return std::move(*response);
}

// Every sample of an exposition: "name{labels}" -> value (HELP and TYPE lines left out).
inline std::map<std::string, double> parse_samples(const std::string& text) {
  std::map<std::string, double> samples;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line.front() == '#') continue;
    const std::size_t space = line.rfind(' ');
    REQUIRE(space != std::string::npos);
    samples[line.substr(0, space)] = std::strtod(line.c_str() + space + 1, nullptr);
  }
  return samples;
}

// `promtool check metrics` with `text` on its stdin: its exit status and what it printed.
inline Run promtool_check_metrics(const std::string& text) {
  require_binary(kPromtool);
  const std::filesystem::path file = std::filesystem::temp_directory_path() /
                                     ("sluice-scrape-" + std::to_string(::getpid()) + ".txt");
  {
    std::ofstream out(file);
    out << text;
  }
  Run run = run_command(std::string(kPromtool) + " check metrics < " + file.string());
  std::filesystem::remove(file);
  return run;
}

}  // namespace sluice::test
