// A small service that limits the requests it is given with a rules file and a Sluice cluster,
// without HTTP: each line of standard input is one request, `METHOD PATH API_KEY`, and each line
// of output its answer, `allowed` or `denied` and the RateLimit field of the limit that decided.
//
//   embed_example RULES_FILE HOST:PORT[,HOST:PORT...] < requests.txt
//
// It uses the two libraries a C++ service embeds: the rules library (which limits apply to a
// request, under which keys) and the client (one batched call for all of them, with a failure
// policy when the cluster cannot answer). Exit status: 0, or 1 when the rules or the client
// cannot start.
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "client/client.h"
#include "rules/rule_set.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: embed_example RULES_FILE HOST:PORT[,HOST:PORT...]\n";
    return 2;
  }
  auto rules = sluice::rules::RuleSet::load(argv[1]);
  if (!rules) {
    for (const auto& d : rules.error()) std::cerr << d.to_string() << "\n";
    return 1;
  }
  sluice::client::ClientOptions options;
  options.servers.clear();
  std::stringstream seeds(argv[2]);
  for (std::string seed; std::getline(seeds, seed, ',');) options.servers.push_back(seed);
  options.failure_policy = sluice::client::FailurePolicy::kClosed;
  auto client = sluice::client::Client::connect(options);
  if (!client.ok()) {
    std::cerr << "cannot start the client: " << client.status().to_string() << "\n";
    return 1;
  }

  std::vector<sluice::rules::Limit> limits;
  for (std::string line; std::getline(std::cin, line);) {
    std::istringstream fields(line);
    std::string method, path, key;
    if (!(fields >> method >> path >> key)) continue;
    const sluice::rules::RequestAttributes request{
        .method = method, .path = path, .client_ip = "", .headers = {{"X-API-Key", key}}};
    rules->match(request, limits);
    std::vector<sluice::client::AcquireRequest> items;
    for (const auto& limit : limits) {
      items.push_back({.key = limit.key, .rule = limit.policy->rule, .cost = limit.policy->cost});
    }
    const auto results = (*client)->acquire_batch(items);
    bool allowed = true;
    std::string field;
    for (std::size_t i = 0; i < results.size(); ++i) {
      if (!results[i].ok()) {
        allowed = false;  // the failure policy is closed: an error denies
        field = results[i].status().to_string();
        continue;
      }
      if (!results[i]->allowed || field.empty()) {
        field = results[i]->ratelimit_field(limits[i].policy->name);
      }
      allowed = allowed && results[i]->allowed;
    }
    std::cout << (allowed ? "allowed" : "denied") << " " << field << "\n";
  }
  return 0;
}
