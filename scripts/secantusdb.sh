#!/usr/bin/env bash
# Runs SecantusDB (PyPI `secantusdb`, pinned pre-release 0.7.0b3): a MongoDB-compatible
# server written in Python over WiredTiger, used as the MongoDB test target. It is
# GPL-2.0: it only ever runs as a separate test-only process; never link or ship it.
#
#   scripts/secantusdb.sh --setup-only
#       only prepare the venv and print the path of its python (nothing else on stdout).
#   scripts/secantusdb.sh --port P --storage-path DIR [options] [secantusd-py args...]
#       prepare the venv if needed, then exec the server in the foreground (the caller's
#       pid IS the server's pid). Binds 127.0.0.1 unless --host is given.
#       `--port 0` picks a free ephemeral port.
#       `--storage-path :memory:` is an ephemeral store removed on shutdown; a directory is
#       reopened intact by the next start on it (WiredTiger allows one server per dir).
#
# Readiness: the server prints exactly one line `READY <port>` on stdout once it accepts
# connections (≈0.6-1 s after exec on a warm venv); everything else (logs) goes to stderr.
# Wait for that line (and read the port from it when using --port 0). Connect with
#   mongodb://127.0.0.1:<port>/?directConnection=true
# A caller that cannot read stdout can instead poll the TCP port and send `ping`/`hello`.
#
# Options handled here (the secantusd-py CLI lacks them or ignores the config value):
#   --ttl-sweep-seconds N      TTL monitor interval (default 60, like mongod). The
#                              `[storage] ttl_sweep_seconds` key of secantusd.toml is parsed
#                              but NOT applied by secantusd-py 0.7.0b3; this launcher applies
#                              it (the flag wins over a --config file's value).
#   --transaction-lifetime-seconds N
#                              mongod's transactionLifetimeLimitSeconds (default 60). Not
#                              settable by setParameter, flag or config in 0.7.0b3. Note it
#                              counts from the transaction's LAST statement, and an expired
#                              transaction is reaped only when a transaction command
#                              (any session) reaches the server.
#   --stats-seconds N          every N s, one log line `STATS {json}` (stderr, INFO) with the
#                              server's own timing of each command since the last line, per
#                              database, command and outcome (ok or the error's codeName, e.g.
#                              WriteConflict): [count, mean ms, max ms], measured around the
#                              server's dispatch (parse to reply, lock and GIL waits included).
#                              The chaos soak passes it (logs/secantusdb.log).
# SECANTUSDB_DISABLED=<reason>: do nothing, say why on stderr and exit 1 (the launchers
# then report MongoDB unavailable, and MongoDB tests skip unless REQUIRE_MONGO=1).
# Useful secantusd-py flags: --standalone (hello without setName; transactions still work;
#   no oplog, so no change streams),
#   --enable-test-commands (configureFailPoint/failCommand), --sync-on-commit (fsync each
#   commit: needed for acknowledged writes to survive a SIGKILL of the server; without it
#   writes of the last ~0.5 s are lost, and j:true on commitTransaction does not sync),
#   --log-level, --config PATH.
# Without --config the launcher passes an empty config file so that no ./secantusd.toml,
# ~/.secantus/secantusd.toml or /etc/secantus/secantusd.toml is picked up by accident.
#
# Stopping: SIGTERM (or SIGINT) shuts down cleanly in ~0.2-2.5 s (checkpoint, data kept);
# the launcher makes the main thread poll so the signal is never left undelivered (stock
# secantusd-py can ignore SIGTERM forever when a non-main thread receives it). SIGKILL
# stops at once. The server is one process (threads only, no children).
#
# The venv lives at target/secantusdb-venv (SECANTUSDB_VENV overrides it); the first
# setup downloads ~25 MB and takes ~30 s (up to ~75 s seen), the venv is ~145 MB. It is
# kept by scripts/lib/pinned-venv.sh: the pinned requirements are installed only when they
# (or the python) changed, so a later run costs well under a second; setup output goes to
# stderr; without python3's venv module it falls back to `pip install --target`.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/lib/pinned-venv.sh
source "$root/scripts/lib/pinned-venv.sh"
venv="${SECANTUSDB_VENV:-$root/target/secantusdb-venv}"
py="$venv/bin/python"
empty_config="$venv/secantusd-empty.toml"

# secantusdb and every dependency it pulls in, pinned (pip needs --pre for the beta).
requirements="secantusdb==0.7.0b3
pymongo==4.20.1
dnspython==2.9.2
python-dateutil==4.0.0
tzdata==2026.6
s2sphere==0.2.5
future==1.0.0
shapely==2.2.0
numpy==2.4.6"

setup_only=0
if [[ "${1:-}" == "--setup-only" ]]; then
  setup_only=1
  shift
fi

