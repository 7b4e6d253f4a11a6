#!/usr/bin/env bash
# Tests the packages and examples in other languages (packages/, examples/):
#   - packages/saga-participant: @saga/participant, the TypeScript participant
#     library, built, packed (npm pack) and tested against SecantusDB;
#   - media-upload: a step on that package whose effect is an HTTP upload
#     (a fake media store its tests start), tested against SecantusDB;
#   - nestjs-shipping: a shipping step in NestJS on that package's Nest module
#     (its rules and wiring only; batches served by the package), tested
#     against SecantusDB (started here, in memory, with test commands for its
#     failpoint tests);
#   - node-client: a plain Node client of saga.v1, tested against the dev stack
#     (built and started here on free ports with a temporary data dir).
# Needs Node.js >= 20 with npm; installs each example's pinned dependencies
# with `npm ci` and builds it. Every process it starts is stopped on exit, by
# pid, also on failure. Closes with one line: `examples: N passed, M failed`.
#
#   scripts/test-examples.sh               # install, build, test
#   scripts/test-examples.sh --build-only  # install and build (the Rust tests start the NestJS app)
#   scripts/test-examples.sh --built       # test what an earlier --build-only built
set -euo pipefail
mode=all
case "${1:-}" in
    --build-only) mode=build ;;
    --built) mode=test ;;
    "") ;;
    *) echo "test-examples: unknown option $1 (--build-only, --built)"; exit 2 ;;
esac
cd "$(dirname "$0")/.."
root=$(pwd)

work=$(mktemp -d "${TMPDIR:-/tmp}/test-examples.XXXXXX")
pids=()
passed=0
failed=0
stage="start"

stop_all() {
    local pid i
    for pid in "${pids[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in "${pids[@]}"; do
        for i in $(seq 1 100); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        if kill -0 "$pid" 2>/dev/null; then
            echo "test-examples: pid $pid did not stop on SIGTERM within 10 s; killing it"
            kill -KILL "$pid" 2>/dev/null || true
        fi
        wait "$pid" 2>/dev/null || true
    done
    pids=()
}

