#include "tools/load/rls_request.h"

#include <array>

namespace sluice::load {

std::string rls_descriptor_key(unsigned index) { return "d" + std::to_string(index); }

void prepare_rls_request(rls::RateLimitRequest& request, std::string_view domain,
                         unsigned descriptors, std::uint32_t hits) {
  request.Clear();
  request.set_domain(std::string(domain));
  request.set_hits_addend(hits);
  for (unsigned i = 0; i < descriptors; ++i) {
    auto* entry = request.add_descriptors()->add_entries();
    entry->set_key(rls_descriptor_key(i));
  }
}

void set_rls_request_key(rls::RateLimitRequest& request, std::string_view key) {
  for (auto& descriptor : *request.mutable_descriptors()) {
    descriptor.mutable_entries(0)->mutable_value()->assign(key.data(), key.size());
  }
}

RlsAnswer read_rls_response(const rls::RateLimitResponse& response, unsigned descriptors) {
  RlsAnswer answer;
  if (static_cast<unsigned>(response.statuses_size()) != descriptors) {
    answer.error = "a response whose statuses do not match the request's descriptors";
    return answer;
  }
  bool any_over = false;
  for (const auto& status : response.statuses()) {
    if (status.code() == rls::RateLimitResponse::OVER_LIMIT) {
      any_over = true;
    } else if (status.code() != rls::RateLimitResponse::OK) {
      answer.error = "a descriptor status that is neither OK nor OVER_LIMIT";
      return answer;
    }
  }
  switch (response.overall_code()) {
    case rls::RateLimitResponse::OK:  // a descriptor OVER_LIMIT in shadow mode still allows
      answer.outcome = RlsAnswer::Outcome::kAllowed;
      return answer;
    case rls::RateLimitResponse::OVER_LIMIT:
      if (!any_over) {
        answer.error = "overall_code OVER_LIMIT with no descriptor OVER_LIMIT";
        return answer;
      }
      answer.outcome = RlsAnswer::Outcome::kDenied;
      return answer;
    default:
      answer.error = "overall_code neither OK nor OVER_LIMIT";
      return answer;
  }
}

std::string_view grpc_code_name(int code) {
  // grpc::StatusCode's values are 0..16, in this order.
  static constexpr std::array<std::string_view, 17> kNames = {"OK",
                                                              "CANCELLED",
                                                              "UNKNOWN",
                                                              "INVALID_ARGUMENT",
                                                              "DEADLINE_EXCEEDED",
                                                              "NOT_FOUND",
                                                              "ALREADY_EXISTS",
                                                              "PERMISSION_DENIED",
                                                              "RESOURCE_EXHAUSTED",
                                                              "FAILED_PRECONDITION",
                                                              "ABORTED",
                                                              "OUT_OF_RANGE",
                                                              "UNIMPLEMENTED",
                                                              "INTERNAL",
                                                              "UNAVAILABLE",
                                                              "DATA_LOSS",
                                                              "UNAUTHENTICATED"};
  if (code < 0 || static_cast<std::size_t>(code) >= kNames.size()) return "UNKNOWN_CODE";
  return kNames[static_cast<std::size_t>(code)];
}

}  // namespace sluice::load
