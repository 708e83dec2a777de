// The daemon's version as printed at start-up; matches the CMake project version.
#pragma once

#include <string_view>

namespace sluice::server {

inline constexpr std::string_view kSluicedVersion = "0.1.0";

}  // namespace sluice::server
