#!/usr/bin/env python3
"""Checks a Chrome/Perfetto trace as meshsim writes it (issue 37: one time unit and category set
across commands, one thread name per track, no mis-nested slices).

  tools/check_trace.py TRACE.json [TRACE.json ...]

Each file must be a JSON object with "traceEvents" and displayTimeUnit "ms"; every event a dict
with a phase; every track (pid, tid) that holds a slice named by a thread_name metadata event,
each process by a process_name; and the complete slices ("X") of one track properly nested: two
slices either disjoint or one inside the other (Perfetto draws a slice that straddles another's
end on a wrong level). Exits 1 naming the first problems of each file."""
import json
import sys
from collections import defaultdict

EPS = 1e-6  # microseconds: times are printed with limited digits


def problems(path):
    with open(path) as f:
        doc = json.load(f)
    out = []
    if not isinstance(doc, dict) or "traceEvents" not in doc:
        return ["not an object with traceEvents"]
    if doc.get("displayTimeUnit") != "ms":
        out.append(f"displayTimeUnit is {doc.get('displayTimeUnit')!r}, not 'ms'")
    threads, processes = set(), set()
    slices = defaultdict(list)
    for i, e in enumerate(doc["traceEvents"]):
        if not isinstance(e, dict) or "ph" not in e:
            out.append(f"event {i} has no phase")
            continue
        if e["ph"] == "M" and e.get("name") == "thread_name":
            threads.add((e["pid"], e["tid"]))
        elif e["ph"] == "M" and e.get("name") == "process_name":
            processes.add(e["pid"])
        elif e["ph"] == "X":
            if not (e.get("dur", -1) >= 0):
                out.append(f"event {i} ({e.get('name')}) has no duration >= 0")
                continue
            slices[(e["pid"], e["tid"])].append((float(e["ts"]), float(e["ts"]) + float(e["dur"]), e.get("name")))
    for track, spans in sorted(slices.items(), key=lambda kv: (str(kv[0][0]), str(kv[0][1]))):
        if track not in threads:
            out.append(f"track pid {track[0]} tid {track[1]} has slices but no thread_name")
        if track[0] not in processes:
            out.append(f"pid {track[0]} has slices but no process_name")
        spans.sort(key=lambda s: (s[0], -s[1]))
        open_ends = []  # ends of the enclosing slices, innermost last
        for start, end, name in spans:
            while open_ends and open_ends[-1][0] <= start + EPS:
                open_ends.pop()
            if open_ends and end > open_ends[-1][0] + EPS:
                out.append(f"track pid {track[0]} tid {track[1]}: '{name}' [{start}, {end}] straddles the end of "
                           f"'{open_ends[-1][1]}' ({open_ends[-1][0]})")
                break
            open_ends.append((end, name))
    return out


def main(paths):
    bad = 0
    for p in paths:
        found = problems(p)
        if found:
            bad += 1
            print(f"{p}: {len(found)} problem(s)")
            for line in found[:10]:
                print("  " + line)
        else:
            print(f"{p}: ok")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