# `./scripts/test.sh --skip-mongo` sets this so that no test starts a server (each
# MongoDB test then skips, printing why).
if [[ -n "${SECANTUSDB_DISABLED:-}" ]]; then
  echo "secantusdb: not started: $SECANTUSDB_DISABLED" >&2
  exit 1
fi

pinned_venv secantusdb "$venv" "$requirements" 'secantus.cli, secantus.server, wiredtiger, pymongo' --pre

if [[ "$setup_only" == 1 ]]; then
  echo "$py"
  exit 0
fi

[[ -f "$empty_config" ]] || : >"$empty_config"

# The launch script runs secantusd-py's own CLI (secantus.cli.main) with three additions:
# TTL sweep / transaction lifetime knobs, a `READY <port>` line, and a main thread that
# wakes up regularly so SIGTERM/SIGINT are always handled.
bootstrap='
import argparse, functools, sys
from pathlib import Path
import secantus.cli as cli
import secantus.config as config
import secantus.server as server

empty_config = sys.argv[1]
parser = argparse.ArgumentParser(prog="scripts/secantusdb.sh", add_help=False, allow_abbrev=False)
parser.add_argument("--ttl-sweep-seconds", type=float, default=None)
parser.add_argument("--transaction-lifetime-seconds", type=float, default=None)
parser.add_argument("--stats-seconds", type=float, default=None)
ours, rest = parser.parse_known_args(sys.argv[2:])
if not any(a == "--config" or a.startswith("--config=") for a in rest):
    rest = ["--config", empty_config] + rest

# secantusd-py parses [storage] ttl_sweep_seconds but never passes it to the server.
ttl = ours.ttl_sweep_seconds
if ttl is None and "-h" not in rest and "--help" not in rest:
    cfg_path = None
    for i, a in enumerate(rest):
        if a == "--config" and i + 1 < len(rest):
            cfg_path = rest[i + 1]
        elif a.startswith("--config="):
            cfg_path = a.split("=", 1)[1]
    try:
        cfg, _src = config.load_config(Path(cfg_path) if cfg_path else None)
        ttl = cfg.ttl_sweep_seconds
    except config.ConfigError:
        pass  # cli.main reports it
extra = {}
if ttl is not None:
    extra["ttl_sweep_seconds"] = ttl
if ours.transaction_lifetime_seconds is not None:
    extra["transaction_lifetime_seconds"] = ours.transaction_lifetime_seconds
if extra:
    cli.SecantusDBServer = functools.partial(server.SecantusDBServer, **extra)

if ours.stats_seconds:
    # The server timing itself: every command through its dispatch, counted per
    # (database, command, outcome), logged every --stats-seconds.
    import json, logging, threading, time
    _stats, _stats_lock, _dispatch = {}, threading.Lock(), server.dispatch
    def _timed_dispatch(doc, ctx):
        began = time.perf_counter_ns()
        result = _dispatch(doc, ctx)
        took = time.perf_counter_ns() - began
        name = next(iter(doc), "?")
        outcome = "ok" if result.get("ok") == 1.0 else str(result.get("codeName", "error"))
        key = " ".join((ctx.db_name or "-", name, outcome))
        with _stats_lock:
            s = _stats.setdefault(key, [0, 0, 0])
            s[0] += 1
            s[1] += took
            s[2] = max(s[2], took)
        return result
    server.dispatch = _timed_dispatch
    def _report():
        log = logging.getLogger("secantus.stats")
        while True:
            time.sleep(ours.stats_seconds)
            with _stats_lock:
                snap = dict(_stats)
                _stats.clear()
            if snap:
                log.info("STATS %s", json.dumps({k: [c, round(t / c / 1e6, 1), round(m / 1e6, 1)]
                                                for k, (c, t, m) in sorted(snap.items())}))
    threading.Thread(target=_report, name="secantus-stats", daemon=True).start()

_start = server.SecantusDBServer.start
def start(self):
    _start(self)
    print(f"READY {self.port}", flush=True)
server.SecantusDBServer.start = start

def wait(self):
    # A bare Event.wait() never returns to the interpreter when the signal
    # lands on another thread, so the SIGTERM handler would never run.
    while not self._stop_event.wait(0.2):
        pass
server.SecantusDBServer.wait = wait

sys.exit(cli.main(rest))
'
# Kept as a file (not `python -c`) so that `ps` shows a readable command line; rewritten
# atomically only when this script's copy changed.
launch_py="$venv/secantusdb-launch.py"
if ! cmp -s "$launch_py" <(printf '%s' "$bootstrap"); then
  tmp="$(mktemp "$venv/.secantusdb-launch.XXXXXX")"
  printf '%s' "$bootstrap" >"$tmp"
  mv -f "$tmp" "$launch_py"
fi
exec "$py" "$launch_py" "$empty_config" "$@"
