# Instructions per call of a profiling example, from callgrind: the
# difference of two run lengths, so set-up and tear-down cancel out.
# Sourced by scripts/bench-floor.sh and scripts/bench-scaling.sh.
#
#   out=DIR calls=(100000 200000)
#   instructions NAME BINARY ARGS...   # runs BINARY N ARGS... under callgrind for each N
#                                      # in calls; writes DIR/NAME.instructions ("N total" lines)
#   per_call NAME                      # prints (total2 - total1) / (N2 - N1), or nothing

instructions() { # NAME BINARY ARGS...
    local name="$1" bin="$2"
    shift 2
    for n in "${calls[@]}"; do
        valgrind --tool=callgrind --callgrind-out-file="$out/$name.$n.callgrind" \
            "$bin" "$n" "$@" 2>"$out/$name.$n.log" >/dev/null
        echo "$n $(grep -o 'Collected : [0-9]*' "$out/$name.$n.log" | grep -o '[0-9]*$')"
    done >"$out/$name.instructions"
}

per_call() { # NAME
    awk 'NF == 2 && $2 ~ /^[0-9]+$/ { n[++k] = $1; t[k] = $2 }
         END { if (k == 2 && n[2] != n[1]) printf "%.0f\n", (t[2] - t[1]) / (n[2] - n[1]) }' \
        "$out/$1.instructions"
}
