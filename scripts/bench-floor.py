#!/usr/bin/env python3
"""Issue 14's table from the raw outputs scripts/bench-floor.sh leaves in
OUTDIR: one row per goal, each figure beside its baseline, and whether the
goal is met. Usage: scripts/bench-floor.py OUTDIR"""
import glob
import json
import os
import re
import sys

out = sys.argv[1]


def read(name):
    path = os.path.join(out, name)
    return open(path).read() if os.path.exists(path) else ''


def instructions(name):
    """Instructions per iteration: the difference of the two run lengths."""
    runs = [line.split() for line in read(name + '.instructions').splitlines()]
    runs = [(int(n), int(total)) for n, total in runs if total.isdigit()]
    if len(runs) != 2:
        return None
    (n1, t1), (n2, t2) = runs
    return (t2 - t1) / (n2 - n1)


def criterion(group, function):
    """Median of one criterion benchmark, in ns (criterion writes group and
    function names with '/' replaced by '_' into its directory names)."""
    for f in (function, function.replace('/', '_')):
        path = os.path.join(out, 'criterion', group.replace('/', '_'), f, 'new', 'estimates.json')
        if os.path.exists(path):
            return json.load(open(path))['median']['point_estimate']
    return None


def latency(side):
    """Per-run (op -> (p99, p99.9) ns) and producer adds/s for one side."""
    runs = []
    for path in sorted(glob.glob(os.path.join(out, f'latency-{side}-*.txt'))):
        text = open(path).read()
        ops = {m[0]: (int(m[1]), int(m[2])) for m in re.findall(
            r'^\s+(\w+)\s+p50\s+\d+ ns\s+p99\s+(\d+) ns\s+p99\.9\s+(\d+) ns', text, re.M)}
        m = re.search(r'producer: \d+ adds in \S+ \((\d+) adds/s.*?add p50 \d+ ns\s+p99 (\d+) ns\s+p99\.9 (\d+) ns',
                      text)
        if m:
            ops['add'] = (int(m[2]), int(m[3]))
            ops['rate'] = int(m[1])
        runs.append(ops)
    return runs


def ns(v):
    if v is None:
        return 'not measured'
    return f'{v / 1000:.2f} µs' if v >= 10_000 else f'{v:.0f} ns'


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def verdict(value, goal, better_low=True):
    if value is None:
        return 'not measured'
    met = value <= goal if better_low else value >= goal
    if met:
        return 'met'
    by = value / goal if better_low else goal / value
    return f'missed by {by:.2f}×'


rows = []
hp = {p: instructions(f'hotpath-{p}') for p in ('kubernetes', 'flow', 'flow-maxmin')}
a = criterion('a_uncontended_start_finish', 'queueset')
a_base = criterion('a_uncontended_start_finish', 'mutex_reference')
rows.append(('uncontended start+finish, instructions (callgrind)', '≤ 250',
             ' / '.join(f'{p} {v:.0f}' if v else f'{p} ?' for p, v in hp.items()), '–',
             verdict(hp['kubernetes'], 250)))
rows.append(('uncontended start+finish, time', '≤ 50 ns', ns(a), f'mutex reference {ns(a_base)}',
             verdict(a, 50)))
b = criterion('b_two_threads_one_level', 'queueset')
b_base = criterion('b_two_threads_one_level', 'mutex_reference')
ba = ratio(b, a)
rows.append(('2 threads on one level, per request ÷ uncontended', '≤ 1.2×',
             f'{ns(b)} ({ba:.2f}×)' if ba else ns(b), f'mutex reference {ns(b_base)}', verdict(ba, 1.2)))
af = criterion('a_uncontended_start_finish', 'queueset_flow')
bf = criterion('b_two_threads_one_level', 'queueset_flow')
bfa = ratio(bf, af)
rows.append(('the same under the `flow` policy (no deal counter; diagnostic)', '(≤ 1.2×)',
             f'{ns(af)} → {ns(bf)} ({bfa:.2f}×)' if bfa else 'not measured', '–', verdict(bfa, 1.2)))
