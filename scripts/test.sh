#!/usr/bin/env bash
# The project's test command (README and .ci/run both call this).
# Runs format and lint checks, then every test in the workspace: unit tests,
# store tests, and end-to-end scenarios over real gRPC servers on ephemeral
# ports with real embedded stores in temp dirs.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --quiet -- -D warnings
echo "== cargo test (embedded stores)"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --workspace 2>&1 | tee "$log"
# One closing line for the whole run (cargo prints one per test binary).
awk '/^test result:/ { p += $4; f += $6; i += $8 }
     END { printf "tests: %d passed, %d failed, %d skipped\n", p, f, i }' "$log"
