# shellcheck shell=bash
# Sourced by the scripts that need the workspace's binaries (scripts/test.sh,
# scripts/test-examples.sh): one build of them, the same wherever it runs.
#
#   build_workspace
#
# Every binary and every test in one cargo invocation. Cargo resolves
# features once per invocation, and the tests' dev-dependencies add some:
# the browser driver's turn on `syn`'s `fold` and `visit`, which every proc
# macro, and so most of the dependency tree, is then built with. Binaries
# built without the tests (`--bins` alone, or `-p dev-stack`) would be built
# again, with the rest of the tree, for `cargo test` — so every caller builds
# exactly this, and after the first the others are no-ops.
build_workspace() {
    cargo build --locked --workspace --bins --tests --quiet
}
