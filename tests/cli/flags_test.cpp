#include "cli/flags.h"

#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::cli {
namespace {

namespace po = boost::program_options;

// A token file in the temporary directory, mode 0600, removed by the destructor.
class TempFile {
 public:
  explicit TempFile(std::string_view content) {
    static int counter = 0;
    path_ = (std::filesystem::temp_directory_path() /
             ("sluice-cli-" + std::to_string(::getpid()) + "-" + std::to_string(++counter)))
                .string();
    std::ofstream out(path_, std::ios::binary | std::ios::trunc);
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
    out.close();
    REQUIRE(::chmod(path_.c_str(), 0600) == 0);
  }
  ~TempFile() { std::filesystem::remove(path_); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// What a FlagError says, or "no error".
template <typename F>
std::string flag_message(F&& parse) {
  try {
    parse();
  } catch (const FlagError& e) {
    return e.what();
  }
  return "no error";
}

TEST_CASE("count_flag keeps a whole number within its bounds and states the range otherwise",
          "[units]") {
  CHECK(count_flag("port", "0", 0, 65535) == 0u);
  CHECK(count_flag("port", "65535", 0, 65535) == 65535u);
  const auto message = [](std::string_view text) {
    return flag_message([&] { count_flag("port", text, 1, 65535); });
  };
  CHECK(message("65536") == "--port 65536: must be 1..65535");
  CHECK(message("0") == "--port 0: must be 1..65535");
  CHECK(message("80x") == "--port 80x: expected a whole number 1..65535");
  CHECK(message("") == "--port : expected a whole number 1..65535");
  CHECK(flag_message([] { count_flag("limit", "4294967296", 1, 4294967295); }) ==
        "--limit 4294967296: must be 1..4294967295");
}

TEST_CASE("duration_flag refuses a bare number with the fix, and states the range", "[units]") {
  constexpr std::uint64_t kDay = 86'400'000;
  CHECK(duration_flag("period", "60s", 1, 366 * kDay) == 60'000u);
  CHECK(duration_flag("idle-timeout", "0", 0, 366 * kDay) == 0u);  // 0 = off needs no unit
  CHECK(duration_flag("idle-timeout", "0s", 0, 366 * kDay) == 0u);
  CHECK(flag_message([] { duration_flag("period", "60", 1, 366 * kDay); }) ==
        "--period 60: give a unit, e.g. 60s");
  CHECK(flag_message([] { duration_flag("idle-timeout", "5", 0, 366 * kDay); }) ==
        "--idle-timeout 5: give a unit, e.g. 5s");
  CHECK(flag_message([] { duration_flag("period", "0", 1, 366 * kDay); }) ==
        "--period 0: must be 1ms..366d");
  CHECK(flag_message([] { duration_flag("period", "0s", 1, 366 * kDay); }) ==
        "--period 0s: must be 1ms..366d");
  CHECK(flag_message([] { duration_flag("idle-timeout", "367d", 0, 366 * kDay); }) ==
        "--idle-timeout 367d: must be 0..366d");
  CHECK(flag_message([] { duration_flag("period", "soon", 1, kDay); }) ==
        "--period soon: expected a duration with a unit (ms, s, m, h, d), e.g. 500ms, 60s, 5m");
}

TEST_CASE("size_flag takes a size with a binary suffix within its bounds", "[flags]") {
  CHECK(size_flag("max-memory", "64MiB", 1, 1ull << 40) == 64ull << 20);
  CHECK(size_flag("max-frame", "64", 64, 1ull << 32) == 64u);
  CHECK(flag_message([] { size_flag("max-frame", "63", 64, 4294967295); }) ==
        "--max-frame 63: must be 64..4294967295 bytes (e.g. 64MiB, 1GiB)");
  CHECK(flag_message([] { size_flag("max-memory", "lots", 1, 100); }) ==
        "--max-memory lots: must be 1..100 bytes (e.g. 64MiB, 1GiB)");
}

TEST_CASE("servers_flag splits at commas and refuses an entry that is not HOST:PORT", "[flags]") {
  CHECK(servers_flag("servers", "127.0.0.1:1,[::1]:2,,name:3") ==
        std::vector<std::string>{"127.0.0.1:1", "[::1]:2", "name:3"});
  CHECK(flag_message([] { servers_flag("servers", ",,"); }) == "--servers lists no HOST:PORT");
  CHECK(flag_message([] { servers_flag("servers", "a:1,b"); }) ==
        "--servers b: expected HOST:PORT with a port 1..65535 (IPv6: [::1]:7420)");
}

TEST_CASE("token_file_flag returns the token or throws a FlagError for the flag") {
  const TempFile good("s3cret\n");
  CHECK(token_file_flag("cli_tests", good.path()) == "s3cret");
  const TempFile empty("\n");
  try {
    token_file_flag("cli_tests", empty.path());
    FAIL("no FlagError");
  } catch (const FlagError& e) {
    CHECK(std::string(e.what()) ==
          "--auth-token-file " + empty.path() + ": empty (or only whitespace)");
  }
}

TEST_CASE("parse_command_line reads flags and refuses stray arguments and unknown flags",
          "[flags]") {
  po::options_description options("test");
  options.add_options()("port", po::value<std::string>()->default_value("7420"), "port")(
      "busy-poll", "switch");
  const auto parse = [&](std::vector<std::string> args) {
    std::vector<char*> argv;
    args.insert(args.begin(), "cli_tests");
    for (std::string& arg : args) argv.push_back(arg.data());
    return parse_command_line(static_cast<int>(argv.size()), argv.data(), options);
  };
  const po::variables_map vm = parse({"--port", "1", "--busy-poll"});
  CHECK(vm["port"].as<std::string>() == "1");
  CHECK(vm.count("busy-poll") == 1);
  CHECK(parse({})["port"].as<std::string>() == "7420");
  CHECK(flag_message([&] {
          parse({"--port", "1", "extra"});
        }) == "unexpected argument 'extra' (flags start with --)");
  CHECK(flag_message([&] { parse({"--prot", "1"}); }).find("prot") != std::string::npos);
}

TEST_CASE("a config file fills in what the command line did not set, and the command line wins") {
  po::options_description options("test");
  options.add_options()("config", po::value<std::string>(), "file")(
      "port", po::value<std::string>()->default_value("7420"), "port")(
      "bind", po::value<std::string>()->default_value("127.0.0.1"), "bind")(
      "node-id", po::value<std::string>()->default_value(""), "id")("busy-poll", "switch")(
      "huge-pages", "switch");
  const auto parse = [&](std::vector<std::string> args) {
    std::vector<char*> argv;
    args.insert(args.begin(), "cli_tests");
    for (std::string& arg : args) argv.push_back(arg.data());
    return parse_command_line(static_cast<int>(argv.size()), argv.data(), options);
  };
  const TempFile file(
      "# a sample\n\n  port = 9000\nbind=0.0.0.0\nnode-id = node-1 \nbusy-poll = true\n"
      "huge-pages = false\n");
  const po::variables_map vm = parse({"--config", file.path()});
  CHECK(vm["port"].as<std::string>() == "9000");
  CHECK(vm["bind"].as<std::string>() == "0.0.0.0");
  CHECK(vm["node-id"].as<std::string>() == "node-1");
  CHECK(vm.count("busy-poll") == 1);
  CHECK(vm.count("huge-pages") == 0);
  const po::variables_map both = parse({"--port", "1", "--config", file.path()});
  CHECK(both["port"].as<std::string>() == "1");
  CHECK(both["bind"].as<std::string>() == "0.0.0.0");
  // Without --config, no file is read.
  CHECK(parse({})["port"].as<std::string>() == "7420");
}

TEST_CASE("a config file is refused when missing, and each bad line with the file and line") {
  po::options_description options("test");
  options.add_options()("config", po::value<std::string>(), "file")(
      "port", po::value<std::string>()->default_value("7420"), "port")("busy-poll", "switch");
  const auto message = [&](const std::string& text) {
    const TempFile file(text);
    return flag_message([&] {
             std::string program = "cli_tests", flag = "--config", path = file.path();
             std::vector<char*> argv = {program.data(), flag.data(), path.data()};
             parse_command_line(static_cast<int>(argv.size()), argv.data(), options);
           }) +
           "|" + file.path();
  };
  const auto is = [](const std::string& got, const std::string& line_and_why) {
    const std::string path = got.substr(got.find('|') + 1);
    return got.substr(0, got.find('|')) == path + ":" + line_and_why;
  };
  CHECK(is(message("port = 1\nprot = 2\n"), "2: unknown option 'prot'"));
  CHECK(is(message("# c\nport 1\n"), "2: expected NAME = VALUE, got 'port 1'"));
  CHECK(is(message("config = other.conf\n"), "1: 'config' cannot be set in a config file"));
  CHECK(is(message("busy-poll = yes\n"), "1: 'busy-poll' is a switch: write 'busy-poll = true'"));
  CHECK(message("port = 1\nport = 2\n").starts_with("--config "));
  CHECK(flag_message([&] {
          std::string program = "cli_tests", flag = "--config", path = "/nonexistent/sluice.conf";
          std::vector<char*> argv = {program.data(), flag.data(), path.data()};
          parse_command_line(static_cast<int>(argv.size()), argv.data(), options);
        }) == "--config /nonexistent/sluice.conf: cannot read: No such file or directory");
}

}  // namespace
}  // namespace sluice::cli
