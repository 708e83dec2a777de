// What sluice-load's rls backend puts in a ShouldRateLimit call and reads from its answer,
// without gRPC's transport: tests check both directly (tests/load/rls_request_test.cpp).
//
// A call for key K with D descriptors is, in the request's domain, D descriptors of one entry
// each: descriptor i is {key "d<i>", value K}. An envoyproxy/ratelimit config answers it with a
// key-only entry per descriptor key (one counter per value), e.g. for D = 3:
//
//   domain: bench
//   descriptors:
//     - key: d0
//       rate_limit: {unit: second, requests_per_unit: 100}
//     - key: d1 ...
//     - key: d2 ...
//
// so every descriptor counts K under its own limit, as Envoy's descriptors of one request (a
// client address, a path, a user) each count under theirs.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "envoy/service/ratelimit/v3/rls.pb.h"

namespace sluice::load {

namespace rls = ::envoy::service::ratelimit::v3;

// The key of descriptor `index`'s entry: "d0", "d1", ...
std::string rls_descriptor_key(unsigned index);

// Makes `request` a call in `domain` with `descriptors` descriptors (their entry keys set, their
// values empty) and `hits` as hits_addend. Done once per reused message; allocates.
void prepare_rls_request(rls::RateLimitRequest& request, std::string_view domain,
                         unsigned descriptors, std::uint32_t hits);

// Sets every descriptor's value to `key`: the per-call part. REQUIRES: `request` prepared. Once
// the values' strings have grown to the longest key, allocates nothing.
void set_rls_request_key(rls::RateLimitRequest& request, std::string_view key);

struct RlsAnswer {
  enum class Outcome : std::uint8_t { kAllowed, kDenied, kError };
  Outcome outcome = Outcome::kError;
  std::string_view error;  // kError: what was wrong with the response (static text)
};

// The decision in a response to a call of `descriptors` descriptors, as Envoy takes it:
// overall_code OK is allowed and OVER_LIMIT denied. It is an error unless there is one status
// per descriptor, each OK or OVER_LIMIT, and an overall OVER_LIMIT has a status OVER_LIMIT (an
// overall OK may have one: a limit in shadow mode, as envoyproxy/ratelimit answers it).
RlsAnswer read_rls_response(const rls::RateLimitResponse& response, unsigned descriptors);

// A gRPC status code's name as gRPC spells it ("UNAVAILABLE"); "UNKNOWN_CODE" for a number
// outside the codes.
std::string_view grpc_code_name(int code);

}  // namespace sluice::load
