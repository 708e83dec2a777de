// Internal: the shape shared by the local layer's bounded tables (the blocked-key cache, the
// fallback limiter, the lease table): shards of a power-of-two number of buckets of `ways`
// entries each, a shard chosen by a fingerprint's top 6 bits and a bucket by its low bits.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace sluice::client::detail {

struct BucketGeometry {
  std::size_t buckets_per_shard = 0;  // a power of two; 0 for a capacity of 0
  std::uint64_t bucket_mask = 0;      // buckets_per_shard - 1
  std::size_t capacity = 0;           // entries over all shards: at least what was asked for
};

// Room for at least `capacity` entries in `shards` shards of `ways`-way buckets.
constexpr BucketGeometry bucket_geometry(std::size_t capacity, std::size_t shards,
                                         std::size_t ways) {
  if (capacity == 0) return {};
  const std::size_t per_shard = (capacity + shards - 1) / shards;
  const std::size_t buckets = std::bit_ceil((per_shard + ways - 1) / ways);
  return {buckets, buckets - 1, buckets * ways * shards};
}

// `count` shards, each given the geometry's buckets (none for a capacity of 0). Shard has a
// `std::unique_ptr<Bucket[]> buckets` member.
template <typename Shard, typename Bucket>
std::unique_ptr<Shard[]> make_shards(std::size_t count, const BucketGeometry& geometry) {
  std::unique_ptr<Shard[]> shards(new Shard[count]);
  if (geometry.buckets_per_shard == 0) return shards;
  for (std::size_t s = 0; s < count; ++s) {
    shards[s].buckets = std::make_unique<Bucket[]>(geometry.buckets_per_shard);
  }
  return shards;
}

static_assert(bucket_geometry(1, 64, 4).capacity == 256);
static_assert(bucket_geometry(65536, 64, 4).buckets_per_shard == 256);

}  // namespace sluice::client::detail
