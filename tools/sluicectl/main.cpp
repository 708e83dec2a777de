// sluicectl: ping, acquire, peek, reset, stats, cluster, cluster reload and drain from a shell,
// over the client library, and rules check (rules files, no server). Parses the flags and runs the
// command (the sluice_ctl library: options.h, commands.h); exit status 0 success (acquire/peek:
// allowed), 1 denied, 2 any error (bad flags included), with the reason on stderr. docs/CLIENT.md
// shows the output formats.
#include <cstdio>
#include <exception>

#include "tools/sluicectl/commands.h"
#include "tools/sluicectl/options.h"

int main(int argc, char** argv) {
  using namespace sluice::ctl;
  try {
    const ParsedFlags flags = parse_flags(argc, argv);
    switch (flags.action) {
      case ParsedFlags::Action::kHelp:
      case ParsedFlags::Action::kVersion:
        std::fputs(flags.text.c_str(), stdout);
        return kExitOk;
      case ParsedFlags::Action::kUsageError:
        return fail(stderr, flags.text + " (see --help)");
      case ParsedFlags::Action::kRun:
        break;
    }
    return run_command(flags.options, stdout, stderr);
  } catch (const std::exception& e) {
    return fail(stderr, e.what());
  }
}
