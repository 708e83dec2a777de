// sluicectl rules check: parses and validates rules files without a server (docs/RULES.md).
#pragma once

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "core/expected.h"

namespace sluice::ctl {

// The files `path` stands for: itself, or for a directory every *.yaml and *.yml file in it
// (not in its subdirectories), sorted by name. An error when a directory holds none or cannot
// be listed.
Expected<std::vector<std::filesystem::path>> rules_files(const std::filesystem::path& path);

// Checks every file of every path, printing each error as FILE:LINE:COLUMN: message, or
// "FILE: ok (N policies, M matches)", to `out`. Returns kExitOk when every file is good, else
// kExitDenied (1).
int check_rules_files(const std::vector<std::string>& paths, std::FILE* out);

}  // namespace sluice::ctl
