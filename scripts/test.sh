#!/usr/bin/env bash
# The project's test command (README and .ci/run both call this).
#
#   scripts/test.sh [--skip-browser] [--skip-mongo] [--skip-compose]
#
# First checks that this machine has what the run needs (scripts/preflight.sh:
# it stops at once, naming the packages to install, if not). Then runs format
# and lint checks, the documents' links, the Kubernetes manifests, validates
# compose.yaml, prepares the MongoDB test target — SecantusDB, unless
# MONGODB_URI points at a real MongoDB — and the browser (Debian's chromium
# and chromium-driver, installed when missing), then every test in the
# workspace: unit tests, the storage conformance suites on both backends,
# end-to-end scenarios over real gRPC servers on ephemeral ports with real
# stores in temp dirs, the saga console in headless Chromium, the chaos soak
# (two orchestrators on one store, with contention) and the load generator's
# smoke run.
#
# The switches are for local runs on a machine without a browser, the Python
# MongoDB test server or docker-compose: each leaves its stage out, with a
# "SKIPPED: ..." line, and the tests that need it skip (--skip-mongo: the
# MongoDB suites, and the chaos soak and load generator run on the embedded
# store only). With CI=true they are refused: CI runs everything.
#
# Made to be read in CI: every stage's output is shown in full (nothing is
# cut with `tail`), a failed chaos or loadgen run prints its kept work dir and
# the end of every service log in it, and the closing line
# `tests: N passed, M failed, K skipped` is printed however the run ends
# (from an EXIT trap), followed by the stage that failed, if one did.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
    echo "usage: $0 [--skip-browser] [--skip-mongo] [--skip-compose]"
}
skip_browser=0 skip_mongo=0 skip_compose=0
for arg in "$@"; do
    case "$arg" in
        --skip-browser) skip_browser=1 ;;
        --skip-mongo) skip_mongo=1 ;;
        --skip-compose) skip_compose=1 ;;
        -h | --help) usage; exit 0 ;;
        *) usage >&2; exit 2 ;;
    esac
