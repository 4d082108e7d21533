#!/usr/bin/env python3
"""Turn `cargo bench` (criterion) output on stdin into a Markdown table of
median times: one row per benchmark id."""
import re
import sys

text = sys.stdin.read()
rows = []
name = None
for line in text.splitlines():
    m = re.match(r'^(\S+/\S+)\s*(time:\s*\[(.*)\])?\s*$', line)
    if m and not line.startswith(('Benchmarking', 'Found', 'Warning', 'Gnuplot')):
        name = m.group(1)
        if m.group(2):
            rows.append((name, m.group(3)))
            name = None
        continue
    m = re.match(r'^\s+time:\s*\[(.*)\]', line)
    if m and name:
        rows.append((name, m.group(1)))
        name = None
print('| benchmark | median |')
print('| --- | ---: |')
for name, t in rows:
    parts = t.split()
    median = ' '.join(parts[2:4]) if len(parts) >= 6 else t
    print(f'| `{name}` | {median} |')
