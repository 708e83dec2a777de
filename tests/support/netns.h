// A private network for a fault test: the test thread enters a network namespace of its own
// (unshare(CLONE_NEWNET), as root), where only `lo` exists and every 127.0.0.0/8 address is
// local, so processes bound to 127.0.0.2, 127.0.0.3, ... are separate "hosts". The processes and
// threads the test starts afterwards inherit it; nothing outside it is touched. Debian's
// nftables then drops the packets between chosen addresses silently (no RST: a connect times
// out, a connection stalls), as a partitioned network does. ../shared/TOOLCHAIN.md, "Network
// faults without touching the host".
//
// Where the namespace cannot be made (not root, no nft), private_network() fails the test under
// CI=true and otherwise says the test is skipped, with the reason: it never passes silently.
#pragma once

#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

namespace sluice::test {

class PrivateNetwork {
 public:
  // Enters a fresh namespace with `lo` up; nullptr and `why` when it cannot.
  static std::unique_ptr<PrivateNetwork> enter(std::string& why) {
    if (std::system("nft --version >/dev/null 2>&1") != 0) {
      why = "nft is missing (tools/deps.sh installs nftables)";
      return nullptr;
    }
    const int home = ::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    if (home < 0) {
      why = std::string("open /proc/thread-self/ns/net: ") + std::strerror(errno);
      return nullptr;
    }
    if (::unshare(CLONE_NEWNET) != 0) {
      why = std::string("unshare(CLONE_NEWNET): ") + std::strerror(errno) +
            " (a private network namespace needs root)";
      ::close(home);
      return nullptr;
    }
    std::unique_ptr<PrivateNetwork> network(new PrivateNetwork(home));
    if (!network->loopback_up(why)) return nullptr;
    if (!network->nft("add table inet sluice_test\n"
                      "add chain inet sluice_test out { type filter hook output priority 0; }\n",
                      why)) {
      return nullptr;
    }
    return network;
  }

  // Back to the namespace the thread came from; the private one goes with its last process.
  ~PrivateNetwork() {
    ::setns(home_, CLONE_NEWNET);
    ::close(home_);
  }
  PrivateNetwork(const PrivateNetwork&) = delete;
  PrivateNetwork& operator=(const PrivateNetwork&) = delete;

  // Drops every packet between addresses `a` and `b`, both ways.
  void cut(const std::string& a, const std::string& b) {
    apply("add rule inet sluice_test out ip saddr " + a + " ip daddr " + b + " drop\n" +
          "add rule inet sluice_test out ip saddr " + b + " ip daddr " + a + " drop\n");
  }
  // Drops every packet between address `a` and TCP port `port` of any address, both ways (a
  // node and an etcd member on 127.0.0.1, which the test's own clients share).
  void cut_port(const std::string& a, std::uint16_t port) {
    const std::string p = std::to_string(port);
    apply("add rule inet sluice_test out ip saddr " + a + " tcp dport " + p + " drop\n" +
          "add rule inet sluice_test out ip daddr " + a + " tcp sport " + p + " drop\n");
  }
  // Every cut healed.
  void heal() { apply("flush chain inet sluice_test out\n"); }

 private:
  explicit PrivateNetwork(int home) : home_(home) {}

  void apply(const std::string& script) {
    std::string why;
    const bool ok = nft(script, why);
    INFO(why);
    REQUIRE(ok);
  }

  // Runs `nft -f -` on `script` in this namespace (a child forked by this thread is in it).
  static bool nft(const std::string& script, std::string& why) {
    FILE* pipe = ::popen("nft -f - 2>&1", "w");
    if (pipe == nullptr) {
      why = std::string("popen nft: ") + std::strerror(errno);
      return false;
    }
    std::fwrite(script.data(), 1, script.size(), pipe);
    const int status = ::pclose(pipe);
    if (status != 0) {
      why = "nft refused: " + script;
      return false;
    }
    return true;
  }

  static bool loopback_up(std::string& why) {
    const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ifreq request{};
    std::strncpy(request.ifr_name, "lo", IFNAMSIZ - 1);
    const bool ok = fd >= 0 && ::ioctl(fd, SIOCGIFFLAGS, &request) == 0 &&
                    (request.ifr_flags = static_cast<short>(request.ifr_flags | IFF_UP),
                     ::ioctl(fd, SIOCSIFFLAGS, &request) == 0);
    if (!ok) why = std::string("bringing lo up: ") + std::strerror(errno);
    if (fd >= 0) ::close(fd);
    return ok;
  }

  int home_;
};

// The private network for a partition test, or nullptr when it cannot be made: then the test
// has failed (CI=true) or has said it is skipped, and returns.
inline std::unique_ptr<PrivateNetwork> private_network() {
  std::string why;
  auto network = PrivateNetwork::enter(why);
  if (network) return network;
  const char* ci = std::getenv("CI");
  if (ci != nullptr && std::string(ci) == "true") {
    FAIL("no private network namespace, so the partition test cannot run: " << why);
  }
  WARN("SKIPPED: no private network namespace (" << why << "); under CI=true this fails");
  return nullptr;
}

}  // namespace sluice::test
