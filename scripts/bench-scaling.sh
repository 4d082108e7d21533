#!/usr/bin/env bash
# How admission scales with cores (issue 21; docs/scaling.md): runs
# benches/scaling.rs in rounds (every case once per round, so the cases
# interleave), takes each case's median over the rounds and prints Markdown
# tables: requests per second at each thread count, the N / 1 ratio, and
# with work per request the share of the work-alone throughput. Also runs
# the workqueue latency cases (examples/workqueue_latency.rs) once a round:
# a deep queue (every call finds an item ready) and the parked hand-off
# (1,000 consumers, 1,000 items, one full-speed producer: most consumers
# are parked, so each add hands its item to one; src/workqueue/parking.rs).
# Timing never decides anything here: this is a report, not a test.
#
# From a checkout (needs cargo; valgrind adds the callgrind rows):
#   scripts/bench-scaling.sh                 build, run, print (1 to 16 threads, capped at the
#                                            cores; about 4-5 minutes on 16 cores, see below)
#   scripts/bench-scaling.sh --quick         the 2-core development machine: a smaller
#                                            latency case; a few minutes
#   scripts/bench-scaling.sh --bundle DIR    build only: DIR gets the two release binaries
#                                            and this script, to run on another machine
# From a bundle (bash, coreutils and awk only; x86-64 Linux, glibc at
# least as new as the build machine's):
#   DIR/bench-scaling.sh [--quick]
#
# Options: --rounds N (default 3); --budget SECONDS (start no round that
# would end past it, judged by the rounds so far; default 330 s, 0 = none).
# Environment: OUT (a folder for the full output: table.md, every round's
# log, cases.txt with every measurement; default target/bench-scaling in a
# checkout, a new temporary folder from a bundle), APF_SCALING_THREADS
# (e.g. 1,2,16: the thread counts, default 1 2 4 8 16 up to the cores).
#
# Wall time: each case is 0.1 s of warm-up and 0.4 s of measurement plus
# criterion's analysis, about 0.55 s; 16 cores have 130 cases (26 per
# thread count), so a round is about 75 s and the 1M-item latency case
# about 10 s more: three rounds in about 4.5 minutes. Two cores: 52 cases,
# about 30 s a round, 1.5-2 minutes in all (plus the build and callgrind).
#
# Uses only bash builtins, coreutils and awk once built (no grep or sed),
# so the bundle runs where no toolchain is installed.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
quick="" bundle="" rounds=3 budget=330
while [ $# -gt 0 ]; do
    case "$1" in
    --quick) quick=1 ;;
    --bundle) bundle="${2:?--bundle needs a folder}"; shift ;;
    --rounds) rounds="${2:?--rounds needs a number}"; shift ;;
    --budget) budget="${2:?--budget needs seconds}"; shift ;;
    -h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "bench-scaling: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done

