// How late a timerfd fires on this machine when its owner never sleeps (epoll_wait with a zero
// timeout, as sluice-load --busy-poll polls its io_context): 30,000 absolute deadlines 33.3 us
// apart (30,000 per second), each armed after the previous one fired; prints the lateness
// percentiles. sluice-load's open loop paces with an Asio timer, which is a timerfd underneath,
// so this is a floor under the latency it measures from each request's due time (issue 27).
// Build and run: g++ -O2 -std=c++20 -o /tmp/timer_probe bench/timer_probe.cpp &&
//                taskset -c 0 /tmp/timer_probe
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

namespace {

std::int64_t now_ns() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1'000'000'000LL + t.tv_nsec;
}

}  // namespace

int main() {
  const int timer = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
  const int poller = epoll_create1(0);
  epoll_event event{};
  event.events = EPOLLIN;
  epoll_ctl(poller, EPOLL_CTL_ADD, timer, &event);
  constexpr int kDeadlines = 30'000;
  constexpr std::int64_t kIntervalNs = 33'333;
  std::vector<std::int64_t> late;
  late.reserve(kDeadlines);
  std::int64_t due = now_ns() + 1'000'000;
  for (int i = 0; i < kDeadlines; ++i) {
    due += kIntervalNs;
    itimerspec when{};
    when.it_value.tv_sec = due / 1'000'000'000;
    when.it_value.tv_nsec = due % 1'000'000'000;
    timerfd_settime(timer, TFD_TIMER_ABSTIME, &when, nullptr);
    epoll_event ready{};
    while (epoll_wait(poller, &ready, 1, 0) == 0) {
    }
    std::uint64_t expirations = 0;
    if (read(timer, &expirations, sizeof expirations) != sizeof expirations) return 1;
    late.push_back(now_ns() - due);
  }
  std::sort(late.begin(), late.end());
  const auto at = [&](double q) {
    return static_cast<double>(late[static_cast<std::size_t>(q * (late.size() - 1))]) / 1000.0;
  };
  std::printf(
      "timerfd lateness, polled without sleeping: p50 %.1f us, p90 %.1f, p99 %.1f, p99.9 %.1f, "
      "max %.1f\n",
      at(0.5), at(0.9), at(0.99), at(0.999), static_cast<double>(late.back()) / 1000.0);
  return 0;
}
