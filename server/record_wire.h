// A record as the table holds it (RecordImage) and as the protocol carries it (WireRecord,
// docs/PROTOCOL.md 10.4): the one pair of conversions that replication, pulls and applying use.
#pragma once

#include "core/key_hash.h"
#include "protocol/cluster_messages.h"
#include "server/table/counter_table.h"

namespace sluice::server {

inline protocol::WireRecord to_wire(const RecordImage& image) {
  protocol::WireRecord record;
  record.fp_lo = image.key.lo;
  record.fp_hi = image.key.hi;
  record.algorithm = image.algorithm;
  record.capacity_class = image.capacity_class;
  record.state_a = image.state.a;
  record.state_b = image.state.b;
  record.idle_at_ns = image.idle_at_ns;
  return record;
}

inline RecordImage from_wire(const protocol::WireRecord& record) {
  RecordImage image;
  image.key = KeyHash{record.fp_lo, record.fp_hi};
  image.algorithm = record.algorithm;
  image.capacity_class = record.capacity_class;
  image.state = CounterState{record.state_a, record.state_b};
  image.idle_at_ns = record.idle_at_ns;
  return image;
}

}  // namespace sluice::server
