#!/usr/bin/env bash
# Counterbalanced A/B of two builds of the stack, as BENCHMARKS.md measures them.
#
#   scripts/bench-ab.sh DIR_A DIR_B [ROUNDS]
#
# Each DIR holds release binaries of orchestrator, payment-svc, inventory-svc and loadgen
# (loadgen starts the three services it finds beside itself), e.g. copies of target/release
# from two commits. Every round runs concurrency 64 (`-c 64 -d 8`; DURATION=30 for tail work:
# 8 s runs understate the steady-state p99) in the order A B B A and
# then the idle single saga (`--single -n 2000`) in the order B A A B: on these machines the
# first run after a pause is systematically faster, so a fixed A B order biases the result
# by as much as the changes being measured. STEPS=N runs sagas of N steps (loadgen --steps; both
# DIRs then need loyalty-svc too). With NAIVE=<naive-baseline binary> the yardstick
# runs once per round before each phase (its figures are printed, not parsed). Prints the
# median (min–max) of every figure per build and keeps the raw JSON lines in $OUT.
set -euo pipefail

if [ $# -lt 2 ]; then
    sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi
a=$(cd "$1" && pwd)
b=$(cd "$2" && pwd)
rounds=${3:-3}
out=${OUT:-$(mktemp -d /tmp/bench-ab.XXXXXX)}
mkdir -p "$out"
for dir in "$a" "$b"; do
    for bin in orchestrator payment-svc inventory-svc loadgen; do
        [ -x "$dir/$bin" ] || { echo "bench-ab: $dir/$bin is missing" >&2; exit 2; }
    done
done

run() { # name dir mode round seq
    local args
    if [ "$3" = c64 ]; then args=(--concurrency 64 --duration "${DURATION:-8}"); else args=(--single -n 2000); fi
    if [ -n "${STEPS:-}" ]; then args+=(--steps "$STEPS"); fi
    "$2/loadgen" "${args[@]}" --no-store-size 2>&1 | grep '^loadgen-json:' \
        > "$out/$1-$3-$4-$5.json" || { echo "bench-ab: loadgen failed ($1 $3)" >&2; exit 1; }
}

n=0
for round in $(seq 1 "$rounds"); do
    if [ -n "${NAIVE:-}" ]; then "$NAIVE" 20000 64 > "$out/naive-c64-$round.txt" 2>&1; fi
    for v in a b b a; do
        n=$((n + 1)); if [ $v = a ]; then run A "$a" c64 "$round" $n; else run B "$b" c64 "$round" $n; fi
    done
    if [ -n "${NAIVE:-}" ]; then "$NAIVE" 2000 1 > "$out/naive-c1-$round.txt" 2>&1; fi
    for v in b a a b; do
        n=$((n + 1)); if [ $v = a ]; then run A "$a" c1 "$round" $n; else run B "$b" c1 "$round" $n; fi
    done
    echo "bench-ab: round $round of $rounds done" >&2
done

python3 - "$out" "$a" "$b" <<'EOF'
import glob, json, os, statistics, sys
out, dirs = sys.argv[1], {"A": sys.argv[2], "B": sys.argv[3]}
def load(path):
    text = open(path).read().strip()
    return json.loads(text.split("loadgen-json:", 1)[1]) if text else None
def cpu(name):
    return lambda r: next(p["cpu_us_per_saga"] for p in r["processes"] if p["name"] == name)
figures = [
    ("sagas/s", lambda r: r["saga"]["per_s"], "{:,.0f}"),
    ("p50 ms", lambda r: r["saga"]["p50_ms"], "{:.3f}"),
    ("p99 ms", lambda r: r["saga"]["p99_ms"], "{:.1f}"),
    ("saga/floor", lambda r: r["ratio"] or 0.0, "{:.3f}"),
    ("orchestrator µs/saga", cpu("orchestrator"), "{:.0f}"),
    ("payment µs/saga", cpu("payment-svc"), "{:.0f}"),
    ("inventory µs/saga", cpu("inventory-svc"), "{:.0f}"),
]
for build, path in dirs.items():
    print(f"{build} = {path}")
for mode, label in (("c64", "concurrency 64"), ("c1", "idle single saga")):
    print(f"\n{label} (median of the runs, min–max)")
    for build in dirs:
        runs = [r for f in sorted(glob.glob(f"{out}/{build}-{mode}-*.json")) if (r := load(f))]
        if not runs:
            continue
        cells = []
        for name, get, fmt in figures:
            xs = [get(r) for r in runs]
            cells.append(f"{name} {fmt.format(statistics.median(xs))} ({fmt.format(min(xs))}–{fmt.format(max(xs))})")
        print(f"  {build} ({len(runs)} runs): " + "; ".join(cells))
    for f in sorted(glob.glob(f"{out}/naive-{mode}-*.txt")):
        print("  naive: " + " | ".join(l.strip() for l in open(f) if "saga" in l or "floor" in l))
print(f"\nraw runs: {out}")
EOF
