#!/usr/bin/env bash
# The real browser the console test (tests/tests/suite/console.rs) drives: a
# Chromium (or Chrome) and its chromedriver. Found as CHROMEDRIVER (a file) or
# `chromedriver` on PATH, and CHROMIUM (a file) or `chromium`,
# `chromium-browser`, `google-chrome` or `google-chrome-stable` on PATH. With
# --setup-only it installs Debian's `chromium` and `chromium-driver` with
# apt-get when they are missing (as root or with passwordless sudo,
# non-interactively; idempotent) and prints the chromedriver path on stdout,
# the only line it prints there. Without arguments it also prints both
# versions (on stderr). Where it cannot install them, it says so and exits 1
# (./scripts/preflight.sh names the packages for this system). With --check it
# installs nothing and prints nothing: exit 0 when both are found, 1 if not.
#
# The test starts chromedriver itself on a free port and stops it by pid;
# this script never leaves a process behind.
set -euo pipefail
# shellcheck source=scripts/lib/apt-install.sh
source "$(dirname "$0")/lib/apt-install.sh"

usage() {
    echo "usage: $0 [--setup-only | --check]" >&2
    exit 2
}
case "${1:-}" in
    "" | --setup-only | --check) ;;
    *) usage ;;
esac

chromedriver_path() {
    if [ -n "${CHROMEDRIVER:-}" ] && [ -f "$CHROMEDRIVER" ]; then
        echo "$CHROMEDRIVER"
    else
        command -v chromedriver
    fi
}

browser_path() {
    if [ -n "${CHROMIUM:-}" ] && [ -f "$CHROMIUM" ]; then
        echo "$CHROMIUM"
        return 0
    fi
    local name
    for name in chromium chromium-browser google-chrome google-chrome-stable; do
        command -v "$name" && return 0
    done
    return 1
}

have_browser() {
    chromedriver_path >/dev/null 2>&1 && browser_path >/dev/null 2>&1
}

if [ "${1:-}" = "--check" ]; then
    have_browser
    exit
fi

if ! have_browser; then
    if ! apt_install browser chromium chromium-driver || ! have_browser; then
        echo "browser: no Chromium and chromedriver; the console test needs both" >&2
        exit 1
    fi
fi

if [ "${1:-}" != "--setup-only" ]; then
    # The Debian wrapper prints a harmless "[: ...: unexpected operator".
    "$(browser_path)" --version >&2 2>/dev/null || true
    "$(chromedriver_path)" --version >&2
fi
chromedriver_path
