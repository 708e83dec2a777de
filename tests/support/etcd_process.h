// A throwaway single-member etcd for a test: started from Debian's /usr/bin/etcd on free
// loopback ports with its data in a temporary directory, ready once /health answers (about
// 0.3 s), stopped and removed by the destructor. Never the package's system service, never
// port 2379. tools/deps.sh installs etcd-server.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>

#include "tests/support/child_process.h"
#include "tests/support/ports.h"

namespace sluice::test {

inline constexpr const char* kEtcdBinary = "/usr/bin/etcd";

class EtcdProcess {
 public:
  EtcdProcess() {
    INFO(kEtcdBinary << " is missing: tools/deps.sh installs etcd-server");
    REQUIRE(std::filesystem::exists(kEtcdBinary));
    char pattern[] = "/tmp/sluice-etcd.XXXXXX";
    REQUIRE(::mkdtemp(pattern) != nullptr);
    dir_ = pattern;
    client_port_ = free_port_pair();
    launch();
  }

  // SIGKILL, and wait for the exit (at most 10 s).
  void kill9() {
    child_->send_signal(SIGKILL);
    REQUIRE(child_->wait_exit(std::chrono::seconds(10)).has_value());
  }
  // Starts it again on the same ports and data directory, once it has exited.
  void restart() { launch(); }

  // GET /health answers {"health":"true"} (one HTTP/1.0 request on a socket of its own, at
  // most 1 s).
  bool healthy() const {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return false;
    timeval limit{1, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(client_port_);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    std::string answer;
    if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0) {
      const std::string request = "GET /health HTTP/1.0\r\n\r\n";
      if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
          static_cast<ssize_t>(request.size())) {
        char buffer[1024];
        for (ssize_t n; (n = ::recv(fd, buffer, sizeof buffer, 0)) > 0 && answer.size() < 8192;) {
          answer.append(buffer, static_cast<std::size_t>(n));
        }
      }
    }
    ::close(fd);
    return answer.find("\"health\":\"true\"") != std::string::npos;
  }
  ~EtcdProcess() {
    child_.reset();
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  EtcdProcess(const EtcdProcess&) = delete;
  EtcdProcess& operator=(const EtcdProcess&) = delete;

  std::uint16_t client_port() const { return client_port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(client_port_); }
  Child& child() { return *child_; }

 private:
  void launch() {
    const std::string client = "http://127.0.0.1:" + std::to_string(client_port_);
    const std::string peer = "http://127.0.0.1:" + std::to_string(client_port_ + 1);
    child_.reset();
    child_ = std::make_unique<Child>(
        kEtcdBinary,
        std::vector<std::string>{"--name", "test", "--data-dir", (dir_ / "data").string(),
                                 "--listen-client-urls", client, "--advertise-client-urls", client,
                                 "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                                 "--initial-cluster", "test=" + peer, "--log-level", "warn"},
        (dir_ / "etcd.log").string());
    // Ready when GET /health says true (it has elected itself); at most 10 s.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!healthy()) {
      INFO("etcd was not healthy within 10 s; its log: " << (dir_ / "etcd.log").string());
      REQUIRE(std::chrono::steady_clock::now() < deadline);
      REQUIRE_FALSE(child_->wait_exit(std::chrono::milliseconds(0)).has_value());
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  std::filesystem::path dir_;
  std::uint16_t client_port_ = 0;
  std::unique_ptr<Child> child_;
};

}  // namespace sluice::test
