#!/usr/bin/env bash
# The project's test command (README and .ci/run both call this).
# Runs format and lint checks, validates compose.yaml, prepares the MongoDB
# wire-protocol emulator (unless MONGODB_URI points at a real MongoDB), then
# every test in the workspace: unit tests, the storage conformance suites on
# both backends, and end-to-end scenarios over real gRPC servers on ephemeral
# ports with real stores in temp dirs.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --quiet -- -D warnings
echo "== compose.yaml"
./scripts/validate-compose.sh

if [ -n "${MONGODB_URI:-}" ]; then
  echo "== MongoDB target: real MongoDB (MONGODB_URI is set)"
else
  echo "== MongoDB target: wire-protocol emulator (no MONGODB_URI); preparing it"
  python="$(./scripts/mongo-emulator.sh --setup-only)"
  "$python" tests/mongo-emulator/test_emulator.py
fi
# The MongoDB suites must run, never skip, in this command.
export REQUIRE_MONGO=1

echo "== cargo test (embedded stores and MongoDB)"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --workspace 2>&1 | tee "$log"

echo "== chaos soak (short): 200 sagas, SIGKILLs and faults, on both backends"
cargo build --workspace --bins --quiet
for backend in embedded mongo; do
  cargo run --quiet -p saga-tests --bin chaos -- --sagas 200 --orchestrator-kills 1 --backend "$backend" \
    | tee -a "$log" | tail -n 25
done

echo "== load generator smoke: fails on errors, stuck sagas or mix mismatches, never on timings"
for backend in embedded mongo; do
  ./target/debug/loadgen --smoke --backend "$backend" | tee -a "$log" | tail -n 12
done

# One closing line for the whole run (cargo prints one per test binary;
# the chaos soak prints "chaos: N passed, M failed").
awk '/^test result:/ { p += $4; f += $6; i += $8 }
     /^chaos: [0-9]+ passed, [0-9]+ failed$/ { p += $2; f += $4 }
     /^loadgen smoke: [0-9]+ passed, [0-9]+ failed$/ { p += $3; f += $5 }
     END { printf "tests: %d passed, %d failed, %d skipped\n", p, f, i }' "$log"
