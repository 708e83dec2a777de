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
  // A member of a cluster of several (EtcdQuorum): its name, its client port (the peer port is
  // the next one) and --initial-cluster, naming every member.
  struct Member {
    std::string name;
    std::uint16_t client_port = 0;
    std::string initial_cluster;
  };

  // A single-member etcd, healthy when the constructor returns.
  EtcdProcess() : EtcdProcess(Member{"test", free_port_pair(), ""}, /*wait=*/true) {}
  // A member of a cluster of several: it cannot be healthy before a quorum has started, so
  // `wait` false returns at once and the caller waits with wait_healthy().
  EtcdProcess(Member member, bool wait) : member_(std::move(member)) {
    INFO(kEtcdBinary << " is missing: tools/deps.sh installs etcd-server");
    REQUIRE(std::filesystem::exists(kEtcdBinary));
    char pattern[] = "/tmp/sluice-etcd.XXXXXX";
    REQUIRE(::mkdtemp(pattern) != nullptr);
    dir_ = pattern;
    client_port_ = member_.client_port;
    if (member_.initial_cluster.empty()) {
      member_.initial_cluster = member_.name + "=" + peer_url();
    }
    spawn();
    if (wait) wait_healthy();
  }

  // SIGKILL, and wait for the exit (at most 10 s).
  void kill9() {
    child_->send_signal(SIGKILL);
    REQUIRE(child_->wait_exit(std::chrono::seconds(10)).has_value());
  }
  // Starts it again on the same ports and data directory, once it has exited.
  void restart() {
    spawn();
    wait_healthy();
  }

  // Polls GET /health until it says true (the member has a leader): at most `limit`.
  void wait_healthy(std::chrono::seconds limit = std::chrono::seconds(10)) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!healthy()) {
      INFO("etcd member " << member_.name << " was not healthy within " << limit.count()
                          << " s; its log: " << (dir_ / "etcd.log").string());
      REQUIRE(std::chrono::steady_clock::now() < deadline);
      REQUIRE_FALSE(child_->wait_exit(std::chrono::milliseconds(0)).has_value());
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  // GET /health answers {"health":"true"} (one HTTP/1.0 request on a socket of its own, at
  // most 1 s).
  bool healthy() const { return get("/health").find("\"health\":\"true\"") != std::string::npos; }

  // The answer (headers and body) to one HTTP/1.0 request, "" when there is none within 1 s:
  // GET when `body` is empty, else POST of that JSON.
  std::string get(const std::string& path, const std::string& body = "") const {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return "";
    timeval limit{1, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(client_port_);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    std::string answer;
    if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0) {
      const std::string request =
          body.empty() ? "GET " + path + " HTTP/1.0\r\n\r\n"
                       : "POST " + path + " HTTP/1.0\r\nContent-Type: application/json\r\n" +
                             "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
      if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
          static_cast<ssize_t>(request.size())) {
        char buffer[1024];
        for (ssize_t n; (n = ::recv(fd, buffer, sizeof buffer, 0)) > 0 && answer.size() < 8192;) {
          answer.append(buffer, static_cast<std::size_t>(n));
        }
      }
    }
    ::close(fd);
    return answer;
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
  std::string peer_url() const { return "http://127.0.0.1:" + std::to_string(client_port_ + 1); }
  const std::string& name() const { return member_.name; }
  Child& child() { return *child_; }

 private:
  void spawn() {
    const std::string client = url();
    const std::string peer = peer_url();
    child_.reset();
    child_ = std::make_unique<Child>(
        kEtcdBinary,
        std::vector<std::string>{"--name", member_.name, "--data-dir", (dir_ / "data").string(),
                                 "--listen-client-urls", client, "--advertise-client-urls", client,
                                 "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                                 "--initial-cluster", member_.initial_cluster, "--log-level",
                                 "warn"},
        (dir_ / "etcd.log").string());
  }

  Member member_;
  std::filesystem::path dir_;
  std::uint16_t client_port_ = 0;
  std::unique_ptr<Child> child_;
};

}  // namespace sluice::test
