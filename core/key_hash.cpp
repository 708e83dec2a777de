#include "core/key_hash.h"

#include <xxhash.h>

namespace sluice {

KeyHash hash_key(std::string_view key) {
  // XXH3_128bits is the seed-0 variant; the recipe is fixed by the protocol.
  const XXH128_hash_t h = XXH3_128bits(key.data(), key.size());
  return KeyHash{.lo = h.low64, .hi = h.high64};
}

}  // namespace sluice
