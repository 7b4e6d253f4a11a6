#!/usr/bin/env bash
# What ./scripts/test.sh needs, checked before anything is built, so that a
# machine lacking something stops at once with what to install, instead of
# failing part-way. test.sh runs it first, with its own switches; it also runs
# alone:
#
#   scripts/preflight.sh [--skip-browser] [--skip-mongo] [--skip-compose]
#
# Needs checked: cargo with rustfmt and clippy; python3 (the doc-link check)
# with its venv module or pip (the pinned venvs of kubernetes-validate and
# SecantusDB); node and npm once examples/ holds a Node project (a
# package.json); docker-compose or the docker compose plugin (compose.yaml),
# else apt-get as root to install it; Chromium and chromedriver (the console
# test), else apt-get as root on Debian to install them. One line per need
# (ok / install / skipped / MISSING); if anything is missing, the packages to
# install (Debian or Ubuntu names, a generic hint elsewhere), and exit 1.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/apt-install.sh
source scripts/lib/apt-install.sh

skip_browser=0 skip_mongo=0 skip_compose=0
for arg in "$@"; do
    case "$arg" in
        --skip-browser) skip_browser=1 ;;
        --skip-mongo) skip_mongo=1 ;;
        --skip-compose) skip_compose=1 ;;
        *)
            echo "usage: $0 [--skip-browser] [--skip-mongo] [--skip-compose]" >&2
            exit 2
            ;;
    esac
done

# Debian or Ubuntu (their package names), or something else (generic hints).
distro=other
system=$(uname -s)
if [ -r /etc/os-release ]; then
    system=$(. /etc/os-release && echo "${PRETTY_NAME:-${ID:-$system}}")
    case " $(. /etc/os-release && echo "${ID:-} ${ID_LIKE:-}") " in
        *" ubuntu "*) distro=ubuntu ;;
        *" debian "*) distro=debian ;;
    esac
fi

missing=()      # what is missing, one entry each
debian_pkgs=()  # what to apt-get install on Debian
ubuntu_pkgs=()  # ... on Ubuntu
hints=()        # how to get each elsewhere
no_package=()   # how to get what no distribution packages (always shown)
switches=()     # the switches that would leave the stages needing them out

say() { printf '  %-8s %s\n' "$1" "$2"; }

# lack WHAT DEBIAN_PKGS UBUNTU_PKGS HINT [SWITCH]
lack() {
    say MISSING "$1"
    missing+=("$1")
    # shellcheck disable=SC2206  # word-split package lists on purpose
    debian_pkgs+=($2)
    # shellcheck disable=SC2206
    ubuntu_pkgs+=($3)
    hints+=("$1: $4")
    if [ -z "$2" ]; then no_package+=("$1: $4"); fi
    if [ -n "${5:-}" ]; then switches+=("$5"); fi
}

echo "preflight: what this run needs (on $system, as uid $(id -u))"

# Rust: rustup, which installs the toolchain rust-toolchain.toml pins (Debian's
# and Ubuntu's own cargo packages are older than rust-version, 1.89).
rustup_hint="install rustup (https://rustup.rs) and run from the repository root: rust-toolchain.toml pins the toolchain"
if ! command -v cargo >/dev/null 2>&1; then
    lack "cargo (Rust)" "" "" "$rustup_hint"
elif ! version=$(cargo --version 2>&1); then
    lack "a working cargo ($(head -n 1 <<<"$version"))" "" "" "$rustup_hint"
elif ! printf '1.89\n%s\n' "$(awk '{print $2}' <<<"$version")" | sort -V -C; then
    lack "cargo 1.89 or newer (found: $version)" "" "" "$rustup_hint"
else
    say ok "$version"
    if cargo fmt --version >/dev/null 2>&1 && cargo clippy --version >/dev/null 2>&1; then
        say ok "rustfmt and clippy"
    else
        lack "rustfmt and clippy (cargo fmt, cargo clippy)" "" "" "rustup component add rustfmt clippy"
    fi
fi

