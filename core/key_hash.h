// How a key is hashed, and which bits choose what. Clients and servers must agree, so the
// recipe is part of the protocol (docs/PROTOCOL.md, "Key routing").
#pragma once

#include <cstdint>
#include <string_view>

namespace sluice {

// XXH3-128 of the key bytes (seed 0). The pair is the key's fingerprint in the counter table.
struct KeyHash {
  std::uint64_t lo = 0;
  std::uint64_t hi = 0;
  friend constexpr bool operator==(const KeyHash&, const KeyHash&) = default;
};

KeyHash hash_key(std::string_view key);

// Shard within a node: the low 32 bits of `lo`, scaled to [0, shard_count).
constexpr std::uint32_t shard_for(const KeyHash& h, std::uint32_t shard_count) {
  return static_cast<std::uint32_t>(((h.lo & 0xffffffffull) * shard_count) >> 32);
}

// Slot hint within a shard's table: the high 32 bits of `lo`, scaled to [0, slots).
constexpr std::uint64_t slot_for(const KeyHash& h, std::uint64_t slots) {
  return ((h.lo >> 32) * slots) >> 32;
}

// The cluster ring (later) places keys by `hi`, so ring, shard and slot use disjoint bits.

}  // namespace sluice
