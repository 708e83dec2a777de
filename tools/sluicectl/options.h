// sluicectl's command line: what each command needs, checked before anything connects. A
// refused command line is a value (ParsedFlags::kUsageError with the reason), which main turns
// into exit status 2; docs/CLIENT.md, section 8, lists the flags.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "client/client.h"
#include "core/rule.h"

namespace sluice::ctl {

inline constexpr int kExitOk = 0;
// acquire/peek denied, a cluster file or a drain refused, a rules file bad
inline constexpr int kExitDenied = 1;
inline constexpr int kExitError = 2;  // any error, bad flags included

struct CtlOptions {
  // "ping", "acquire", "peek", "reset", "inspect", "stats", "cluster", "cluster reload",
  // "drain" or "rules check".
  std::string command;
  std::vector<std::string> paths;  // rules check: files and directories, at least one
  std::string key;                 // acquire, peek, reset, inspect: the key; drain: the node id
  std::vector<std::string> servers;
  Rule rule;
  std::uint32_t cost = 1;
  bool json = false;
  bool shard_aware = true;
  bool seed_only = false;  // cluster reload: the node of the first server that answers only
  std::uint64_t timeout_ms = 1000;
  std::string auth_token;  // from --auth-token-file; empty = none
  std::string etcd;        // cluster: also etcd's view of cluster `cluster_name`
  std::string cluster_name;
  // acquire, peek: what answers when the key's owner cannot (report: the error, exit 2).
  client::FailurePolicy failure_policy = client::FailurePolicy::kReport;
  std::uint32_t gateways = 1;
};

struct ParsedFlags {
  enum class Action { kRun, kHelp, kVersion, kUsageError };
  Action action = Action::kRun;
  CtlOptions options;  // kRun
  // kHelp: the usage text; kVersion: "sluicectl VERSION\n"; kUsageError: why, one line with no
  // newline (main adds " (see --help)").
  std::string text;
};

// Reads argv (argv[0] is the program). --auth-token-file is read here; a file readable by
// group or others draws a warning on stderr (cli::token_file_flag).
ParsedFlags parse_flags(int argc, char** argv);

}  // namespace sluice::ctl
