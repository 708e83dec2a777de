// The envoyproxy/ratelimit config, in the peer's own format, that the RLS tests ask about:
// tests/rls/rls_test.cpp (in-process, our C++ client) and tests/rls/rls_python_test.cpp (the
// binary, asked by tests/rls/rls_check.py). Hourly limits: the node's clock in-process does not
// move, and the Python check waits out the end of an hour; the duration_until_reset of a plain
// limit is the wall clock's, as the peer's.
#pragma once

#include <string_view>

namespace sluice::gateway::testing {

inline constexpr std::string_view kRlsConfig = R"(domain: rls_test
descriptors:
  - key: remote_address
    rate_limit:
      unit: hour
      requests_per_unit: 2
  - key: authenticated
    value: "false"
    descriptors:
      - key: path
        value: /login
        rate_limit:
          unit: hour
          requests_per_unit: 3
          name: login
      - key: path
        value: /healthz
        rate_limit:
          unlimited: true
  - key: plan
    value: bulk
    shadow_mode: true
    rate_limit:
      unit: hour
      requests_per_unit: 1
      name: bulk_shadow
  - key: tenant
    rate_limit:
      unit: hour
      requests_per_unit: 1
      name: per_tenant
  - key: premium
    rate_limit:
      unit: hour
      requests_per_unit: 5
      name: premium
      replaces:
        - name: per_tenant
  - key: batch
    rate_limit:
      unit: hour
      requests_per_unit: 10
  - key: card
    rate_limit:
      unit: hour
      requests_per_unit: 1
      failure_policy: closed
)";

}  // namespace sluice::gateway::testing
