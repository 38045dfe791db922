#!/usr/bin/env bash
# The pool's own costs, measured on this machine:
#   1. no-op plugin calls per second at -j 2 (and 1, 4)
#   2. 100 hung calls, 200 ms timeout: deadline-to-result latency
#      (an attempt's recorded duration minus its timeout: the kill, the
#      reap and the record together), median, p99 and max
#   3. supervisor peak RSS through 100,000 no-op calls
# Usage: bench/pool.sh [BUILD_DIR]   (default: build; it must be built)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
TP="$B/toolpool"
[ -x "$TP" ] || { echo "build first: cmake -B $B && cmake --build $B -j2" >&2; exit 2; }
command -v /usr/bin/time >/dev/null || { echo "needs /usr/bin/time (Debian package time)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

N=100000
awk -v n=$N 'BEGIN { for (i = 0; i < n; i++) printf "{\"id\":\"n%d\",\"tool\":\"noop\"}\n", i }' > "$tmp/noop.jsonl"

echo "== no-op plugin calls ($N calls, durable results: not yet; results to a file)"
for j in 1 2 4; do
    /usr/bin/time -f "%e %M" -o "$tmp/time" "$TP" run -q -r "$B/examples/tools.json" -j $j \
        -o "$tmp/out.jsonl" "$tmp/noop.jsonl" || true
    read -r secs rss < "$tmp/time"
    lines=$(wc -l < "$tmp/out.jsonl")
    awk -v j=$j -v n=$lines -v s=$secs -v r=$rss \
        'BEGIN { printf "  -j %d: %d results in %.2fs = %.0f calls/s, supervisor peak RSS %.1f MiB\n", j, n, s, n / s, r / 1024 }'
done

echo "== 100 hung calls, timeout 200ms, attempts 1, -j 4"
cat > "$tmp/hang.json" <<JSON
{"tools": [{"name": "hang", "exec": ["/bin/sleep", "3600"], "timeout": "200ms", "attempts": 1}]}
JSON
awk 'BEGIN { for (i = 0; i < 100; i++) printf "{\"id\":\"h%d\",\"tool\":\"hang\"}\n", i }' > "$tmp/hang.jsonl"
"$TP" run -q -r "$tmp/hang.json" -j 4 -o "$tmp/hang.out" "$tmp/hang.jsonl" || true
grep -o '"outcome":"Timeout","duration_ms":[0-9.]*' "$tmp/hang.out" | sed 's/.*://' |
    awk '{ print ($1 - 200) * 1000 }' | sort -n |
    awk '{ v[NR] = $1 } END {
        p50 = v[int((NR + 1) / 2)]; i99 = int(NR * 0.99 + 0.5); if (i99 < 1) i99 = 1
        printf "  %d timeouts; deadline to result: median %.0f us, p99 %.0f us, max %.0f us\n", NR, p50, v[i99], v[NR] }'
