# shellcheck shell=bash
# Sourced by the scripts that run a pinned Python tool from PyPI
# (scripts/secantusdb.sh, scripts/validate-kubernetes.sh): one way to keep a
# venv under target/ holding exactly the pinned requirements.
#
#   pinned_venv LABEL VENV REQUIREMENTS IMPORTS [PIP_ARGS...]
#
# Makes VENV hold REQUIREMENTS (one pinned `name==version` a line), checks
# that `python -c "import IMPORTS"` works, and returns. The requirements are
# installed only when they (or the system python) changed: a stamp file in
# the venv records what was installed, so a later call costs well under a
# second. Several callers at once (parallel tests) set it up only once
# (flock on VENV.lock). If python3's venv module is missing, it falls back to
# `pip install --target` plus a small wrapper at VENV/bin/python. All its
# output goes to stderr, each line prefixed with LABEL. The python is
# $PYTHON, else python3.

pinned_venv() {
  local label="$1" venv="$2" requirements="$3" imports="$4"
  shift 4
  local sys_python="${PYTHON:-python3}"
  local py="$venv/bin/python" stamp="$venv/.requirements.stamp" want
  want="$({
    echo "$requirements"
    "$sys_python" -c 'import sys; print(sys.version)'
  } | sha256sum | cut -d' ' -f1)"
  _pinned_venv_ready && return 0
  mkdir -p "$(dirname "$venv")"
  if command -v flock >/dev/null 2>&1; then
    local fd
    exec {fd}>"$venv.lock"
    flock "$fd"
    _pinned_venv_ready || _pinned_venv_setup "$label" "$venv" "$requirements" "$imports" "$sys_python" "$want" "$@"
    local status=$?
    exec {fd}>&-
    return "$status"
  fi
  _pinned_venv_setup "$label" "$venv" "$requirements" "$imports" "$sys_python" "$want" "$@"
}

# Whether the venv holds what was asked for (reads pinned_venv's py, stamp
# and want).
_pinned_venv_ready() {
  [[ -x "$py" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]
}

_pinned_venv_setup() {
  local label="$1" venv="$2" requirements="$3" imports="$4" sys_python="$5" want="$6"
  shift 6
  local py="$venv/bin/python" stamp="$venv/.requirements.stamp"
  export PIP_NO_INPUT=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
  rm -f "$stamp"
  if [[ ! -x "$py" ]] || ! "$py" -c 'import sys' >/dev/null 2>&1; then
    rm -rf "$venv"
    mkdir -p "$(dirname "$venv")"
    echo "$label: creating venv $venv" >&2
    if ! "$sys_python" -m venv "$venv" >&2 2>&1 || ! "$venv/bin/python" -m pip --version >/dev/null 2>&1; then
      echo "$label: python3 -m venv unavailable; using pip install --target" >&2
      rm -rf "$venv"
      mkdir -p "$venv/bin" "$venv/site"
      local real_python
      real_python="$(command -v "$sys_python")"
      cat >"$py" <<WRAPPER
#!/bin/sh
# pip --target fallback for a python3 without the venv module
PYTHONPATH="$venv/site\${PYTHONPATH:+:\$PYTHONPATH}" exec "$real_python" "\$@"
WRAPPER
      chmod +x "$py"
      touch "$venv/.target-mode"
    fi
  fi
  local req_file="$venv/requirements.txt"
  echo "$requirements" >"$req_file"
  echo "$label: installing $(grep -c . "$req_file") pinned packages" >&2
  if [[ -f "$venv/.target-mode" ]]; then
    "$sys_python" -m pip install --quiet "$@" --upgrade --target "$venv/site" -r "$req_file" >&2 || return 1
  else
    "$py" -m pip install --quiet "$@" -r "$req_file" >&2 || return 1
  fi
  "$py" -c "import $imports" >&2 || return 1
  echo "$want" >"$stamp"
}
