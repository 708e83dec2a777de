// The client alone, built with pkg-config (tools/check_install.sh):
//   g++ acquire.cpp $(pkg-config --cflags --libs sluice-client) -o acquire
//   acquire HOST:PORT KEY N     # N acquires of KEY under 2 per minute: allowed, allowed, denied...
#include <cstdlib>
#include <iostream>
#include <string>

#include "client/client.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: acquire HOST:PORT KEY N\n";
    return 2;
  }
  sluice::client::ClientOptions options;
  options.servers = {argv[1]};
  auto client = sluice::client::Client::connect(options);
  if (!client.ok()) {
    std::cerr << client.status().to_string() << "\n";
    return 1;
  }
  const sluice::Rule rule{
      .algorithm = sluice::Algorithm::kFixedWindow, .limit = 2, .period_ms = 60'000};
  for (int i = 0, n = std::atoi(argv[3]); i < n; ++i) {
    const auto d = (*client)->acquire(argv[2], rule);
    if (!d.ok()) {
      std::cout << "error " << d.status().to_string() << "\n";
      continue;
    }
    std::cout << (d->allowed ? "allowed" : "denied") << " remaining " << d->remaining << "\n";
  }
  return 0;
}
