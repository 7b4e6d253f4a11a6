#!/usr/bin/env bash
# What each step costs: the same build's sagas of 2, 3 and 5 steps, counterbalanced, as
# BENCHMARKS.md ("2 vs 3 vs 5 steps") measures them.
#
#   scripts/bench-steps.sh DIR [ROUNDS]
#
# DIR holds release binaries of orchestrator, payment-svc, inventory-svc, loyalty-svc and
# loadgen (e.g. target/release). Every round runs concurrency 64 (`-c 64 -d 8`, DURATION to
# change it) in the order 2 3 5 5 3 2 steps, so no step count always runs first after a pause
# (on these machines the first run after one is systematically faster). With NAIVE=<naive-baseline
# binary> the yardstick runs once at the start of each round (printed, not parsed). Prints the
# median (min–max) of every figure per step count, the ratios of 3 and 5 steps to 2 (medians of
# the same run), and keeps the raw JSON lines in $OUT.
set -euo pipefail

if [ $# -lt 1 ]; then
    sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi
dir=$(cd "$1" && pwd)
rounds=${2:-3}
out=${OUT:-$(mktemp -d /tmp/bench-steps.XXXXXX)}
mkdir -p "$out"
for bin in orchestrator payment-svc inventory-svc loyalty-svc loadgen; do
    [ -x "$dir/$bin" ] || { echo "bench-steps: $dir/$bin is missing" >&2; exit 2; }
done

n=0
for round in $(seq 1 "$rounds"); do
    if [ -n "${NAIVE:-}" ]; then "$NAIVE" 20000 64 > "$out/naive-c64-$round.txt" 2>&1; fi
    for steps in 2 3 5 5 3 2; do
        n=$((n + 1))
        "$dir/loadgen" --concurrency 64 --duration "${DURATION:-8}" --steps "$steps" --no-store-size 2>&1 \
            | grep '^loadgen-json:' > "$out/steps$steps-$round-$n.json" \
            || { echo "bench-steps: loadgen failed ($steps steps)" >&2; exit 1; }
    done
    echo "bench-steps: round $round of $rounds done" >&2
done

python3 - "$out" "$dir" <<'EOF'
import glob, json, statistics, sys
out, d = sys.argv[1], sys.argv[2]
def load(path):
    text = open(path).read().strip()
    return json.loads(text.split("loadgen-json:", 1)[1]) if text else None
def cpu(name):
    return lambda r: next((p["cpu_us_per_saga"] for p in r["processes"] if p["name"] == name), 0.0)
def rss(name):
    return lambda r: next((p["rss_mb"] for p in r["processes"] if p["name"] == name), 0.0)
figures = [
    ("sagas/s", lambda r: r["saga"]["per_s"], "{:,.0f}"),
    ("p50 ms", lambda r: r["saga"]["p50_ms"], "{:.1f}"),
    ("p99 ms", lambda r: r["saga"]["p99_ms"], "{:.1f}"),
    ("orchestrator µs/saga", cpu("orchestrator"), "{:.0f}"),
    ("payment µs/saga", cpu("payment-svc"), "{:.0f}"),
    ("inventory µs/saga", cpu("inventory-svc"), "{:.0f}"),
    ("loyalty µs/saga", cpu("loyalty-svc"), "{:.0f}"),
    ("loadgen µs/saga", cpu("loadgen"), "{:.0f}"),
    ("orchestrator RSS MB", rss("orchestrator"), "{:.1f}"),
]
print(f"build: {d}")
medians = {}
for steps in (2, 3, 5):
    runs = [r for f in sorted(glob.glob(f"{out}/steps{steps}-*.json")) if (r := load(f))]
    if not runs:
        continue
    cells = []
    for name, get, fmt in figures:
        xs = [get(r) for r in runs]
        medians[(steps, name)] = statistics.median(xs)
        cells.append(f"{name} {fmt.format(statistics.median(xs))} ({fmt.format(min(xs))}–{fmt.format(max(xs))})")
    print(f"\n{steps} steps ({len(runs)} runs): " + "; ".join(cells))
for steps in (3, 5):
    if (steps, "sagas/s") not in medians:
        continue
    orch2, orch = medians[(2, "orchestrator µs/saga")], medians[(steps, "orchestrator µs/saga")]
    print(f"\n{steps} ÷ 2 steps: throughput {medians[(steps, 'sagas/s')] / medians[(2, 'sagas/s')]:.3f}; "
          f"orchestrator CPU of the steps past 2: {orch - orch2:+.0f} µs/saga = "
          f"{(orch - orch2) / orch2:.2f} of the two-step saga's ({(orch - orch2) / (steps - 2) / orch2:.2f} per step); "
          f"orchestrator RSS {medians[(steps, 'orchestrator RSS MB')] / medians[(2, 'orchestrator RSS MB')]:.2f}x")
for f in sorted(glob.glob(f"{out}/naive-c64-*.txt")):
    print("naive: " + " | ".join(l.strip() for l in open(f) if "saga" in l or "floor" in l))
print(f"\nraw runs: {out}")
EOF