e2e = criterion('e2e_classify_start_finish_uncontended', 'dispatcher')
e2e_base = criterion('e2e_classify_start_finish_uncontended', 'mutex_plain')
ci = instructions('classify')
rows.append(('classify + start + finish, built-in config', '≤ 150 ns',
             f'{ns(e2e)}' + (f', {ci:.0f} instructions' if ci else ''), f'interpreter + mutex {ns(e2e_base)}',
             verdict(e2e, 150)))
go = re.search(r'^Uncontended\s+(\d+)\s+(\d+)\s+([\d.]+)x', read('go-compare.txt'), re.M)
go_ratio = float(go[3]) if go else None
rows.append(('Go through cgo vs Kubernetes\' queueset, uncontended', '≥ 25×',
             f'{go[1]} ns ({go_ratio:.1f}×)' if go else 'not measured',
             f'Kubernetes {go[2]} ns' if go else '–', verdict(go_ratio, 25, better_low=False)))
f16 = criterion('f_dispatch_by_queues', 'queueset/16')
f16k = criterion('f_dispatch_by_queues', 'queueset/16384')
w16 = f16  # 16 queues already have max(2 × 16, 256) = 256 waiting
w16k = criterion('f_dispatch_by_queues', 'queueset_256_waiting/16384')
fr = ratio(f16k, f16)
wr = ratio(w16k, w16)
rows.append(('dispatch, 16 → 16,384 queues (2 × queues waiting)', '≤ 1.5×',
             f'{ns(f16)} → {ns(f16k)} ({fr:.2f}×)' if fr else 'not measured',
             f'mutex reference {ns(criterion("f_dispatch_by_queues", "mutex_reference/16"))} → '
             f'{ns(criterion("f_dispatch_by_queues", "mutex_reference/16384"))}', verdict(fr, 1.5)))
rows.append(('dispatch, 16 → 16,384 queues (256 waiting at both)', '(diagnostic)',
             f'{ns(w16)} → {ns(w16k)} ({wr:.2f}×)' if wr else 'not measured', '–', verdict(wr, 1.5)))
lib, plain = latency('workqueue'), latency('plain')
for op in ('get', 'done', 'add'):
    p99 = [r[op][0] for r in lib if op in r]
    p999 = [r[op][1] for r in lib if op in r]
    base = [f'{r[op][0] / 1000:.1f}/{r[op][1] / 1000:.1f} µs' for r in plain if op in r]
    if not p99:
        continue
    worst99, worst999 = max(p99), max(p999)
    met = worst99 <= 1000 and worst999 <= 50_000
    rows.append((f'workqueue 1M / 1,000 consumers / producer: {op} p99 / p99.9', '≤ 1 / 50 µs',
                 ', '.join(f'{x / 1000:.2f}/{y / 1000:.1f} µs' for x, y in zip(p99, p999)),
                 'plain client-go design ' + ', '.join(base),
                 'met' if met else f'missed by {max(worst99 / 1000, worst999 / 50_000):.2f}×'))
rates = [r['rate'] for r in lib if 'rate' in r]
if rates:
    rows.append(('workqueue: producer\'s adds/s while the backlog drains', '≥ 100,000/s',
                 ', '.join(f'{x:,}' for x in rates),
                 'plain ' + ', '.join(f'{r["rate"]:,}' for r in plain if 'rate' in r),
                 verdict(min(rates), 100_000, better_low=False)))
for pc, goal in (('1p1c', None), ('2p2c', 200)):
    wq = criterion(f'fifo/{pc}', 'workqueue')
    deque = criterion(f'fifo/{pc}', 'mutex_vecdeque_condvar')
    rows.append((f'workqueue {pc[0]} producer(s) / {pc[2]} consumer(s), per item',
                 '≤ the bare deque' if goal is None else f'≤ {goal} ns', ns(wq),
                 f'Mutex<VecDeque>+Condvar {ns(deque)}',
                 verdict(wq, deque if goal is None else goal)))

print(read('machine.txt').strip().replace('\n', '; '))
print()
print('| row (issue 14) | goal | libapf | baseline, same run | result |')
print('| --- | --- | --- | --- | --- |')
for row in rows:
    print('| ' + ' | '.join(row) + ' |')
