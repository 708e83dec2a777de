#!/usr/bin/env python3
"""Displacement in one segment of the counter table, simulated (docs/ARCHITECTURE.md, "Segments").

A segment is a sorted linear-probing array: records in the order of their homes, each at its
home or just after the record before it. This fills many segments of HOMES home slots to LOAD
with uniformly random homes and prints, over the segments, the median and 99th percentile of
the largest displacement (to compare with kMaxDisplacement, 63) and the mean displacement (about
the slots a lookup walks).

Usage: bench/probe_sim.py [HOMES [LOAD [SEGMENTS [SEED]]]]   (default 4096 0.92 1000 1)
"""
import random
import statistics
import sys

homes = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
load = float(sys.argv[2]) if len(sys.argv) > 2 else 0.92
segments = int(sys.argv[3]) if len(sys.argv) > 3 else 1000
rng = random.Random(int(sys.argv[4]) if len(sys.argv) > 4 else 1)

largest, means = [], []
for _ in range(segments):
    records = int(load * homes)
    pos, worst, total = -1, 0, 0
    for home in sorted(rng.randrange(homes) for _ in range(records)):
        pos = max(home, pos + 1)
        worst = max(worst, pos - home)
        total += pos - home
    largest.append(worst)
    means.append(total / records)
largest.sort()
print(f"{segments} segments of {homes} homes at load {load}:")
print(f"largest displacement: median {statistics.median(largest):g}, "
      f"99th percentile {largest[int(0.99 * len(largest))]}, max {largest[-1]}")
print(f"mean displacement: {statistics.mean(means):.2f}")