if [ -f "$here/MANIFEST" ]; then
    # A bundle: the binaries lie beside this script.
    root="" bench="$here/bin/scaling" latency="$here/bin/workqueue_latency"
    [ -n "$bundle" ] && { echo "bench-scaling: --bundle needs a checkout" >&2; exit 2; }
    out="${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/bench-scaling.XXXXXX")}"
    if [ ! -x "$bench" ] || [ ! -x "$latency" ]; then
        # Copied without its modes: run executable copies.
        bin="$(mktemp -d "${TMPDIR:-/tmp}/bench-scaling-bin.XXXXXX")"
        cp "$bench" "$latency" "$bin/"
        chmod +x "$bin"/*
        bench="$bin/scaling" latency="$bin/workqueue_latency"
    fi
else
    root="$(cd "$here/.." && pwd)"
    cd "$root"
    export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-1}"
    out="${OUT:-$root/target/bench-scaling}"
    mkdir -p "$root/target"
    build="$root/target/bench-scaling-build"
    if ! cargo bench --bench scaling --no-run --message-format=json-render-diagnostics \
        >"$build.json" 2>"$build.log" ||
        ! cargo build --release --example workqueue_latency --example hotpath_profile \
            --example dispatcher_hotpath_profile 2>>"$build.log"; then
        tail -n 40 "$build.log" >&2
        echo "bench-scaling: the build failed (log: $build.log)" >&2
        exit 1
    fi
    # The bench binary's path, from cargo's JSON messages.
    bench="$(awk 'match($0, /"executable":"[^"]*"/) { s = substr($0, RSTART + 14, RLENGTH - 15) }
                  END { print s }' "$build.json")"
    latency="$root/target/release/examples/workqueue_latency"
    [ -x "$bench" ] || { echo "bench-scaling: the scaling bench did not build" >&2; exit 1; }
    if [ -n "$bundle" ]; then
        mkdir -p "$bundle/bin"
        for b in "$bench:scaling" "$latency:workqueue_latency"; do
            cp "${b%%:*}" "$bundle/bin/${b##*:}"
            # Debug information is for profilers; the bundle travels.
            strip --strip-debug "$bundle/bin/${b##*:}" 2>/dev/null || true
        done
        cp "$root/scripts/bench-scaling.sh" "$bundle/bench-scaling.sh"
        chmod +x "$bundle/bench-scaling.sh" "$bundle/bin/"*
        {
            echo "commit $(git rev-parse HEAD)$(git diff --quiet HEAD -- src benches examples Cargo.toml Cargo.lock || echo ' (modified)')"
            echo "branch $(git rev-parse --abbrev-ref HEAD)"
            echo "built $(date -u '+%Y-%m-%d %H:%M UTC') on $(uname -m), $(ldd --version | head -1)"
            echo "rustc $(rustc --version)"
            echo "needs glibc $(objdump -T "$bundle/bin/"* 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)"
        } >"$bundle/MANIFEST"
        cat >"$bundle/README" <<'EOT'
The scaling benchmark of libapf (benches/scaling.rs), prebuilt, and the
script that runs it and prints the tables (scripts/bench-scaling.sh).
Needs bash, coreutils and awk; x86-64 Linux with at least the glibc in
MANIFEST. Run:

    OUT=/some/folder ./bench-scaling.sh          # 1 to 16 threads, about 4.5 min on 16 cores
    OUT=/some/folder ./bench-scaling.sh --quick  # 2-core machines

The tables go to stdout and to $OUT/table.md; every measurement to
$OUT/cases.txt, every round's log beside it.
EOT
        echo "bench-scaling: bundle in $bundle:"
        ls -l "$bundle" "$bundle/bin"
        cat "$bundle/MANIFEST"
        exit 0
    fi
fi

if [ -n "$quick" ]; then
    crit=(--warm-up-time 0.1 --measurement-time 0.3)
    wq=(--items 100000 --consumers 100 --rounds 1000)
else
    crit=(--warm-up-time 0.1 --measurement-time 0.4)
    wq=(--items 1000000 --consumers 1000 --rounds 2000)
fi
handoff=(--items 1000 --consumers 1000 --rounds 100 --producer true)

mkdir -p "$out"
rm -f "$out"/round-*.txt "$out"/latency-*.txt "$out"/handoff-*.txt "$out/cases.txt" "$out/table.md"
crit_home="$(mktemp -d "${TMPDIR:-/tmp}/bench-scaling-criterion.XXXXXX")"
trap 'rm -rf "$crit_home"' EXIT

machine() {
    awk -F': *' '/^model name/ { m = $2; exit } END { printf "cpu %s, ", m }' /proc/cpuinfo
    echo "$(nproc) cores online"
    echo "date $(date -u '+%Y-%m-%d %H:%M UTC'); load before $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "kernel $(uname -r)"
    if [ -n "$root" ]; then
        echo "commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src benches examples || echo ' (modified)')"
    else
        awk '/^(commit|branch|built)/' "$here/MANIFEST"
    fi
    echo "mode $([ -n "$quick" ] && echo quick || echo full); criterion ${crit[*]}; latency ${wq[*]}"
}
machine >"$out/machine.txt"

# Every estimates.json of a round: one line per case, "round group case
# threads median_ns mean_ns" (criterion's median and mean of its samples'
# time per iteration).
collect() { # ROUND
    local f rel
    for f in "$crit_home/$1"/*/*/*/new/estimates.json; do
        [ -f "$f" ] || continue
        rel="${f#"$crit_home/$1/"}"
        rel="${rel%/new/estimates.json}"
        awk -v round="$1" -v id="$rel" '
            function point(key,   s) {
                s = substr($0, index($0, "\"" key "\":"))
                match(s, /"point_estimate":[-0-9.eE+]+/)
                return substr(s, RSTART + 17, RLENGTH - 17)
            }
            { split(id, p, "/"); print round, p[1], p[2], p[3], point("median"), point("mean") }' "$f"
    done >>"$out/cases.txt"
}

# The latency run's per-operation lines: "round op p50 p99 p99.9 max" and
# "round slow_dones N".
latency_lines() { # ROUND FILE
    awk -v round="$1" '
        /^workqueue: / { r = $(NF - 1); sub(/^\(/, "", r); print round, "rate", r }
        $2 == "p50" && $5 == "p99" { print round, $1, $3, $6, $9, $12 }
        /^  dones over/ { print round, "slow_dones", $5 }' "$2"
}

# The parked hand-off run's lines: "round handoff_add p50 p99 p99.9 max"
# (the producer's adds), "round handoff_done ..." and "round handoff_rate R".
handoff_lines() { # ROUND FILE
    awk -v round="$1" '
        $1 == "done" && $2 == "p50" { print round, "handoff_done", $3, $6, $9, $12 }
        $1 == "producer:" {
            for (i = 1; i <= NF; i++) {
                if ($i == "adds/s") { r = $(i - 1); sub(/^\(/, "", r) }
                if ($i == "p50") a = $(i + 1); if ($i == "p99") b = $(i + 1)
                if ($i == "p99.9") c = $(i + 1); if ($i == "max") d = $(i + 1)
            }
            print round, "handoff_add", a, b, c, d; print round, "handoff_rate", r
        }' "$2"
}

table() {
    awk -v machine="$out/machine.txt" -v lat="$out/latency.tsv" '
    function median(key,   n, i, j, v, t) {
        n = cnt[key]
        if (n == 0) return ""
        for (i = 1; i <= n; i++) v[i] = val[key, i]
        for (i = 2; i <= n; i++) for (j = i; j > 1 && v[j - 1] > v[j]; j--) { t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
        return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
    }
    function rate(r) {
        if (r == "") return "–"
        if (r >= 1e6) return sprintf("%.2f M/s", r / 1e6)
        return sprintf("%.0f k/s", r / 1e3)
    }
    function dur(ns) {
        if (ns >= 1e6) return sprintf("%.2f ms", ns / 1e6)
        if (ns >= 1e4) return sprintf("%.1f µs", ns / 1e3)
        if (ns >= 1e3) return sprintf("%.2f µs", ns / 1e3)
        return sprintf("%.0f ns", ns)
    }
    # Requests per second of a case at t threads: t requests per iteration.
    function rps(g, c, t,   m) {
        m = median(g SUBSEP c SUBSEP t)
        return m == "" || m <= 0 ? "" : t * 1e9 / m
    }
    function row(label, g, c,   i, t, r, line, first, last) {
        if (!((g, c) in seen)) return
        line = "| " label
        for (i = 1; i <= nt; i++) {
            t = ts[i]; r = rps(g, c, t)
            line = line " | " (r == "" ? "–" : rate(r) " · " dur(median(g SUBSEP c SUBSEP t)))
        }
        first = rps(g, c, ts[1]); last = rps(g, c, ts[nt])
        line = line " | " (first == "" || last == "" || nt < 2 ? "–" : sprintf("%.2f×", last / first)) " |"
        print line
    }
    function header(title,   i, line, sep) {
        print ""; print title; print ""
        line = "| case"; sep = "| ---"
        for (i = 1; i <= nt; i++) { line = line " | " ts[i] (ts[i] == 1 ? " thread" : " threads"); sep = sep " | ---:" }
        print line " | " ts[nt] " / " ts[1] " |"; print sep " | ---: |"
    }
    function work(label, g,   i, t, alone, line, c, r, k) {
        if (!((g, "work_alone") in seen)) return
        for (i = 1; i <= nt; i++) {
            t = ts[i]; alone = rps(g, "work_alone", t)
            line = "| " label " | " t " | " rate(alone)
            for (k = 1; k <= 4; k++) {
                c = wc[k]; r = rps(g, c, t)
                line = line " | " (r == "" ? "–" : rate(r) (alone == "" ? "" : sprintf(" (%.0f%%)", 100 * r / alone)))
            }
            print line " |"
        }
    }
    FILENAME != lat {
        key = $2 SUBSEP $3 SUBSEP $4
        val[key, ++cnt[key]] = $5; seen[$2, $3] = 1; rounds[$1] = 1
        if (!($4 in tseen)) { tseen[$4] = 1; ts[++nt] = $4 + 0 }
        next
    }
    function oprow(op, label,   line, k, lk, n, m, a, b, x) {
        if (!(op in lops)) return
        line = "| " label
        for (k = 3; k <= 6; k++) { lk = op SUBSEP k; delete tmp; n = lc[lk]
            for (m = 1; m <= n; m++) tmp[m] = lv[lk, m]
            for (a = 2; a <= n; a++) for (b = a; b > 1 && tmp[b - 1] > tmp[b]; b--) { x = tmp[b]; tmp[b] = tmp[b - 1]; tmp[b - 1] = x }
            line = line " | " dur(n % 2 ? tmp[(n + 1) / 2] : (tmp[n / 2] + tmp[n / 2 + 1]) / 2) }
        print line " |"
    }
    { if ($2 == "slow_dones") slow[++ns] = $3; else if ($2 == "rate") lrate[++nl] = $3; else if ($2 == "handoff_rate") hrate[++nh] = $3; else for (k = 3; k <= 6; k++) { lk = $2 SUBSEP k; lv[lk, ++lc[lk]] = $k; if (!($2 in lops)) nops++; lops[$2] = 1 } }
    END {
        for (i = 2; i <= nt; i++) for (j = i; j > 1 && ts[j - 1] > ts[j]; j--) { t = ts[j]; ts[j] = ts[j - 1]; ts[j - 1] = t }
        nr = 0; for (r in rounds) nr++
        while ((getline l < machine) > 0) print l "  "
        print "medians of " nr " round(s); each cell: requests/s over all threads · time per request per thread"
        header("Start+finish in a tight loop, seats to spare (group `tight`)")
        row("one level, Kubernetes policy", "tight", "kubernetes")
        row("one level, `flow` policy", "tight", "flow")
        row("one level, `flow-maxmin` policy", "tight", "flow_maxmin")
        row("a level per thread (nothing shared)", "tight", "level_per_thread")
        row("one shared atomic counter (CAS take, fetch_sub give back)", "tight", "shared_atomic")
        row("one mutex around a counter", "tight", "mutex_counter")
        header("Dispatcher classify+start+finish, built-in config, 16 users in one level (group `dispatcher`)")
        row("dispatcher", "dispatcher", "dispatcher")
        row("shared atomic counter, same group", "dispatcher", "shared_atomic")
        row("mutex counter, same group", "dispatcher", "mutex_counter")
        header("Saturated level: seats = threads, 8 requests outstanding per thread, each finish dispatches a waiter (group `saturated`)")
        row("one level, per request", "saturated", "one_level")
        row("shared atomic counter, same group", "saturated", "shared_atomic")
        row("mutex counter, same group", "saturated", "mutex_counter")
        header("Workqueue get+done+add, 1,024 items (group `workqueue`)")
        row("workqueue", "workqueue", "workqueue")
        row("plain client-go design (one mutex, one condvar)", "workqueue", "plain_client_go")
        row("shared atomic counter, same group", "workqueue", "shared_atomic")
        row("mutex counter, same group", "workqueue", "mutex_counter")
        wc[1] = "one_level"; wc[2] = "dispatcher"; wc[3] = "shared_atomic"; wc[4] = "mutex_counter"
        print ""; print "Work per request: each thread holds its seat while it spins (groups `work_1us`, `work_5us`); share of the work alone at the same thread count"; print ""
        print "| work per request | threads | the work alone | one level | dispatcher | shared atomic | mutex counter |"
        print "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
        work("1 µs", "work_1us"); work("5 µs", "work_5us")
        if (nops > 0) {
            print ""; print "Workqueue latency (examples/workqueue_latency.rs, workqueue side), medians of the rounds"; print ""
            print "| call | p50 | p99 | p99.9 | max |"; print "| --- | ---: | ---: | ---: | ---: |"
            oprow("add", "add"); oprow("get", "get"); oprow("done", "done")
            s = ""; for (i = 1; i <= ns; i++) s = s (i > 1 ? ", " : "") slow[i]
            print ""; print "dones over 1 ms, each round: " s
            s = ""; for (i = 1; i <= nl; i++) s = s (i > 1 ? ", " : "") rate(lrate[i])
            print ""; print "get+done+add over all consumers, each round: " s
        }
        if ("handoff_add" in lops) {
            print ""; print "Workqueue parked hand-off (1,000 consumers, 1,000 items, one full-speed producer; most consumers are parked, so an add hands its item to one), medians of the rounds"; print ""
            print "| call | p50 | p99 | p99.9 | max |"; print "| --- | ---: | ---: | ---: | ---: |"
            oprow("handoff_add", "add (the producer)"); oprow("handoff_done", "done (a consumer)")
            s = ""; for (i = 1; i <= nh; i++) s = s (i > 1 ? ", " : "") rate(hrate[i])
            print ""; print "adds/s by the producer, each round: " s
        }
    }' "$out/cases.txt" "$out/latency.tsv"
}

# The rounds: every case once per round, then the latency case.
: >"$out/latency.tsv"
started=$SECONDS
for round in $(seq "$rounds"); do
    if [ "$round" -gt 1 ] && [ "$budget" -gt 0 ]; then
        per=$(((SECONDS - started) / (round - 1)))
        if [ $((SECONDS - started + per)) -gt "$budget" ]; then
            echo "bench-scaling: stopping after $((round - 1)) round(s): another would pass the ${budget} s budget" >&2
            break
        fi
    fi
    echo "bench-scaling: round $round of $rounds ($((SECONDS - started)) s so far)" >&2
    CRITERION_HOME="$crit_home/$round" "$bench" --bench "${crit[@]}" --noplot \
        >"$out/round-$round.txt" 2>&1 || {
        echo "bench-scaling: round $round failed, see $out/round-$round.txt; the table holds the rounds before" >&2
        echo "round $round failed" >>"$out/machine.txt"
        break
    }
    collect "$round"
    "$latency" "${wq[@]}" --only workqueue >"$out/latency-$round.txt" 2>&1 ||
        echo "bench-scaling: the latency run failed, see $out/latency-$round.txt" >&2
    latency_lines "$round" "$out/latency-$round.txt" >>"$out/latency.tsv"
    "$latency" "${handoff[@]}" --only workqueue >"$out/handoff-$round.txt" 2>&1 ||
        echo "bench-scaling: the hand-off run failed, see $out/handoff-$round.txt" >&2
    handoff_lines "$round" "$out/handoff-$round.txt" >>"$out/latency.tsv"
    table >"$out/table.md"
done
echo "wall $((SECONDS - started)) s for the rounds; load after $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/machine.txt"

# The callgrind rows, from a checkout with valgrind (scripts/lib/instructions.sh).
if [ -n "$root" ] && command -v valgrind >/dev/null; then
    calls=(100000 200000)
    . "$root/scripts/lib/instructions.sh"
    instructions hotpath-kubernetes target/release/examples/hotpath_profile kubernetes
    instructions classify target/release/examples/dispatcher_hotpath_profile
    {
        echo
        echo "Uncontended, callgrind (instructions per call, repeatable): start+finish $(per_call hotpath-kubernetes); classify+start+finish $(per_call classify)"
    } >"$out/callgrind.md"
fi

table >"$out/table.md"
[ -f "$out/callgrind.md" ] && cat "$out/callgrind.md" >>"$out/table.md"
cat "$out/table.md"
echo >&2
echo "bench-scaling: full output in $out" >&2
