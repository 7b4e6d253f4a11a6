#!/usr/bin/env bash
# The real browser the console test (tests/tests/console.rs) drives:
# Debian's `chromium` and `chromium-driver`. With --setup-only it installs
# them with apt-get when missing (as root, non-interactively, running
# `apt-get update` only if the install fails without it; idempotent) and
# prints the chromedriver path on stdout, the only line it prints there.
# Without arguments it also prints both versions (on stderr).
#
# The test starts chromedriver itself on a free port and stops it by pid;
# this script never leaves a process behind.
set -euo pipefail

usage() {
    echo "usage: $0 [--setup-only]" >&2
    exit 2
}
case "${1:-}" in
    "" | --setup-only) ;;
    *) usage ;;
esac

have_browser() {
    command -v chromedriver >/dev/null 2>&1 && command -v chromium >/dev/null 2>&1
}

install_browser() {
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "browser: chromium/chromium-driver are not installed and apt-get is not available;" >&2
        echo "browser: install Chromium and its chromedriver, then rerun." >&2
        return 1
    fi
    local sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
            sudo=(sudo -n)
        else
            echo "browser: chromium is not installed and installing it needs root" >&2
            echo "browser: (run this script as root, or: sudo apt-get install chromium chromium-driver)." >&2
            return 1
        fi
    fi
    local apt=("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -y -q --no-install-recommends)
    echo "browser: chromium/chromium-driver not found; installing Debian's packages" >&2
    if "${apt[@]}" install chromium chromium-driver >&2; then
        return 0
    fi
    echo "browser: install failed; running apt-get update and retrying" >&2
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -q update >&2 \
        && "${apt[@]}" install chromium chromium-driver >&2
}

if ! have_browser; then
    if ! install_browser || ! have_browser; then
        echo "browser: could not install chromium and chromium-driver" >&2
        exit 1
    fi
fi

if [ "${1:-}" != "--setup-only" ]; then
    # The Debian wrapper prints a harmless "[: ...: unexpected operator".
    chromium --version 2>/dev/null >&2 || true
    chromedriver --version >&2
fi
command -v chromedriver