finish() {
    local status=$?
    stop_all
    if [ "$status" -ne 0 ]; then
        echo "test-examples: FAILED at stage: $stage (exit $status)"
        failed=$((failed + 1))
    fi
    if [ "$failed" -ne 0 ]; then
        for log in "$work"/*.log; do
            [ -s "$log" ] || continue
            echo "---- $log (last 40 lines)"
            tail -n 40 "$log"
        done
    fi
    rm -rf "$work"
    if [ "$mode" != build ] || [ "$status" -ne 0 ]; then
        echo "examples: $passed passed, $failed failed"
    fi
    if [ "$status" -eq 0 ] && [ "$failed" -ne 0 ]; then
        exit 1
    fi
}
trap finish EXIT

# Waits for a `READY <port>` line (SecantusDB) in $1 from pid $2, at most $3 s; prints the port.
wait_ready_line() {
    local out=$1 pid=$2 seconds=$3 i port
    for i in $(seq 1 $((seconds * 10))); do
        port=$(sed -n 's/^READY \([0-9][0-9]*\)$/\1/p' "$out" | head -n 1)
        if [ -n "$port" ]; then
            echo "$port"
            return 0
        fi
        kill -0 "$pid" 2>/dev/null || { echo "test-examples: pid $pid exited before READY" >&2; return 1; }
        sleep 0.1
    done
    echo "test-examples: no READY line from pid $pid within $seconds s" >&2
    return 1
}

# Runs `npm test` in $1 (a folder: examples/<name> or packages/<name>) with the extra env in $2..., counting node's
# `# pass N` / `# fail N` / `# cancelled N` lines (cancelled tests — their
# hook failed — count as failed; a run that crashes before counting is one
# failure).
run_tests() {
    local example=$1 out="$work/${1//\//-}-test.out" status=0 p f c
    shift
    echo "== $example: npm test"
    (cd "$example" && env "$@" npm test) 2>&1 | tee "$out" || status=$?
    p=$(sed -n 's/^# pass \([0-9][0-9]*\)$/\1/p' "$out" | tail -n 1)
    f=$(sed -n 's/^# fail \([0-9][0-9]*\)$/\1/p' "$out" | tail -n 1)
    c=$(sed -n 's/^# cancelled \([0-9][0-9]*\)$/\1/p' "$out" | tail -n 1)
    f=$((${f:-0} + ${c:-0}))
    passed=$((passed + ${p:-0}))
    failed=$((failed + f))
    if [ "$status" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "test-examples: npm test in $example exited $status without counting a failure"
        failed=$((failed + 1))
    fi
}

stage="node and npm"
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    echo "test-examples: needs Node.js >= 20 and npm on PATH (Debian: apt-get install nodejs npm)"
    exit 1
fi
node_major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$node_major" -lt 20 ]; then
    echo "test-examples: needs Node.js >= 20, found $(node --version) (install Node.js 20 or later)"
    exit 1
fi
echo "== node $(node --version), npm $(npm --version)"

if [ "$mode" != test ]; then
    # The package first: its tarball (packages/saga-participant/*.tgz, git-ignored) is what
    # examples/nestjs-shipping and examples/media-upload install, checked against the
    # integrity in their package-lock.json.
    for example in packages/saga-participant examples/nestjs-shipping examples/node-client examples/media-upload; do
        stage="npm ci ($example)"
        echo "== $example: npm ci && npm run build"
        (cd "$example" && timeout 600 npm ci --no-audit --no-fund && npm run build --if-present)
        if [ "$example" = packages/saga-participant ]; then
            stage="npm pack (packages/saga-participant)"
            (cd packages/saga-participant && rm -f ./*.tgz && npm pack --silent >/dev/null)
            echo "== packages/saga-participant: packed $(cd packages/saga-participant && ls ./*.tgz)"
        fi
    done
fi
if [ "$mode" = build ]; then
    stage="done"
    exit 0
fi

stage="SecantusDB"
# A transaction a killed process left open is aborted after 10 s instead of
# mongod's default 60 (the package's crash test waits for that).
echo "== SecantusDB (in memory, test commands on) for saga-participant and nestjs-shipping"
./scripts/secantusdb.sh --port 0 --storage-path :memory: --enable-test-commands --transaction-lifetime-seconds 10 \
    >"$work/secantusdb.out" 2>"$work/secantusdb.log" &
pids+=($!)
mongo_port=$(wait_ready_line "$work/secantusdb.out" "${pids[-1]}" 120)
stage="saga-participant tests"
run_tests packages/saga-participant MONGODB_URI="mongodb://127.0.0.1:$mongo_port/?directConnection=true"
stage="nestjs-shipping tests"
run_tests examples/nestjs-shipping MONGODB_URI="mongodb://127.0.0.1:$mongo_port/?directConnection=true"
stage="media-upload tests"
run_tests examples/media-upload MONGODB_URI="mongodb://127.0.0.1:$mongo_port/?directConnection=true"

stage="dev stack"
echo "== dev stack for node-client: cargo build (as the test command builds), then dev on free ports"
# The test command's own build, so that after it this is a no-op.
# shellcheck source=scripts/lib/build-workspace.sh
source "$root/scripts/lib/build-workspace.sh"
build_workspace
env -u MONGODB_URI ./target/debug/dev-stack dev --data-dir "$work/dev-data" \
    --orchestrator-listen 127.0.0.1:0 --payment-listen 127.0.0.1:0 --inventory-listen 127.0.0.1:0 \
    --no-console --no-metrics >"$work/dev-stack.out" 2>"$work/dev-stack.log" &
dev_pid=$!
pids+=("$dev_pid")
orchestrator=""
for _ in $(seq 1 600); do
    orchestrator=$(sed -n 's/^  orchestrator  \([0-9.]*:[0-9]*\) .*/\1/p' "$work/dev-stack.out" | head -n 1)
    [ -n "$orchestrator" ] && break
    kill -0 "$dev_pid" 2>/dev/null || { echo "test-examples: dev-stack exited before it served"; exit 1; }
    sleep 0.1
done
[ -n "$orchestrator" ] || { echo "test-examples: dev-stack printed no orchestrator address within 60 s"; exit 1; }
# It answers once its start-up demo order demo-1 can be read back (orchestrator and participants up).
ORCHESTRATOR_ADDR="$orchestrator" node --input-type=module -e "
import { connect } from '$root/examples/node-client/src/saga-client.js';
const client = connect(process.env.ORCHESTRATOR_ADDR);
const giveUp = Date.now() + 60_000;
for (;;) {
  const found = await new Promise((resolve) =>
    client.sagas.GetSaga({ request_id: 'demo-1' }, client.metadata(), { deadline: Date.now() + 2000 }, (e, saga) => resolve(e ? null : saga)));
  if (found && found.status === 'SAGA_STATUS_COMPLETED') break;
  if (Date.now() > giveUp) { console.error('the dev stack did not answer within 60 s'); process.exit(1); }
  await new Promise((r) => setTimeout(r, 200));
}
client.close();
"
echo "dev stack answers at $orchestrator"

stage="node-client tests"
run_tests examples/node-client ORCHESTRATOR_ADDR="$orchestrator"
