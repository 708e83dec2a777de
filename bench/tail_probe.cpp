// The control for issue 27's "whose tail": the smallest program that does what an open-loop
// PING run does, with none of Sluice in it. `tail_probe serve PORT` echoes every byte it reads
// on every connection from one thread that never sleeps (epoll_wait with a zero timeout, as
// sluiced --busy-poll); `tail_probe load PORT RATE CONNECTIONS SECONDS` sends 16-byte messages
// (a Sluice PING frame) in an open loop at RATE per second, spread round-robin over the
// connections, from one thread that never sleeps, and times each reply from when its request
// was due (not when it was sent), as sluice-load does. It prints one JSON line. Its sender also
// drives sluiced (a PING needs no HELLO without a token), to tell the server's part from the
// generator's. Run both pinned (bench/tail_control.sh). No dependency but Linux and the C++
// library: built by the script.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t kMessage = 16;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "tail_probe: %s: %s\n", what.c_str(), std::strerror(errno));
  std::exit(1);
}

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

void no_delay(int fd) {
  const int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) die("TCP_NODELAY");
}

sockaddr_in loopback(std::uint16_t port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return address;
}

int serve(std::uint16_t port) {
  const int listener = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  const int one = 1;
  setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  const sockaddr_in address = loopback(port);
  if (bind(listener, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    die("bind");
  }
  if (listen(listener, 1024) != 0) die("listen");
  const int poller = epoll_create1(0);
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.fd = listener;
  epoll_ctl(poller, EPOLL_CTL_ADD, listener, &event);
  std::vector<epoll_event> ready(256);
  std::vector<char> buffer(1 << 16);
  for (;;) {
    const int n = epoll_wait(poller, ready.data(), static_cast<int>(ready.size()), 0);
    for (int i = 0; i < n; ++i) {
      const int fd = ready[i].data.fd;
      if (fd == listener) {
        const int connection = accept4(listener, nullptr, nullptr, SOCK_NONBLOCK);
        if (connection < 0) continue;
        no_delay(connection);
        epoll_event added{};
        added.events = EPOLLIN;
        added.data.fd = connection;
        epoll_ctl(poller, EPOLL_CTL_ADD, connection, &added);
        continue;
      }
      const ssize_t got = read(fd, buffer.data(), buffer.size());
      if (got <= 0) {
        if (got < 0 && errno == EAGAIN) continue;
        close(fd);
        continue;
      }
      // Replies are small and the peer reads them: a short write only happens on a dying
      // connection, which is then closed.
      if (write(fd, buffer.data(), static_cast<std::size_t>(got)) != got) close(fd);
    }
  }
}

struct Connection {
  int fd = -1;
  std::deque<std::int64_t> due;  // when each request in flight was due, oldest first
  std::size_t partial = 0;       // bytes of the next reply already read
};

int load(std::uint16_t port, double rate, int connections, double seconds) {
  std::vector<Connection> open(static_cast<std::size_t>(connections));
  const int poller = epoll_create1(0);
  for (std::size_t c = 0; c < open.size(); ++c) {
    open[c].fd = socket(AF_INET, SOCK_STREAM, 0);
    const sockaddr_in address = loopback(port);
    if (connect(open[c].fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
      die("connect");
    }
    no_delay(open[c].fd);
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.u64 = c;
    epoll_ctl(poller, EPOLL_CTL_ADD, open[c].fd, &event);
  }
  // A Sluice PING with an empty body (docs/PROTOCOL.md, section 2: magic, version 1, opcode 2,
  // request id 0, body length 0): the echo server sends it back as it is, and sluiced answers
  // it with a 16-byte reply, so the same sender measures both servers.
  const unsigned char message[kMessage] = {0x53, 0x4c, 0x01, 0x02};
  std::vector<std::int64_t> latencies;
  const auto total = static_cast<std::uint64_t>(rate * seconds);
  latencies.reserve(total);
  const double interval_ns = 1e9 / rate;
  const std::int64_t start = now_ns() + 10'000'000;  // 10 ms to settle
  std::uint64_t sent = 0;
  std::vector<epoll_event> ready(256);
  std::vector<char> buffer(1 << 16);
  const std::int64_t give_up = start + static_cast<std::int64_t>(seconds * 1e9) + 2'000'000'000;
  while (latencies.size() < total && now_ns() < give_up) {
    const std::int64_t now = now_ns();
    while (sent < total &&
           start + static_cast<std::int64_t>(static_cast<double>(sent) * interval_ns) <= now) {
      Connection& c = open[sent % open.size()];
      if (write(c.fd, message, kMessage) != static_cast<ssize_t>(kMessage)) die("write");
      c.due.push_back(start + static_cast<std::int64_t>(static_cast<double>(sent) * interval_ns));
      ++sent;
    }
    const int n = epoll_wait(poller, ready.data(), static_cast<int>(ready.size()), 0);
    for (int i = 0; i < n; ++i) {
      Connection& c = open[ready[i].data.u64];
      const ssize_t got = recv(c.fd, buffer.data(), buffer.size(), MSG_DONTWAIT);
      if (got <= 0) {
        if (got < 0 && errno == EAGAIN) continue;
        die("recv");
      }
      const std::int64_t arrived = now_ns();
      c.partial += static_cast<std::size_t>(got);
      while (c.partial >= kMessage && !c.due.empty()) {
        latencies.push_back(arrived - c.due.front());
        c.due.pop_front();
        c.partial -= kMessage;
      }
    }
  }
  if (latencies.empty()) {
    std::fprintf(stderr, "tail_probe: no reply\n");
    return 1;
  }
  std::sort(latencies.begin(), latencies.end());
  const auto at = [&](double q) {
    const auto index = static_cast<std::size_t>(q * static_cast<double>(latencies.size() - 1));
    return static_cast<double>(latencies[index]) / 1000.0;
  };
  std::printf(
      "{\"rate\":%.0f,\"connections\":%d,\"sent\":%llu,\"answered\":%zu,\"p50_us\":%.1f,"
      "\"p99_us\":%.1f,\"p999_us\":%.1f,\"max_us\":%.1f}\n",
      rate, connections, static_cast<unsigned long long>(sent), latencies.size(), at(0.5), at(0.99),
      at(0.999), static_cast<double>(latencies.back()) / 1000.0);
  return latencies.size() == total ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "serve") {
    return serve(static_cast<std::uint16_t>(std::atoi(argv[2])));
  }
  if (argc == 6 && std::string(argv[1]) == "load") {
    return load(static_cast<std::uint16_t>(std::atoi(argv[2])), std::atof(argv[3]),
                std::atoi(argv[4]), std::atof(argv[5]));
  }
  std::fprintf(stderr,
               "usage: tail_probe serve PORT | tail_probe load PORT RATE CONNECTIONS SECONDS\n");
  return 2;
}
