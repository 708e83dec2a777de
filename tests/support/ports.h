// Free loopback ports for servers a test starts as child processes (etcd, sluiced), which must
// be told their ports up front. Drawn below the kernel's ephemeral range, so that no outgoing
// connection is given one between the check and the bind. Every port handed out is also
// reserved, for the rest of the test process, by an flock on /tmp/sluice-test-ports/PORT: the
// blocks of one cluster cannot overlap before their nodes bind them, and tests that ctest runs
// side by side never hand out the same port (a process's locks go when it exits). Only a
// process outside the suite can still take one between the check and the child's bind.
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace sluice::test {

// True when 127.0.0.1:`port` can be bound now.
inline bool loopback_port_free(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool bound = ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
  ::close(fd);
  return bound;
}

// Takes the suite's reservation of `port` for this process: false when a test process (this
// one included) holds it already. The lock's descriptor stays open until the process exits.
inline bool reserve_port(std::uint16_t port) {
  static const std::filesystem::path dir = [] {
    std::filesystem::path d = std::filesystem::temp_directory_path() / "sluice-test-ports";
    std::error_code ec;
    std::filesystem::create_directories(d, ec);
    std::filesystem::permissions(d, std::filesystem::perms::all, ec);
    return d;
  }();
  const std::string path = (dir / std::to_string(port)).string();
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) return false;
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd);
    return false;
  }
  return true;  // held (leaked on purpose) for the rest of the process
}

// `count` consecutive free ports below the ephemeral range: the first of them.
inline std::uint16_t free_port_block(unsigned count) {
  int low = 32768;
  std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> low;
  thread_local std::mt19937 random(std::random_device{}());
  const int top = std::max(20001, low - static_cast<int>(count) - 1);
  std::uniform_int_distribution<int> pick(20000, top);
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const auto port = static_cast<std::uint16_t>(pick(random));
    bool all = true;
    for (unsigned i = 0; i < count && all; ++i) {
      all = loopback_port_free(static_cast<std::uint16_t>(port + i));
    }
    // Reserved one by one: a block whose later ports are taken keeps the earlier ones locked,
    // a few ports lost to this process only.
    for (unsigned i = 0; i < count && all; ++i) {
      all = reserve_port(static_cast<std::uint16_t>(port + i));
    }
    if (all) return port;
  }
  FAIL("no " << count << " consecutive free loopback ports");
  return 0;
}

// Two consecutive free ports (etcd's client and peer ports): the first.
inline std::uint16_t free_port_pair() { return free_port_block(2); }

}  // namespace sluice::test
