// The command lines of sluiced, sluice-load and sluicectl: the errors a user sees for a refused
// flag, the checks of whole-number, duration, size, server-list and token-file flags, and the
// parse that refuses stray arguments. Every helper throws FlagError, whose what() is the
// message; each main prints it with a hint and exits 2.
#pragma once

#include <boost/program_options.hpp>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::cli {

// A command-line flag whose value is refused; what() is the message for the user.
class FlagError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A whole-number flag: parse_count(text) within [min, max], or throws FlagError "--FLAG TEXT:
// must be MIN..MAX" (out of range) or "--FLAG TEXT: expected a whole number MIN..MAX" (not a
// number).
std::uint64_t count_flag(std::string_view flag, std::string_view text, std::uint64_t min,
                         std::uint64_t max);

// A duration flag, in ms: parse_duration_ms(text) within [min_ms, max_ms]. A bare "0" is taken
// where 0 is in range (it means "off" or "none"); any other bare number throws FlagError
// "--FLAG 60: give a unit, e.g. 60s". Out of range: "--FLAG TEXT: must be 1ms..366d" (or
// "0..366d").
std::uint64_t duration_flag(std::string_view flag, std::string_view text, std::uint64_t min_ms,
                            std::uint64_t max_ms);

// A size flag in bytes: parse_size(text) within [min, max], or throws FlagError "--FLAG TEXT:
// must be MIN..MAX bytes (e.g. 64MiB, 1GiB)".
std::uint64_t size_flag(std::string_view flag, std::string_view text, std::uint64_t min,
                        std::uint64_t max);

// "--servers HOST:PORT[,HOST:PORT...]": the entries in order, each a valid HOST:PORT (IPv6 in
// brackets), so that a typo is a usage error rather than a failed connection. Throws FlagError
// for an empty list or a malformed entry.
std::vector<std::string> servers_flag(std::string_view flag, std::string_view text);

// "--auth-token-file FILE": the token (auth::read_token_file), or throws FlagError
// "--auth-token-file PATH: why". A warning goes to stderr as "PROGRAM: warning:
// --auth-token-file PATH is ...".
std::string token_file_flag(std::string_view program, const std::string& path);

// "--log-format text|json": configures the log library (log/log.h) for `program`, its lines
// without a time under journald (log::journald_from_environment); throws FlagError for any other
// format. Once, before the first line is logged.
void configure_log_flag(std::string_view program, std::string_view format);

// Parses `argv` against `options`. A positional argument throws FlagError "unexpected argument
// 'X' (flags start with --)"; program_options' own errors (an unknown flag, a missing value)
// become FlagError with its message.
//
// When `options` has a "config" option and the command line gives --config FILE, FILE's lines
// set the options the command line did not (read_config_file): flags on the command line win.
// A --config that cannot be read, or a bad line, throws FlagError naming FILE and the line.
boost::program_options::variables_map parse_command_line(
    int argc, char** argv, const boost::program_options::options_description& options);

// The options of a config file, one per line: `NAME = VALUE` where NAME is a flag without its
// `--` (`port = 7420`); a switch is `NAME = true` (or `false`, the same as leaving it out);
// blank lines and lines starting with `#` are skipped. A NAME that `options` lacks, or that is
// config, help or version, throws FlagError "FILE:LINE: ...". Returns the pairs in file order.
std::vector<std::pair<std::string, std::string>> read_config_file(
    const std::string& path, const boost::program_options::options_description& options);

}  // namespace sluice::cli
