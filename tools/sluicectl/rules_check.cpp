#include "tools/sluicectl/rules_check.h"

#include <fmt/core.h>

#include <algorithm>
#include <system_error>

#include "rules/rule_set.h"
#include "tools/sluicectl/options.h"

namespace sluice::ctl {

namespace fs = std::filesystem;

Expected<std::vector<fs::path>> rules_files(const fs::path& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return std::vector<fs::path>{path};  // load() says why not
  std::vector<fs::path> files;
  for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string extension = it->path().extension().string();
    std::error_code type_error;
    if ((extension == ".yaml" || extension == ".yml") && !it->is_directory(type_error)) {
      files.push_back(it->path());
    }
  }
  if (ec)
    return Unexpected{
        fmt::format("{}: cannot list the directory: {}", path.string(), ec.message())};
  if (files.empty()) {
    return Unexpected{fmt::format("{}: no *.yaml or *.yml file in this directory", path.string())};
  }
  std::sort(files.begin(), files.end());
  return files;
}

int check_rules_files(const std::vector<std::string>& paths, std::FILE* out) {
  bool all_good = true;
  for (const std::string& path : paths) {
    const auto files = rules_files(path);
    if (!files) {
      fmt::print(out, "{}\n", files.error());
      all_good = false;
      continue;
    }
    for (const fs::path& file : *files) {
      const rules::ParseResult parsed = rules::RuleSet::load(file);
      if (parsed && !parsed->envoy().empty()) {
        fmt::print(out, "{}: ok (envoyproxy/ratelimit config: {} domain, {} limits)\n",
                   file.string(), parsed->envoy().domain_count(), parsed->envoy().limit_count());
        continue;
      }
      if (parsed) {
        fmt::print(out, "{}: ok ({} policies, {} matches)\n", file.string(),
                   parsed->policies().size(), parsed->matches().size());
        continue;
      }
      all_good = false;
      for (const rules::Diagnostic& d : parsed.error()) fmt::print(out, "{}\n", d.to_string());
    }
  }
  return all_good ? kExitOk : kExitDenied;
}

}  // namespace sluice::ctl
