#!/usr/bin/env bash
# Runs the MongoDB wire-protocol emulator used by the MongoDB store tests
# (tests/mongo-emulator/emulator.py: mockupdb + mongomock + pymongo, pinned in
# tests/mongo-emulator/requirements.txt). No real mongod is needed.
#
#   scripts/mongo-emulator.sh [--port 0] [emulator args...]
#       prepare the venv if needed, then exec the emulator; it prints one line
#       `READY <port>` on stdout once it accepts connections and logs to stderr.
#       Connect with mongodb://127.0.0.1:<port>/?directConnection=true
#   scripts/mongo-emulator.sh --setup-only
#       only prepare the venv and print the path of its python.
#
# The venv lives at target/mongo-emulator-venv (MONGO_EMULATOR_VENV overrides it). The
# pinned requirements are installed only when they (or the python) changed: a stamp file
# records what was installed, so a second run costs a few milliseconds. Setup output goes
# to stderr, so stdout carries only the READY line (or the python path).
# If python3's venv module is missing, falls back to `pip install --target` plus a small
# wrapper at <venv>/bin/python.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
emu_dir="$root/tests/mongo-emulator"
req="$emu_dir/requirements.txt"
venv="${MONGO_EMULATOR_VENV:-$root/target/mongo-emulator-venv}"
sys_python="${PYTHON:-python3}"
py="$venv/bin/python"
stamp="$venv/.requirements.stamp"

setup_only=0
if [[ "${1:-}" == "--setup-only" ]]; then
  setup_only=1
  shift
fi

want_stamp() {
  {
    cat "$req"
    "$sys_python" -c 'import sys; print(sys.version)'
  } | sha256sum | cut -d' ' -f1
}

is_ready() {
  [[ -x "$py" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]
}

setup() {
  export PIP_NO_INPUT=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
  rm -f "$stamp"
  if [[ ! -x "$py" ]] || ! "$py" -c 'import sys' >/dev/null 2>&1; then
    rm -rf "$venv"
    mkdir -p "$(dirname "$venv")"
    echo "mongo-emulator: creating venv $venv" >&2
    if ! "$sys_python" -m venv "$venv" >&2 2>&1 || ! "$venv/bin/python" -m pip --version >/dev/null 2>&1; then
      echo "mongo-emulator: python3 -m venv unavailable; using pip install --target" >&2
      rm -rf "$venv"
      mkdir -p "$venv/bin" "$venv/site"
      local real_python
      real_python="$(command -v "$sys_python")"
      cat >"$py" <<EOF
#!/bin/sh
# pip --target fallback for a python3 without the venv module
PYTHONPATH="$venv/site\${PYTHONPATH:+:\$PYTHONPATH}" exec "$real_python" "\$@"
EOF
      chmod +x "$py"
      touch "$venv/.target-mode"
    fi
  fi
  echo "mongo-emulator: installing $(grep -cv '^\s*\(#\|$\)' "$req") pinned packages" >&2
  if [[ -f "$venv/.target-mode" ]]; then
    "$sys_python" -m pip install --quiet --upgrade --target "$venv/site" -r "$req" >&2
  else
    "$py" -m pip install --quiet -r "$req" >&2
  fi
  "$py" -c 'import mockupdb, mongomock, pymongo' >&2
  echo "$want" >"$stamp"
}

want="$(want_stamp)"
if ! is_ready; then
  mkdir -p "$(dirname "$venv")"
  lock="$venv.lock"
  if command -v flock >/dev/null 2>&1; then
    # Parallel tests may start several emulators at once: set up only once.
    exec 9>"$lock"
    flock 9
    is_ready || setup
    exec 9>&-
  else
    setup
  fi
fi

if [[ "$setup_only" == 1 ]]; then
  echo "$py"
  exit 0
fi
exec "$py" "$emu_dir/emulator.py" "$@"