done
if [ $# -gt 0 ] && [ "${CI:-}" = true ]; then
    echo "test.sh: $* refused: with CI=true every stage runs (the switches are for local runs)" >&2
    exit 2
fi
# What a local run left out, repeated beside the closing line.
skipped_stages=()
skip() {
    skipped_stages+=("$1")
    echo "SKIPPED: $1 ($2)"
}

log=$(mktemp)
stage="start"
# When a stage began, in the run's time, so a slow stage is seen.
at() { printf '[at %d min %02d s]' $((SECONDS / 60)) $((SECONDS % 60)); }
summary() {
    local status=$?
    if [ ${#skipped_stages[@]} -gt 0 ]; then
        echo "SKIPPED stages (a local run): ${skipped_stages[*]}"
    fi
    # One closing line for the whole run (cargo prints one per test binary;
    # the chaos soak prints "chaos: N passed, M failed", the load generator
    # "loadgen smoke: N passed, M failed").
    awk '/^test result:/ { p += $4; f += $6; i += $8 }
         /^chaos: [0-9]+ passed, [0-9]+ failed$/ { p += $2; f += $4 }
         /^loadgen smoke: [0-9]+ passed, [0-9]+ failed$/ { p += $3; f += $5 }
         /^examples: [0-9]+ passed, [0-9]+ failed$/ { p += $2; f += $4 }
         END { printf "tests: %d passed, %d failed, %d skipped\n", p, f, i }' "$log"
    echo "test command: $((SECONDS / 60)) min $((SECONDS % 60)) s"
    if [ "$status" -ne 0 ]; then
        show_failures
        echo "FAILED at stage: $stage (exit $status)"
    fi
    rm -f "$log"
}

# The reasons, once more at the very end (a failed run's kept logs and
# cargo's list of failed targets push them off the last screen): failed
# tests with their panic messages, chaos checks that failed, loadgen
# failures. At most 60 lines; the full output is above.
show_failures() {
    local reasons
    reasons=$({
        grep -E '^test .* \.\.\. FAILED$|^  FAIL  |^FAIL: |^not ok ' "$log"
        grep -E -A3 'panicked at' "$log" | grep -v -E '^note: run with|^stack backtrace'
    } | awk '!seen[$0]++' | head -n 60) || true
    if [ -n "$reasons" ]; then
        echo "== why it failed (from the output above)"
        echo "$reasons"
    fi
}
trap summary EXIT

# Prints the end of every log in the work dir a failed tool run kept.
show_kept_logs() {
    local dir
    dir=$(grep -Eo '(work dir \(data and logs\) kept|data and logs kept in):? .*' "$log" | tail -n 1 | sed -E 's/.*kept(:| in) //')
    [ -n "$dir" ] && [ -d "$dir" ] || return 0
    echo "== logs of the failed run, kept in $dir"
    find "$dir" -name '*.log' -type f | sort | while read -r f; do
        echo "---- $f (last 60 lines)"
        tail -n 60 "$f"
    done
}

# Runs one tool invocation, showing all its output; on failure shows the
# logs it kept and fails the run.
run_tool() {
    if ! "$@" 2>&1 | tee -a "$log"; then
        show_kept_logs
        return 1
    fi
}

stage="preflight"
echo "== $stage: what this run needs, before anything is built $(at)"
skips=()
[ "$skip_browser" = 0 ] || skips+=(--skip-browser)
[ "$skip_mongo" = 0 ] || skips+=(--skip-mongo)
[ "$skip_compose" = 0 ] || skips+=(--skip-compose)
./scripts/preflight.sh "${skips[@]}"

# The quick checks first: none of them builds anything.
stage="cargo fmt --check"
echo "== $stage $(at)"
cargo fmt --all -- --check
stage="document links"
echo "== $stage $(at)"
./scripts/check-doc-links.sh
stage="Kubernetes manifests"
echo "== $stage (deploy/kubernetes, offline: kubernetes-validate) $(at)"
./scripts/validate-kubernetes.sh
stage="compose.yaml"
if [ "$skip_compose" = 1 ]; then
    skip compose.yaml "--skip-compose: compose.yaml is not validated"
else
    echo "== $stage $(at)"
    ./scripts/validate-compose.sh
fi

stage="cargo clippy"
echo "== $stage $(at)"
cargo clippy --locked --workspace --all-targets --quiet -- -D warnings

stage="MongoDB target"
backends=(embedded mongo)
if [ "$skip_mongo" = 1 ]; then
    skip MongoDB "--skip-mongo: no MongoDB test server is started and MONGODB_URI is ignored, so the MongoDB suites skip; the chaos soak and the load generator run on the embedded store only"
    unset MONGODB_URI
    export SECANTUSDB_DISABLED="./scripts/test.sh --skip-mongo"
    backends=(embedded)
else
    if [ -n "${MONGODB_URI:-}" ]; then
        echo "== MongoDB target: real MongoDB (MONGODB_URI is set); SecantusDB too, for the tests that stop their server, set its transaction lifetime or inject failpoints $(at)"
    else
        echo "== MongoDB target: SecantusDB, a MongoDB-compatible server over WiredTiger (no MONGODB_URI); preparing it $(at)"
    fi
    ./scripts/secantusdb.sh --setup-only >/dev/null
    # The MongoDB suites must run, never skip, in this command.
    export REQUIRE_MONGO=1
fi

stage="browser"
if [ "$skip_browser" = 1 ]; then
    skip browser "--skip-browser: no browser is prepared; the console's browser test runs only if a chromedriver is on PATH, and skips otherwise"
else
    echo "== browser: Chromium + chromedriver for the console test (Debian's, installed when missing) $(at)"
    CHROMEDRIVER="$(./scripts/browser.sh --setup-only)"
    echo "chromedriver: $CHROMEDRIVER"
    # The console test drives that browser and must run, never skip, here.
    export CHROMEDRIVER REQUIRE_BROWSER=1
fi

stage="cargo build"
# Tests that start the services as processes (chaos, kill -9, MongoDB
# failpoints) need every binary; `cargo test` builds only the binaries of
# packages that have integration tests, so build them all first, with the
# tests (scripts/lib/build-workspace.sh says why together).
echo "== cargo build (every binary and test, for the tests that start the binaries as processes) $(at)"
# shellcheck source=scripts/lib/build-workspace.sh
source scripts/lib/build-workspace.sh
build_workspace

stage="examples build"
if [ "$skip_mongo" = 1 ]; then
    skip "examples build" "the NestJS participant's end-to-end tests need the MongoDB target"
else
    # The end-to-end tests with the NestJS shipping step start its built app.
    echo "== examples build: npm ci && npm run build (the NestJS step's end-to-end tests start it) $(at)"
    run_tool ./scripts/test-examples.sh --build-only
    export REQUIRE_EXAMPLES=1
fi

stage="cargo test"
echo "== cargo test (embedded stores$([ "$skip_mongo" = 1 ] || echo " and MongoDB")) $(at)"
cargo test --locked --workspace --no-fail-fast 2>&1 | tee -a "$log"

stage="examples"
if [ "$skip_mongo" = 1 ]; then
    skip examples "the NestJS participant's tests need the MongoDB target"
else
    echo "== examples in other languages: the NestJS participant on SecantusDB, the Node client on the dev stack $(at)"
    run_tool ./scripts/test-examples.sh --built
fi

stage="chaos soak"
echo "== chaos soak (short): 300 sagas on 2 orchestrators sharing one store, a SIGKILL left to lease takeover, contention for the last units and cents, faults; on ${backends[*]} $(at)"
for backend in "${backends[@]}"; do
    stage="chaos soak ($backend)"
    run_tool ./target/debug/chaos --sagas 300 --orchestrators 2 --orchestrator-kills 1 \
        --contention-orders 40 --retention-pass --backend "$backend"
done
# The same soak with five steps: three generic ones after payment and inventory (loyalty-svc,
# participant.v1.SagaStepService, under three names), so a SIGKILLed orchestrator leaves sagas
# whose store is up to four first-attempt successes behind (one save per run of them): 32 s here
# on the embedded store, so it runs in the test command on that one.
stage="chaos soak (embedded, 5 steps)"
echo "== chaos soak (short) with five steps: loyalty-svc faulted and SIGKILLed like the participants, its points audited at each of its three steps; embedded $(at)"
run_tool ./target/debug/chaos --sagas 300 --orchestrators 2 --orchestrator-kills 1 \
    --contention-orders 40 --retention-pass --backend embedded --steps 5

stage="loadgen smoke"
echo "== load generator smoke: fails on errors, stuck sagas or mix mismatches, never on timings $(at)"
for backend in "${backends[@]}"; do
    stage="loadgen smoke ($backend)"
    run_tool ./target/debug/loadgen --smoke --backend "$backend"
done
stage="done"
