#include "cli/flags.h"

#include <fmt/core.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "auth/token.h"
#include "core/units.h"
#include "log/log.h"
#include "net/host_port.h"

namespace sluice::cli {

namespace po = boost::program_options;

std::uint64_t count_flag(std::string_view flag, std::string_view text, std::uint64_t min,
                         std::uint64_t max) {
  const auto value = parse_count(text);
  if (!value) {
    throw FlagError(fmt::format("--{} {}: expected a whole number {}..{}", flag, text, min, max));
  }
  if (*value < min || *value > max) {
    throw FlagError(fmt::format("--{} {}: must be {}..{}", flag, text, min, max));
  }
  return *value;
}

std::uint64_t duration_flag(std::string_view flag, std::string_view text, std::uint64_t min_ms,
                            std::uint64_t max_ms) {
  const std::string head = fmt::format("--{} {}: ", flag, text);
  std::optional<std::uint64_t> value = parse_duration_ms(text);
  if (!value) {
    const auto bare = parse_count(text);
    if (!bare) {
      throw FlagError(head + "expected a duration with a unit (ms, s, m, h, d), e.g. 500ms, " +
                      "60s, 5m");
    }
    if (*bare != 0) throw FlagError(head + "give a unit, e.g. " + std::string(text) + "s");
    value = 0;  // a bare 0 needs no unit; the range decides whether it is allowed
  }
  if (*value < min_ms || *value > max_ms) {
    const std::string low = min_ms == 0 ? "0" : format_duration_ms(min_ms);
    throw FlagError(head + "must be " + low + ".." + format_duration_ms(max_ms));
  }
  return *value;
}

std::uint64_t size_flag(std::string_view flag, std::string_view text, std::uint64_t min,
                        std::uint64_t max) {
  const auto value = parse_size(text);
  if (!value || *value < min || *value > max) {
    throw FlagError(
        fmt::format("--{} {}: must be {}..{} bytes (e.g. 64MiB, 1GiB)", flag, text, min, max));
  }
  return *value;
}

std::vector<std::string> servers_flag(std::string_view flag, std::string_view text) {
  std::vector<std::string> out;
  for (std::size_t at = 0; at <= text.size();) {
    const std::size_t comma = std::min(text.find(',', at), text.size());
    if (comma > at) out.emplace_back(text.substr(at, comma - at));
    at = comma + 1;
  }
  if (out.empty()) throw FlagError(fmt::format("--{} lists no HOST:PORT", flag));
  for (const std::string& server : out) {
    if (!net::parse_host_port(server)) {
      throw FlagError(fmt::format(
          "--{} {}: expected HOST:PORT with a port 1..65535 (IPv6: [::1]:7420)", flag, server));
    }
  }
  return out;
}

void configure_log_flag(std::string_view program, std::string_view format) {
  const std::optional<log::Format> parsed = log::parse_format(format);
  if (!parsed) throw FlagError("--log-format " + std::string(format) + ": expected text or json");
  log::configure({.program = std::string(program),
                  .format = *parsed,
                  .journald = log::journald_from_environment()});
}

std::string token_file_flag(std::string_view program, const std::string& path) {
  auth::TokenFile file = auth::read_token_file(path);
  if (!file.ok()) throw FlagError("--auth-token-file " + file.error);
  if (!file.warning.empty()) {
    fmt::print(stderr, "{}: warning: --auth-token-file {}\n", program, file.warning);
  }
  return std::move(file.token);
}

std::vector<std::pair<std::string, std::string>> read_config_file(
    const std::string& path, const po::options_description& options) {
  std::ifstream in(path);
  if (!in) throw FlagError("--config " + path + ": cannot read: " + std::strerror(errno));
  std::vector<std::pair<std::string, std::string>> out;
  std::string line;
  const auto trim = [](std::string_view text) {
    const auto first = text.find_first_not_of(" \t\r");
    if (first == std::string_view::npos) return std::string();
    const auto last = text.find_last_not_of(" \t\r");
    return std::string(text.substr(first, last - first + 1));
  };
  for (int number = 1; std::getline(in, line); ++number) {
    const std::string text = trim(line);
    if (text.empty() || text.front() == '#') continue;
    const auto at = [&](const std::string& why) {
      return FlagError(fmt::format("{}:{}: {}", path, number, why));
    };
    const auto equals = text.find('=');
    if (equals == std::string::npos) throw at("expected NAME = VALUE, got '" + text + "'");
    std::string name = trim(std::string_view(text).substr(0, equals));
    std::string value = trim(std::string_view(text).substr(equals + 1));
    if (name.starts_with("--")) name.erase(0, 2);
    if (name == "config" || name == "help" || name == "version") {
      throw at("'" + name + "' cannot be set in a config file");
    }
    const po::option_description* option = options.find_nothrow(name, false);
    if (option == nullptr) throw at("unknown option '" + name + "'");
    if (option->semantic()->max_tokens() == 0) {  // a switch
      if (value == "false") continue;
      if (value != "true") throw at("'" + name + "' is a switch: write '" + name + " = true'");
    }
    out.emplace_back(std::move(name), std::move(value));
  }
  return out;
}

po::variables_map parse_command_line(int argc, char** argv,
                                     const po::options_description& options) {
  po::variables_map vm;
  try {
    // No positional arguments: they are collected only to be named in the error.
    po::options_description all;
    all.add(options).add_options()("stray", po::value<std::vector<std::string>>());
    po::positional_options_description stray;
    stray.add("stray", -1);
    po::store(po::command_line_parser(argc, argv).options(all).positional(stray).run(), vm);
  } catch (const po::error& e) {
    throw FlagError(e.what());
  }
  if (vm.count("stray") != 0) {
    throw FlagError("unexpected argument '" + vm["stray"].as<std::vector<std::string>>().front() +
                    "' (flags start with --)");
  }
  if (options.find_nothrow("config", false) != nullptr && vm.count("config") != 0) {
    const std::string path = vm["config"].as<std::string>();
    // Stored after the command line: what it set stays (store() keeps a value already there
    // unless it is a default).
    std::ostringstream text;
    for (const auto& [name, value] : read_config_file(path, options)) {
      text << name << '=' << value << '\n';
    }
    std::istringstream in(text.str());
    try {
      po::store(po::parse_config_file(in, options), vm);
    } catch (const po::error& e) {
      throw FlagError("--config " + path + ": " + e.what());
    }
  }
  try {
    po::notify(vm);
  } catch (const po::error& e) {
    throw FlagError(e.what());
  }
  return vm;
}

}  // namespace sluice::cli