# Python: the doc-link check runs python3; kubernetes-validate and SecantusDB
# are pinned venvs (scripts/lib/pinned-venv.sh: the venv module, or pip).
if ! command -v python3 >/dev/null 2>&1; then
    lack "python3" "python3 python3-venv" "python3 python3-venv" "Python 3 with its venv module and pip"
else
    how=()
    if python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then how+=(venv); fi
    if python3 -m pip --version >/dev/null 2>&1; then how+=(pip); fi
    if [ ${#how[@]} -gt 0 ]; then
        with="${how[*]}"
        say ok "$(python3 --version 2>&1) with ${with// / and }"
    else
        lack "python3's venv module or pip (for the pinned kubernetes-validate and SecantusDB)" \
            python3-venv python3-venv "Python 3 with its venv module (ensurepip) or pip"
    fi
fi

# Node: the examples' Node projects, once there are any.
node_projects=$(find examples -name package.json -not -path '*/node_modules/*' 2>/dev/null | head -n 1 || true)
if [ -z "$node_projects" ]; then
    say skipped "node and npm: no Node project under examples/ yet"
elif command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
    say ok "node $(node --version), npm $(npm --version 2>/dev/null)"
else
    lack "node and npm (the Node projects under examples/)" "nodejs npm" "nodejs npm" "Node.js 20 or newer with npm"
fi

# docker-compose: validates compose.yaml (no Docker engine needed).
if [ "$skip_compose" = 1 ]; then
    say skipped "docker-compose (--skip-compose)"
elif command -v docker-compose >/dev/null 2>&1; then
    say ok "docker-compose ($(command -v docker-compose))"
elif docker compose version >/dev/null 2>&1; then
    say ok "docker compose (the plugin)"
elif [ "$distro" != other ] && can_apt_install; then
    say install "docker-compose: not found; ./scripts/validate-compose.sh installs the docker-compose package"
else
    lack "docker-compose (validates compose.yaml)" docker-compose docker-compose \
        "Docker Compose: docker-compose, or the docker CLI with its compose plugin" --skip-compose
fi

# The browser of the console test.
if [ "$skip_browser" = 1 ]; then
    say skipped "Chromium and chromedriver (--skip-browser)"
elif ./scripts/browser.sh --check; then
    say ok "Chromium and chromedriver ($(CHROMEDRIVER="${CHROMEDRIVER:-}" ./scripts/browser.sh --setup-only))"
elif [ "$distro" = debian ] && can_apt_install; then
    say install "Chromium and chromedriver: not found; ./scripts/browser.sh installs chromium and chromium-driver"
else
    lack "Chromium and chromedriver (the console's browser test)" "chromium chromium-driver" \
        "chromium-browser chromium-chromedriver" \
        "Chromium or Chrome and its chromedriver on PATH (or CHROMIUM and CHROMEDRIVER naming them)" --skip-browser
fi

if [ "$skip_mongo" = 1 ]; then
    say skipped "MongoDB (--skip-mongo): SecantusDB is not prepared; the MongoDB tests skip"
fi

if [ ${#missing[@]} -eq 0 ]; then
    echo "preflight: ok"
    exit 0
fi

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo "
echo
echo "preflight: this run cannot go on; missing:"
printf '  - %s\n' "${missing[@]}"
echo "Install:"
case "$distro" in
    debian) [ ${#debian_pkgs[@]} -eq 0 ] || echo "  ${sudo}apt-get install ${debian_pkgs[*]}" ;;
    ubuntu) [ ${#ubuntu_pkgs[@]} -eq 0 ] || echo "  ${sudo}apt-get install ${ubuntu_pkgs[*]}" ;;
esac
if [ "$distro" = other ]; then
    printf '  %s\n' "${hints[@]}"
elif [ ${#no_package[@]} -gt 0 ]; then
    printf '  %s\n' "${no_package[@]}"
fi
if [ ${#switches[@]} -gt 0 ]; then
    if [ "${CI:-}" = true ]; then
        echo "(CI=true runs every stage: install them in the CI machine's setup.)"
    else
        echo "Or, in a local run, leave those stages out: ./scripts/test.sh ${switches[*]}"
    fi
fi
exit 1
