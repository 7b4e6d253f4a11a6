#!/usr/bin/env bash
# Where the CPU goes and how long threads wait for it, per kind of thread, during a loadgen run.
#
#   scripts/sched-share.sh [BIN_DIR] [-- LOADGEN ARGS...]
#
# Starts BIN_DIR/loadgen (default target/release; default args `-c 64 -d 8 --no-floor
# --no-store-size`), and 4 s into it reads /proc/<pid>/task/*/schedstat of the orchestrator,
# payment-svc, inventory-svc and loadgen twice, 3 s apart. Prints, per process and thread name:
# CPU (share of one core), run-queue wait (time runnable but not running, share of one core),
# time slices per second, wait and CPU per slice, and CPU µs per saga (from loadgen's own
# sagas/s). On a saturated machine the run-queue wait is the latency every hop adds. Stops
# loadgen (and with it the stack it spawned) on exit, also on failure.
set -euo pipefail

bin=target/release
if [ $# -gt 0 ] && [ "$1" != "--" ]; then bin=$1; shift; fi
[ "${1:-}" = "--" ] && shift
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(-c 64 -d 8 --no-floor --no-store-size)
out=$(mktemp -d /tmp/sched-share.XXXXXX)

"$bin/loadgen" "${args[@]}" > "$out/loadgen.txt" 2>&1 &
lg=$!
trap 'kill "$lg" 2>/dev/null || true; wait "$lg" 2>/dev/null || true' EXIT

snapshot() {
    local svc pid t
    for svc in orchestrator payment-svc inventory-svc loadgen; do
        pid=$(pgrep -f "$bin/$svc" | head -1) || continue
        for t in /proc/"$pid"/task/*; do
            echo "$svc $(tr ' ' _ < "$t/comm") ${t##*/} $(cat "$t/schedstat" 2>/dev/null || echo 0 0 0)"
        done
    done
}

sleep 4
snapshot > "$out/before"
sleep 3
snapshot > "$out/after"
wait "$lg"
trap - EXIT
per_s=$(grep -E '^saga \(' "$out/loadgen.txt" | awk '{print $(NF-6)}' | head -1)
python3 - "$out/before" "$out/after" "${per_s:-0}" <<'EOF'
import collections, sys
before = {}
for line in open(sys.argv[1]):
    f = line.split()
    before[tuple(f[:3])] = list(map(int, f[3:6]))
sums = collections.defaultdict(lambda: [0, 0, 0])
for line in open(sys.argv[2]):
    f = line.split()
    key = tuple(f[:3])
    if key not in before:
        continue
    for i, (now, then) in enumerate(zip(map(int, f[3:6]), before[key])):
        sums[key[:2]][i] += now - then
per_s = float(sys.argv[3])
print(f"sagas/s (loadgen, whole run): {per_s:,.0f}")
print(f"{'process':14} {'thread':18} {'cpu':>6} {'runq wait':>9} {'slices/s':>9} {'wait/slice':>11} {'cpu/slice':>10} {'cpu/saga':>9}")
total_cpu = total_wait = 0
for (proc, thread), (cpu, wait, slices) in sorted(sums.items()):
    if slices == 0:
        continue
    total_cpu += cpu
    total_wait += wait
    per_saga = f"{cpu / 3e3 / per_s:7.0f}µs" if per_s else "n/a"
    print(f"{proc:14} {thread:18} {cpu / 3e9:6.1%} {wait / 3e9:9.1%} {slices / 3:9.0f} "
          f"{wait / slices / 1e3:9.0f}µs {cpu / slices / 1e3:8.0f}µs {per_saga:>9}")
print(f"all threads: cpu {total_cpu / 3e9:.2f} cores, run-queue wait {total_wait / 3e9:.2f} "
      f"threads on average" + (f", {total_cpu / 3e3 / per_s:.0f} µs CPU per saga" if per_s else ""))
EOF
rm -rf "$out"
