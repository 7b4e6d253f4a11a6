# shellcheck shell=bash
# Sourced by the scripts that install a missing Debian package themselves
# (scripts/validate-compose.sh, scripts/browser.sh) and by scripts/preflight.sh,
# which tells beforehand whether they will be able to.
#
#   can_apt_install          0 when apt-get is there and this user is root or
#                            has passwordless sudo
#   apt_install LABEL PKG... installs PKG non-interactively (`apt-get update`
#                            only if the install fails without it); all output
#                            on stderr

# The command prefix that makes apt-get run as root, in the array apt_sudo.
_apt_as_root() {
  apt_sudo=()
  command -v apt-get >/dev/null 2>&1 || return 1
  [ "$(id -u)" -eq 0 ] && return 0
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    apt_sudo=(sudo -n)
    return 0
  fi
  return 1
}

can_apt_install() {
  _apt_as_root
}

apt_install() {
  local label="$1"
  shift
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "$label: $* not installed and apt-get is not available; install the equivalent and rerun (./scripts/preflight.sh says what)." >&2
    return 1
  fi
  if ! _apt_as_root; then
    echo "$label: $* not installed and installing needs root (run as root, or: sudo apt-get install $*)." >&2
    return 1
  fi
  local apt=("${apt_sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -y -q --no-install-recommends)
  echo "$label: installing Debian's $*" >&2
  if "${apt[@]}" install "$@" >&2; then
    return 0
  fi
  echo "$label: install failed; running apt-get update and retrying" >&2
  "${apt_sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -q update >&2 \
    && "${apt[@]}" install "$@" >&2
}
