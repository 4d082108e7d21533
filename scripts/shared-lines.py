#!/usr/bin/env python3
"""The cache lines one thread's request takes from the other thread's cache,
and the atomic read-modify-writes it executes, counted from a valgrind lackey
trace (`--trace-mem=yes`) of examples/shared_lines_trace, whose two threads
take turns, one request each, every request between two stores to its
thread's marker. Load-independent: it counts accesses, it times nothing.

A line is "taken" when a request reads a line the other thread wrote last
(and this one has not read since), or writes a line the other thread holds:
a MESI model with unbounded caches, so it counts sharing only, never a
capacity miss. Lines are 64 bytes (LINE_BITS=7: pairs of lines, as the
adjacent-line prefetcher moves them).

Usage: scripts/shared-lines.py TRACE BINARY MARK0,MARK1 LOAD_BIAS
(scripts/shared-lines.sh runs it)."""
import collections
import os
import re
import subprocess
import sys

trace, binary, marks, bias = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4], 16)
line_bits = int(os.environ.get("LINE_BITS", "6"))
mark = [int(x, 16) for x in marks.split(",")]
tool_line = mark[0] >> 6  # the markers' and the turn's line: the harness's own

active = [False, False]
owner = None
requests = 0
holders = {}  # line -> threads whose cache holds it
dirty = {}  # line -> the thread that wrote it last, while no other read it
taken_at = collections.Counter()  # instruction -> lines taken there
taken = set()  # lines taken in this request
lines_per_request = 0
executed = collections.Counter()  # instruction -> executions in requests
ip = 0


def end_request():
    global lines_per_request, taken
    lines_per_request += len(taken)
    taken = set()


for raw in open(trace):
    if raw.startswith("=="):
        continue
    kind = raw[:2].strip()
    if not kind:
        continue
    addr = int(raw[2:].strip().split(",")[0], 16)
    if kind == "I":
        ip = addr
        if owner is not None:
            executed[addr] += 1
        continue
    if kind == "S" and addr in mark:
        t = mark.index(addr)
        active[t] = not active[t]
        if active[t]:
            owner = t
            requests += 1
        else:
            owner = None
            end_request()
        continue
    if owner is None or addr >> 6 == tool_line:
        continue
    line = addr >> line_bits
    other = 1 - owner
    held = holders.setdefault(line, set())
    miss = False
    if kind in ("L", "M") and dirty.get(line) == other:
        miss = True
        dirty[line] = None
        held.add(owner)
    if kind in ("S", "M"):
        miss = miss or other in held
        holders[line] = {owner}
        dirty[line] = owner
    else:
        held.add(owner)
    if miss and line not in taken:
        taken.add(line)
        taken_at[ip] += 1

n = max(requests, 1)


def where(ip):
    out = subprocess.run(
        ["addr2line", "-f", "-C", "-i", "-e", binary, hex(ip - bias)],
        capture_output=True,
        text=True,
    ).stdout.strip().split("\n")
    frames = [
        f"{out[k]} ({out[k + 1].split('/')[-1]})" for k in range(0, len(out) - 1, 2)
    ]
    return " <- ".join(frames[:3])


locked = {}
dis = subprocess.run(
    ["objdump", "-d", "--no-show-raw-insn", binary], capture_output=True, text=True
).stdout
for text in dis.split("\n"):
    m = re.match(r"\s*([0-9a-f]+):\s+(.*)", text)
    if m and (m.group(2).startswith("lock ") or (m.group(2).startswith("xchg") and "(" in m.group(2))):
        locked[int(m.group(1), 16) + bias] = m.group(2).split()[1] if m.group(2).startswith("lock ") else "xchg"
rmws = {ip: c for ip, c in executed.items() if ip in locked}

print(f"requests traced: {requests}")
print(f"lines taken from the other thread per request: {lines_per_request / n:.2f}")
for ip, c in sorted(taken_at.items(), key=lambda kv: -kv[1]):
    print(f"  {c / n:5.2f}  {where(ip)}")
print(f"atomic read-modify-writes per request: {sum(rmws.values()) / n:.2f}")
for ip, c in sorted(rmws.items(), key=lambda kv: -kv[1]):
    print(f"  {c / n:5.2f}  {locked[ip]:8s} {where(ip)}")
