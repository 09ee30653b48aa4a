#!/usr/bin/env python3
"""check_trace.py TRACE RUNS STEPS - used by test_profiler: the Chrome trace
parses as JSON (json.load), holds one complete event per step of each run
with steps 0..STEPS-1 in order, and two pool-bytes counter events per step,
each an integer. Exits non-zero with a message otherwise."""
import json
import sys

path, runs, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with open(path) as f:
    trace = json.load(f)
events = trace["traceEvents"]
ops = [e for e in events if e["ph"] == "X"]
counters = [e for e in events if e["ph"] == "C"]
assert len(ops) == runs * steps, f"{len(ops)} X events, want {runs * steps}"
for i, e in enumerate(ops):
    assert e["args"]["run"] == i // steps and e["args"]["step"] == i % steps, e
    assert e["cat"] in ("forward", "recompute", "backward"), e
    assert e["dur"] >= 0 and e["ts"] >= 0, e
assert len(counters) == 2 * len(ops), f"{len(counters)} counter events"
for e in counters:
    assert e["name"] == "pool bytes in use", e
    assert isinstance(e["args"]["bytes"], int) and e["args"]["bytes"] >= 0, e
ts = [e["ts"] for e in ops]
assert ts == sorted(ts), "steps out of time order"
print(f"ok: {len(ops)} steps, {len(counters)} counter events")
