#include "client/lease_table.h"

#include <algorithm>
#include <cstring>

namespace sluice::client::detail {

namespace {

constexpr std::uint64_t kUnitMask = (std::uint64_t{1} << 24) - 1;

}  // namespace

std::uint32_t lease_units(const Rule& rule, const LeasePolicy& policy) {
  if (policy.lease_ns == 0) return 0;
  switch (rule.algorithm) {
    case Algorithm::kFixedWindow:
    case Algorithm::kTokenBucket:
    case Algorithm::kGcra:
      break;
    case Algorithm::kSlidingWindow:
    case Algorithm::kSlidingLog:
      return 0;
  }
  const std::uint64_t k =
      rule.capacity() / (std::uint64_t{std::max<std::uint32_t>(policy.gateways, 1)} * 10);
  if (k < 2) return 0;
  return static_cast<std::uint32_t>(std::min<std::uint64_t>(k, LeaseTable::kMaxUnits));
}

LeaseTable::LeaseTable(std::size_t capacity)
    : geometry_(bucket_geometry(capacity, kShards, kWays)),
      shards_(make_shards<Shard, Bucket>(kShards, geometry_)) {}

const LeaseTable::Entry* LeaseTable::find(std::uint64_t fingerprint) const {
  if (geometry_.capacity == 0) return nullptr;
  const Bucket& bucket = bucket_of(shard_of(fingerprint), fingerprint);
  for (const Entry& e : bucket.entries) {
    if (e.fingerprint.load(std::memory_order_acquire) == fingerprint) return &e;
  }
  return nullptr;
}

bool LeaseTable::has(std::uint64_t fingerprint, std::uint32_t cost, std::uint64_t now_ns) const {
  const Entry* e = find(fingerprint);
  if (e == nullptr || now_ns >= e->until_ns.load(std::memory_order_acquire)) return false;
  const std::uint64_t word = e->units.load(std::memory_order_acquire);
  return (word >> 24) == tag_of(fingerprint) && (word & kUnitMask) >= cost;
}

bool LeaseTable::take(std::uint64_t fingerprint, std::uint32_t cost, std::uint64_t now_ns,
                      LeaseTake& out) {
  Entry* e = const_cast<Entry*>(find(fingerprint));
  if (e == nullptr || now_ns >= e->until_ns.load(std::memory_order_acquire)) return false;
  // The word names the entry's key (its tag): units of a lease the entry held for another key,
  // since the fingerprint was read, are never taken.
  std::uint64_t word = e->units.load(std::memory_order_acquire);
  for (;;) {
    if ((word >> 24) != tag_of(fingerprint) || (word & kUnitMask) < cost) return false;
    if (e->units.compare_exchange_weak(word, word - cost, std::memory_order_acq_rel,
                                       std::memory_order_acquire)) {
      break;
    }
  }
  out.left = static_cast<std::uint32_t>((word & kUnitMask) - cost);
  out.remaining = e->remaining.load(std::memory_order_relaxed);
  out.reset_at_ns = e->reset_at_ns.load(std::memory_order_relaxed);
  return true;
}

// How much an entry is worth keeping, lowest first out: one with a lease request out or a lease
// that ended within lease_ns above any other, then the requests of its current heat window,
// then the later window.
std::uint64_t LeaseTable::heat(const Entry& e, std::uint64_t now_ns, const LeasePolicy& policy) {
  if (now_ns < e.asked_until_ns ||
      (e.leased_until_ns != 0 && now_ns < e.leased_until_ns + policy.lease_ns)) {
    return ~std::uint64_t{0};
  }
  const bool current = now_ns >= e.window_start_ns && now_ns - e.window_start_ns < policy.lease_ns;
  const std::uint64_t hits = current ? e.hits : 0;
  return hits << 40 | (e.window_start_ns >> 24 & ((std::uint64_t{1} << 40) - 1));
}

std::uint32_t LeaseTable::want(std::uint64_t fingerprint, std::string_view key, const Rule& rule,
                               std::uint64_t now_ns, std::uint64_t request_deadline_ns,
                               const LeasePolicy& policy) {
  if (geometry_.capacity == 0 || key.size() > kMaxKey || key.empty()) return 0;
  const std::uint32_t units = lease_units(rule, policy);
  if (units == 0) return 0;
  Shard& shard = shard_of(fingerprint);
  std::lock_guard lock(shard.mu);
  Bucket& bucket = bucket_of(shard, fingerprint);
  Entry* slot = nullptr;
  Entry* victim = nullptr;
  for (Entry& e : bucket.entries) {
    const std::uint64_t f = e.fingerprint.load(std::memory_order_relaxed);
    if (f == fingerprint) {
      slot = &e;
      break;
    }
    if (e.running) continue;  // a running lease keeps its entry until it ends
    if (f == 0) {
      if (victim == nullptr || victim->fingerprint.load(std::memory_order_relaxed) != 0) {
        victim = &e;
      }
      continue;
    }
    if (victim == nullptr || (victim->fingerprint.load(std::memory_order_relaxed) != 0 &&
                              heat(e, now_ns, policy) < heat(*victim, now_ns, policy))) {
      victim = &e;
    }
  }
  if (slot == nullptr) {
    if (victim == nullptr) return 0;  // every entry holds a running lease
    slot = victim;
    slot->units.store(0, std::memory_order_release);
    slot->until_ns.store(0, std::memory_order_release);
    slot->fingerprint.store(fingerprint, std::memory_order_release);
    slot->window_start_ns = now_ns;
    slot->hits = 0;
    slot->asked_until_ns = 0;
    slot->leased_until_ns = 0;
    slot->key_size = static_cast<std::uint8_t>(key.size());
    std::memcpy(slot->key, key.data(), key.size());
    slot->rule = rule;
  }
  Entry& e = *slot;
  if (now_ns - e.window_start_ns >= policy.lease_ns || now_ns < e.window_start_ns) {
    e.window_start_ns = now_ns;
    e.hits = 0;
  }
  ++e.hits;
  const bool hot = e.hits >= policy.threshold ||
                   (e.leased_until_ns != 0 && now_ns < e.leased_until_ns + policy.lease_ns);
  if (!hot || now_ns < e.asked_until_ns) return 0;
  e.asked_until_ns = request_deadline_ns;
  return units;
}

void LeaseTable::answered(std::uint64_t fingerprint) {
  if (geometry_.capacity == 0) return;
  Shard& shard = shard_of(fingerprint);
  std::lock_guard lock(shard.mu);
  for (Entry& e : bucket_of(shard, fingerprint).entries) {
    if (e.fingerprint.load(std::memory_order_relaxed) == fingerprint) e.asked_until_ns = 0;
  }
}

void LeaseTable::end_locked(Entry& e, const std::function<void(const EndedLease&)>& ended) {
  if (!e.running) return;
  e.running = false;
  running_.fetch_sub(1, std::memory_order_relaxed);
  const std::uint64_t fingerprint = e.fingerprint.load(std::memory_order_relaxed);
  // From here on no request takes a unit: what is left is exactly what was not spent.
  const std::uint64_t word = e.units.exchange(tag_of(fingerprint) << 24, std::memory_order_acq_rel);
  e.until_ns.store(0, std::memory_order_release);
  const auto left = static_cast<std::uint32_t>(word & kUnitMask);
  if (left != 0 && (word >> 24) == tag_of(fingerprint)) {
    ended(EndedLease{std::string_view(e.key, e.key_size), e.rule, left, e.stamp, e.owner});
  }
}

bool LeaseTable::install(std::uint64_t fingerprint, std::string_view key, const Rule& rule,
                         std::uint32_t units, std::uint32_t stamp, std::uint64_t until_ns,
                         std::uint64_t remaining, std::uint64_t reset_at_ns, std::uint64_t now_ns,
                         const void* owner, const std::function<void(const EndedLease&)>& ended) {
  if (geometry_.capacity == 0) return false;
  Shard& shard = shard_of(fingerprint);
  std::lock_guard lock(shard.mu);
  Bucket& bucket = bucket_of(shard, fingerprint);
  Entry* slot = nullptr;
  for (Entry& e : bucket.entries) {
    if (e.fingerprint.load(std::memory_order_relaxed) == fingerprint) slot = &e;
  }
  if (slot == nullptr || slot->key_size != key.size() ||
      std::memcmp(slot->key, key.data(), key.size()) != 0) {
    // Evicted since the request asked (or another key shares the fingerprint): no entry to
    // spend from, so the units go straight back.
    if (units != 0) ended(EndedLease{key, rule, units, stamp, owner});
    return false;
  }
  Entry& e = *slot;
  end_locked(e, ended);
  e.asked_until_ns = 0;
  e.leased_until_ns = until_ns;
  if (units == 0 || until_ns <= now_ns) {
    if (units != 0) ended(EndedLease{key, rule, units, stamp, owner});
    return true;
  }
  e.stamp = stamp;
  e.owner = owner;
  e.rule = rule;
  e.remaining.store(remaining, std::memory_order_relaxed);
  e.reset_at_ns.store(reset_at_ns, std::memory_order_relaxed);
  e.until_ns.store(until_ns, std::memory_order_release);
  // Last: the units make the lease takeable.
  e.units.store(tag_of(fingerprint) << 24 | std::min<std::uint64_t>(units, kUnitMask),
                std::memory_order_release);
  e.running = true;
  running_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void LeaseTable::forget_key(std::string_view key) {
  if (geometry_.capacity == 0 || running_.load(std::memory_order_relaxed) == 0) return;
  for (std::size_t s = 0; s < kShards; ++s) {
    Shard& shard = shards_[s];
    std::lock_guard lock(shard.mu);
    for (std::size_t b = 0; b < geometry_.buckets_per_shard; ++b) {
      for (Entry& e : shard.buckets[b].entries) {
        if (!e.running || e.key_size != key.size() ||
            std::memcmp(e.key, key.data(), key.size()) != 0) {
          continue;
        }
        end_locked(e, [](const EndedLease&) {});
      }
    }
  }
}

std::uint64_t LeaseTable::end_leases(std::uint64_t now_ns, bool all,
                                     const std::function<void(const EndedLease&)>& ended) {
  if (geometry_.capacity == 0 || running_.load(std::memory_order_relaxed) == 0) return 0;
  std::uint64_t next = 0;
  for (std::size_t s = 0; s < kShards; ++s) {
    Shard& shard = shards_[s];
    std::lock_guard lock(shard.mu);
    for (std::size_t b = 0; b < geometry_.buckets_per_shard; ++b) {
      for (Entry& e : shard.buckets[b].entries) {
        if (!e.running) continue;
        const std::uint64_t until = e.until_ns.load(std::memory_order_relaxed);
        // A lease whose units are all spent has nothing to give back: it ends at its time too.
        if (all || now_ns >= until) {
          end_locked(e, ended);
        } else if (next == 0 || until < next) {
          next = until;
        }
      }
    }
  }
  return next;
}

}  // namespace sluice::client::detail
