// sluicectl's commands: connect the client library as the options say, run the one command,
// print its answer (format.h) and say which exit status it makes: 0 success (acquire/peek:
// allowed; inspect: the primary stores the key), 1 denied (acquire/peek), a cluster file refused
// by some node (cluster reload), a drain refused or nothing stored (inspect), 2 any error, with the
// reason on `err` as "sluicectl: REASON".
#pragma once

#include <cstdio>
#include <string_view>

#include "tools/sluicectl/options.h"

namespace sluice::ctl {

// Runs `o.command`, writing answers to `out` and errors to `err`; returns the exit status.
// With --etcd (cluster), etcd's view comes first: it is there even when no node answers.
int run_command(const CtlOptions& o, std::FILE* out, std::FILE* err);

// Writes "sluicectl: MESSAGE\n" to `err`; returns kExitError.
int fail(std::FILE* err, std::string_view message);

}  // namespace sluice::ctl
