// How much wider a test's time bounds are in a sanitized build (tools/test.sh's ASan+UBSan and
// TSan passes run everything several times slower). Bounds on "it happened in time" catch a
// stall (seconds), not a slow machine.
#pragma once

namespace sluice::test {

#if defined(SLUICE_SANITIZED)
inline constexpr int kTimingSlack = 10;
#else
inline constexpr int kTimingSlack = 1;
#endif

}  // namespace sluice::test
