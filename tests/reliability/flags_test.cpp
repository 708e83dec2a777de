// sluiced's command line as an operator meets it: a bad value is a usage error (exit 2, the flag
// named), a config file fills in the flags (the package's sample among them), and the command
// line wins over it.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include "tests/reliability/reliability_support.h"

namespace sluice::test {
namespace {

const std::string kSluiced = SLUICED_PATH;

TEST_CASE("sluiced refuses a malformed --etcd with exit status 2 naming the flag") {
  const Run run =
      run_command(kSluiced + " --etcd 127.0.0.1:42379 --cluster-name c --node-id n --port 0");
  INFO(run.output);
  CHECK(run.status == 2);
  CHECK(run.output.find("--etcd 127.0.0.1:42379: etcd endpoint '127.0.0.1:42379': expected "
                        "http://HOST:PORT") != std::string::npos);
}

TEST_CASE("sluiced refuses a --max-memory below 1MiB with exit status 2") {
  const Run run = run_command(kSluiced + " --max-memory 12 --port 0");
  INFO(run.output);
  CHECK(run.status == 2);
  CHECK(run.output.find("--max-memory 12: must be 1048576..") != std::string::npos);
}

TEST_CASE("sluiced reads the package's sample config, and refuses a bad one with its line") {
  const std::string sample = std::string(SLUICE_SOURCE_DIR) + "/packaging/etc/sluiced.conf";
  const Run version = run_command(kSluiced + " --config " + sample + " --version");
  INFO(version.output);
  CHECK(version.status == 0);
  CHECK(version.output == run_command(kSluiced + " --version").output);
  CHECK(version.output.starts_with("sluiced "));

  const std::string bad =
      (std::filesystem::temp_directory_path() / ("sluiced-bad-" + std::to_string(::getpid())))
          .string();
  std::ofstream(bad) << "# fine\nport = 7420\nshards 2\n";
  const Run refused = run_command(kSluiced + " --config " + bad);
  std::filesystem::remove(bad);
  INFO(refused.output);
  CHECK(refused.status == 2);
  CHECK(refused.output.find(bad + ":3: expected NAME = VALUE, got 'shards 2'") !=
        std::string::npos);
}

TEST_CASE("a flag on the command line wins over the config file") {
  const std::string sample = std::string(SLUICE_SOURCE_DIR) + "/packaging/etc/sluiced.conf";
  // The sample's max-memory is 1GiB; a bad value on the command line is the one refused.
  const Run run = run_command(kSluiced + " --config " + sample + " --max-memory lots");
  INFO(run.output);
  CHECK(run.status == 2);
  CHECK(run.output.find("--max-memory lots") != std::string::npos);
}

}  // namespace
}  // namespace sluice::test
