#!/usr/bin/env python3
"""A small MongoDB wire-protocol emulator for tests (no real mongod needed).

    python emulator.py [--port 0] [--host 127.0.0.1] [--replset rs0]
                       [--txn-timeout 5] [--txn-wait-ms 50] [--exit-on-stdin-eof | --ignore-stdin] [-v]

Prints exactly one line ``READY <port>`` on stdout once it accepts connections,
logs to stderr, and runs until killed (SIGTERM/SIGINT exit cleanly).

Built from:
  * mockupdb  -- wire framing: parsing OP_MSG / OP_QUERY requests, building replies;
  * mongomock -- query semantics: filters, sort keys, projections, update operators,
                 aggregation stages, plus its in-memory database/collection store;
  * pymongo's bson (pinned < 5).

What is emulated on top (see README.md beside this file):
  * a writable PRIMARY of a single-node replica set (hello/isMaster), wire version 21;
  * the CRUD commands with real cursors (getMore/killCursors);
  * unique indexes (also compound, sparse, partial) enforced through hash maps, with
    duplicate-key errors in the real server's shape (code 11000, codeName DuplicateKey,
    "E11000 duplicate key error collection: db.c index: name dup key: { ... }",
    keyPattern and keyValue);
  * Int64 values that stay Int64 through $inc/$mul/$sum;
  * multi-document transactions, serialised: one open transaction at a time
    (a global transaction lock), writes applied with an undo log, rolled back on
    abortTransaction, on a write error inside the transaction, after --txn-timeout
    seconds of inactivity, or when the connection that last used it closes.
    Operations outside the transaction wait until it ends (so they never see
    uncommitted writes); a second transaction waits up to --txn-wait-ms and then
    gets WriteConflict (112) with the TransientTransactionError label;
  * simulated outages: {emulatorOutage: <ms>} on the admin db replies ok, then closes every
    client connection, aborts the open transaction, forgets cursors and stops listening
    (connections are refused) for <ms> milliseconds; then it listens on the same port again
    with all data intact. For tests of "the database went away mid-work".

All command processing is serialised by one lock: simple and thread-safe.
"""

import argparse
import copy
import datetime
import errno
import itertools
import logging
import numbers
import os
import random
import re
import select
import signal
import socket
import sys
import threading
import time
from collections import OrderedDict

import bson
from bson import Int64, ObjectId
from bson.decimal128 import Decimal128

import mockupdb
import mongomock
from mongomock import aggregate as mm_aggregate
from mongomock import collection as mm_collection
from mongomock import filtering, helpers

log = logging.getLogger('mongo-emulator')

MAX_BSON_OBJECT_SIZE = 16 * 1024 * 1024
MAX_MESSAGE_SIZE = 48000000
MAX_WRITE_BATCH_SIZE = 100000
MAX_WIRE_VERSION = 21  # MongoDB 7.0
SERVER_VERSION = '7.0.0'
CURSOR_IDLE_SECONDS = 600
DEFAULT_BATCH_SIZE = 101
BATCH_BYTES = 16 * 1024 * 1024

_MISSING = object()


# --------------------------------------------------------------------------- errors

class CmdError(Exception):
    """A command failure sent to the client as {ok: 0, code, codeName, errmsg}."""

    def __init__(self, code, code_name, errmsg, labels=None, extra=None):
        super().__init__(errmsg)
        self.code = code
        self.code_name = code_name
        self.errmsg = errmsg
        self.labels = labels or []
        self.extra = extra or {}

    def fields(self):
        out = OrderedDict()
        out['code'] = self.code
        out['codeName'] = self.code_name
        out['errmsg'] = self.errmsg
        out.update(self.extra)
        return out

    def reply(self):
        out = OrderedDict(ok=0.0)
        out.update(self.fields())
        if self.labels:
            out['errorLabels'] = list(self.labels)
        return out


def _fmt(v):
    """Format a value the way the server prints it in E11000 messages."""
    if v is None:
        return 'null'
    if isinstance(v, bool):
        return 'true' if v else 'false'
    if isinstance(v, str):
        return '"' + v.replace('\\', '\\\\').replace('"', '\\"') + '"'
    if isinstance(v, ObjectId):
        return "ObjectId('%s')" % v
    if isinstance(v, datetime.datetime):
        if v.tzinfo is None:
            v = v.replace(tzinfo=datetime.timezone.utc)
        return 'new Date(%d)' % int(v.timestamp() * 1000)
    if isinstance(v, dict):
        if not v:
            return '{}'
        return '{ ' + ', '.join('%s: %s' % (k, _fmt(x)) for k, x in v.items()) + ' }'
    if isinstance(v, (list, tuple)):
        return '[ ' + ', '.join(_fmt(x) for x in v) + ' ]'
    if isinstance(v, bson.Binary):
        import base64
        return 'BinData(%d, %s)' % (v.subtype, base64.b64encode(bytes(v)).decode().upper())
    if isinstance(v, int):
        return str(int(v))
    return str(v)


def dup_key_error(db, coll, index_name, fields_dirs, key_value):
    key_pattern = OrderedDict((f, d) for f, d in fields_dirs)
    msg = 'E11000 duplicate key error collection: %s.%s index: %s dup key: %s' % (
        db, coll, index_name, _fmt(key_value))
    return CmdError(11000, 'DuplicateKey', msg,
                    extra=OrderedDict([('keyPattern', key_pattern), ('keyValue', key_value)]))


def _convert_exception(exc):
    """Map mongomock / python exceptions to a CmdError."""
    if isinstance(exc, CmdError):
        return exc
    if isinstance(exc, NotImplementedError):
        return CmdError(238, 'NotImplemented', 'not supported by the emulator: %s' % exc)
    code = getattr(exc, 'code', None)
    if isinstance(exc, mongomock.DuplicateKeyError) or code == 11000:
        return CmdError(11000, 'DuplicateKey', 'E11000 duplicate key error: %s' % exc)
    if isinstance(exc, (mongomock.OperationFailure, mongomock.WriteError, ValueError, TypeError,
                        KeyError, bson.errors.InvalidDocument)):
        return CmdError(code if isinstance(code, int) and code else 2, 'BadValue', str(exc))
    log.exception('internal error')
    return CmdError(1, 'InternalError', '%s: %s' % (type(exc).__name__, exc))


# ------------------------------------------------------------- mongomock patches

def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _keep_int64(a, b, result):
    """Int64 (op) anything integral stays Int64, like the server's NumberLong."""
    if _is_int(result) and (isinstance(a, Int64) or isinstance(b, Int64)):
        if -(1 << 63) <= result < (1 << 63):
            return Int64(result)
    return result


def _check_number(value, op):
    if not isinstance(value, numbers.Number) or isinstance(value, bool):
        if not isinstance(value, Decimal128):
            raise CmdError(14, 'TypeMismatch', 'Cannot %s with non-numeric argument: %s' % (
                op, _fmt(value)))


def _arith_updater(op_name, fn, missing_as_zero):
    def updater(doc, field_name, value):
        _check_number(value, op_name)
        if isinstance(doc, list):
            idx = int(field_name)
            if idx < 0:
                raise CmdError(2, 'BadValue', 'Negative index provided')
            while len(doc) <= idx:
                doc.append(None)
            old = doc[idx]
            container, key = doc, idx
            present = old is not None
        elif isinstance(doc, dict):
            present = field_name in doc
            old = doc.get(field_name)
            container, key = doc, field_name
        else:
            return
        if not present:
            if missing_as_zero:
                # $mul on a missing field stores 0 of the operand's type.
                container[key] = Int64(0) if isinstance(value, Int64) else type(value)(0) \
                    if isinstance(value, (int, float)) else value
            else:
                container[key] = value
            return
        if not isinstance(old, numbers.Number) or isinstance(old, bool):
            raise CmdError(14, 'TypeMismatch',
                           'Cannot apply %s to a value of non-numeric type. '
                           "{_id: ...} has the field '%s' of non-numeric type %s" % (
                               op_name, field_name, type(old).__name__))
        container[key] = _keep_int64(old, value, fn(old, value))
    return updater


def _patch_mongomock():
    mm_collection._updaters['$inc'] = _arith_updater('$inc', lambda a, b: a + b, False)
    mm_collection._updaters['$mul'] = _arith_updater('$mul', lambda a, b: a * b, True)

    original_sum = mm_aggregate._sum_operation

    def sum_keeping_int64(values):
        values = list(values)
        result = original_sum(values)
        if _is_int(result) and any(isinstance(v, Int64) for v in values):
            return Int64(result)
        return result
    mm_aggregate._sum_operation = sum_keeping_int64
    # The group-stage accumulator table captured the original function.
    for name in dir(mm_aggregate):
        table = getattr(mm_aggregate, name)
        if isinstance(table, dict):
            for k, v in list(table.items()):
                if v is original_sum:
                    table[k] = sum_keeping_int64


_patch_mongomock()

UPDATE_OPERATORS = set(mm_collection._updaters) | {
    '$push', '$addToSet', '$pull', '$pullAll', '$rename', '$setOnInsert', '$currentDate', '$mul'}


# ------------------------------------------------------------------ unique indexes

def _hk(v):
    """A hashable key for an index value, equal where MongoDB says equal."""
    if isinstance(v, bool):
        return ('$bool', v)
    if isinstance(v, dict):
        return ('$doc',) + tuple((k, _hk(x)) for k, x in v.items())
    if isinstance(v, (list, tuple)):
        return ('$arr',) + tuple(_hk(x) for x in v)
    if isinstance(v, float) and v != v:
        return ('$nan',)
    try:
        hash(v)
        return v
    except TypeError:
        return ('$repr', repr(v))


def _skey(_id):
    if isinstance(_id, dict):
        return helpers.hashdict(_id)
    return _id


_EMPTY_ARRAY = ('$emptyarray',)


def _path_values(doc, field):
    """Values at a dotted path, descending into arrays like MongoDB does."""
    cur = [doc]
    for part in field.split('.'):
        nxt = []
        for c in cur:
            if isinstance(c, dict):
                if part in c:
                    nxt.append(c[part])
            elif isinstance(c, list):
                if part.isdigit() and int(part) < len(c):
                    nxt.append(c[int(part)])
                for e in c:
                    if isinstance(e, dict) and part in e:
                        nxt.append(e[part])
        cur = nxt
        if not cur:
            break
    return cur


class Index:
    """An index over a collection, kept as a hash map (equality lookups only).

    map: hashable key tuple -> {store key: None} (insertion-ordered set; at most one
    entry for a unique index).
    """

    def __init__(self, name, spec):
        self.name = name
        self.key = list(spec['key'])  # [(field, direction)]
        self.fields = [f for f, _ in self.key]
        self.unique = bool(spec.get('unique'))
        self.sparse = bool(spec.get('sparse'))
        self.pfe = spec.get('partialFilterExpression')
        self.map = {}

    def keys_of(self, doc):
        """[(hashable key, keyValue doc)] for the entries this doc has in the index."""
        if self.pfe is not None and not filtering.filter_applies(self.pfe, doc):
            return []
        choices = []
        all_missing = True
        for f in self.fields:
            vals = _path_values(doc, f)
            if vals:
                all_missing = False
            flat = []
            for v in vals:
                if isinstance(v, list):
                    flat.extend(v if v else [_EMPTY_ARRAY])
                else:
                    flat.append(v)
            choices.append(flat or [None])
        if self.sparse and all_missing:
            return []
        out = OrderedDict()
        for combo in itertools.product(*choices):
            hk = tuple(_hk(x) for x in combo)
            if hk not in out:
                out[hk] = OrderedDict(
                    (f, [] if x is _EMPTY_ARRAY else x) for f, x in zip(self.fields, combo))
        return list(out.items())

    def add(self, k, doc):
        for hk, _ in self.keys_of(doc):
            self.map.setdefault(hk, {})[k] = None

    def discard(self, k, doc):
        for hk, _ in self.keys_of(doc):
            ks = self.map.get(hk)
            if ks is not None:
                ks.pop(k, None)
                if not ks:
                    del self.map[hk]


# ------------------------------------------------------------------ transactions

class Txn:
    def __init__(self, lkey, number, conn):
        self.lkey = lkey
        self.number = number
        self.conn = conn
        self.undo = []
        # (db, coll) -> {store key: committed document or _MISSING}, for reads outside
        # the transaction (they see the committed state and do not wait).
        self.orig = {}
        self.started = time.monotonic()
        self.last_active = self.started
        self.ops = 0


class Ctx:
    """Per-command context."""

    def __init__(self, db, conn, txn=None):
        self.db = db
        self.conn = conn
        self.txn = txn
        self.outside = None  # the open transaction of another session, for reads


class Cursor:
    def __init__(self, ns, docs):
        self.ns = ns
        self.docs = docs
        self.pos = 0
        self.last_used = time.monotonic()


class ConnState:
    _next = itertools.count(1)

    def __init__(self, peer):
        self.id = next(ConnState._next)
        self.peer = peer
        # Run by the connection's thread once the current reply is sent (emulatorOutage).
        self.after_reply = None
        # A command ran and its reply is not sent yet (guarded by Engine.cv): an outage waits
        # for it, so a command either runs and is answered, or does not run at all.
        self.replying = False


class ServerDown(Exception):
    """The emulated server is in an outage: drop the connection without a reply."""


# Reads: outside a transaction they see the committed state (no waiting).
READ_COMMANDS = {'find', 'aggregate', 'count', 'distinct'}
# Commands that touch data: outside a transaction, all but reads wait while one is open.
DATA_COMMANDS = READ_COMMANDS | {
    'insert', 'update', 'delete', 'findandmodify',
    'listcollections', 'listindexes', 'listdatabases', 'create', 'drop', 'dropdatabase',
    'createindexes', 'dropindexes', 'renamecollection', 'dbstats', 'collstats',
}
# DDL not allowed inside a transaction (create/createIndexes are, as on 4.4+).
NOT_IN_TXN = {'drop', 'dropdatabase', 'dropindexes', 'renamecollection', 'listdatabases',
              'listcollections', 'listindexes', 'count', 'dbstats', 'collstats'}


class Engine:
    def __init__(self, host, port, replset, txn_timeout, txn_wait):
        self.host = host
        self.port = port
        self.replset = replset
        self.txn_timeout = txn_timeout
        self.txn_wait = txn_wait
        self.client = mongomock.MongoClient()
        self.server_store = self.client._store
        self.cv = threading.Condition(threading.RLock())
        self.txn = None
        self.finished = {}  # lsid key -> (txnNumber, 'committed' | 'aborted')
        self.cursors = {}
        self.indexes = {}  # (db, coll) -> [Index] (missing: rebuilt lazily)
        self.election_id = ObjectId('7fffffff0000000000000001')
        self.started = time.time()
        self.stats = {'commands': 0, 'txn_commits': 0, 'txn_aborts': 0, 'write_conflicts': 0,
                      'outages': 0}
        # Simulated outage (emulatorOutage): no command runs before this monotonic time.
        self.down_until = 0.0
        # Set by the server: starts an outage of the given seconds (see EmulatorServer).
        self.outage_hook = None
        self.handlers = {
            'ping': self.cmd_ping,
            'buildinfo': self.cmd_build_info,
            'hello': self.cmd_hello,
            'ismaster': self.cmd_hello,
            'endsessions': self.cmd_end_sessions,
            'killallsessions': self.cmd_ok,
            'refreshsessions': self.cmd_ok,
            'getparameter': self.cmd_get_parameter,
            'whatsmyuri': self.cmd_whatsmyuri,
            'connectionstatus': self.cmd_connection_status,
            'serverstatus': self.cmd_server_status,
            'hostinfo': self.cmd_ok,
            'getcmdlineopts': self.cmd_cmdline,
            'getlog': self.cmd_get_log,
            'listcommands': self.cmd_list_commands,
            'find': self.cmd_find,
            'getmore': self.cmd_get_more,
            'killcursors': self.cmd_kill_cursors,
            'aggregate': self.cmd_aggregate,
            'count': self.cmd_count,
            'distinct': self.cmd_distinct,
            'insert': self.cmd_insert,
            'update': self.cmd_update,
            'delete': self.cmd_delete,
            'findandmodify': self.cmd_find_and_modify,
            'listcollections': self.cmd_list_collections,
            'listindexes': self.cmd_list_indexes,
            'listdatabases': self.cmd_list_databases,
            'create': self.cmd_create,
            'drop': self.cmd_drop,
            'dropdatabase': self.cmd_drop_database,
            'createindexes': self.cmd_create_indexes,
            'dropindexes': self.cmd_drop_indexes,
            'renamecollection': self.cmd_rename_collection,
            'dbstats': self.cmd_db_stats,
            'collstats': self.cmd_coll_stats,
            'emulatoroutage': self.cmd_emulator_outage,
        }
        reaper = threading.Thread(target=self._reaper, name='reaper', daemon=True)
        reaper.start()

    # ---------------------------------------------------------------- dispatch

    def is_down(self):
        return time.monotonic() < self.down_until

    def _refuse_if_down(self):
        if self.is_down():
            raise ServerDown()

    def handle(self, cmd, conn):
        """The reply to one command, or None when the connection must be dropped unanswered
        (the server is in a simulated outage). The caller must call reply_sent(conn) once
        the reply is sent (or the connection is gone)."""
        with self.cv:  # re-entrant; cv.wait inside still releases it fully
            try:
                reply = self._handle(cmd, conn)
            except ServerDown:
                log.debug('conn%d: command during outage, dropping the connection', conn.id)
                return None
            conn.replying = True
            return reply

    def reply_sent(self, conn):
        with self.cv:
            if conn.replying:
                conn.replying = False
                self.cv.notify_all()

    def _handle(self, cmd, conn):
        if not cmd:
            return CmdError(59, 'CommandNotFound', 'no command given').reply()
        name = next(iter(cmd))
        lname = name.lower()
        self.stats['commands'] += 1
        if lname in ('committransaction', 'aborttransaction'):
            try:
                return self.handle_txn_end(cmd, conn, commit=lname == 'committransaction')
            except ServerDown:
                raise
            except Exception as exc:  # noqa: BLE001
                return _convert_exception(exc).reply()
        handler = self.handlers.get(lname)
        if handler is None or (lname == 'ismaster' and name not in ('isMaster', 'ismaster')):
            return CmdError(59, 'CommandNotFound', "no such command: '%s'" % name).reply()
        db = cmd.get('$db', 'admin')
        if log.isEnabledFor(logging.DEBUG):
            log.debug('conn%d %s.%s %s', conn.id, db, name, _short(cmd))
        try:
            if lname not in DATA_COMMANDS and lname not in ('getmore', 'killcursors'):
                with self.cv:
                    self._refuse_if_down()
                    return handler(cmd, Ctx(db, conn))
            with self.cv:
                self._refuse_if_down()
                return self._run_data_command(lname, handler, cmd, Ctx(db, conn))
        except ServerDown:
            raise
        except Exception as exc:  # noqa: BLE001 - every failure becomes a reply
            err = _convert_exception(exc)
            if log.isEnabledFor(logging.DEBUG):
                log.debug('conn%d %s -> error %s %s', conn.id, name, err.code, err.errmsg)
            return err.reply()

    def handle_txn_end(self, cmd, conn, commit):
        with self.cv:
            self._refuse_if_down()
            lkey = _lsid_key(cmd)
            number = _txn_number(cmd)
            if lkey is None or number is None:
                raise CmdError(72, 'InvalidOptions',
                               'commitTransaction/abortTransaction need lsid and txnNumber')
            t = self.txn
            if t is not None and t.lkey == lkey and t.number == number:
                if commit:
                    self.txn = None
                    self.finished[lkey] = (number, 'committed')
                    self.stats['txn_commits'] += 1
                    self.cv.notify_all()
                    log.debug('txn %s committed (%d undo entries)', number, len(t.undo))
                else:
                    self._rollback(t, 'abortTransaction')
                return OrderedDict(ok=1.0)
            done = self.finished.get(lkey)
            if commit and done == (number, 'committed'):
                return OrderedDict(ok=1.0)  # retried commit
            if not commit and done == (number, 'aborted'):
                raise CmdError(251, 'NoSuchTransaction',
                               'Transaction with { txnNumber: %d } has been aborted.' % number)
            raise CmdError(251, 'NoSuchTransaction',
                           'Transaction with { txnNumber: %d } has been aborted.' % number
                           if done else
                           'Given transaction number %d does not match any in-progress '
                           'transactions.' % number,
                           labels=['TransientTransactionError'] if commit else None)

    def _run_data_command(self, lname, handler, cmd, ctx):
        in_txn = cmd.get('autocommit') is False and 'txnNumber' in cmd
        if not in_txn:
            if lname in READ_COMMANDS:
                self._expire_if_idle()
                ctx.outside = self.txn
            elif lname in DATA_COMMANDS:
                self._wait_no_txn(cmd)
            return handler(cmd, ctx)
        if lname in NOT_IN_TXN:
            raise CmdError(263, 'OperationNotSupportedInTransaction',
                           'Cannot run %r in a multi-document transaction.' % next(iter(cmd)))
        txn = self._enter_txn(cmd, ctx.conn)
        ctx.txn = txn
        try:
            reply = handler(cmd, ctx)
        except Exception as exc:
            err = _convert_exception(exc)
            if self.txn is txn:
                self._rollback(txn, 'error %s in transaction' % err.code_name)
            raise err from None
        if reply.get('writeErrors') and self.txn is txn:
            self._rollback(txn, 'write error in transaction')
        txn.last_active = time.monotonic()
        txn.conn = ctx.conn
        txn.ops += 1
        return reply

    def _enter_txn(self, cmd, conn):
        lkey = _lsid_key(cmd)
        number = _txn_number(cmd)
        if lkey is None:
            raise CmdError(50768, 'InvalidOptions', 'a transaction needs an lsid')
        t = self.txn
        if not cmd.get('startTransaction'):
            if t is not None and t.lkey == lkey and t.number == number:
                return t
            done = self.finished.get(lkey)
            if done and done[0] == number:
                msg = 'Transaction with { txnNumber: %d } has been %s.' % (number, done[1])
            else:
                msg = ('Given transaction number %d does not match any in-progress '
                       'transactions.' % number)
            raise CmdError(251, 'NoSuchTransaction', msg, labels=['TransientTransactionError'])
        if t is not None and t.lkey == lkey:
            if t.number == number:
                raise CmdError(263, 'ConflictingOperationInProgress',
                               'Transaction %d already started' % number)
            # A newer transaction on the same session aborts the older one.
            self._rollback(t, 'superseded by txnNumber %d' % number)
        deadline = time.monotonic() + self.txn_wait
        while self.txn is not None:
            self._expire_if_idle()
            if self.txn is None:
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.finished[lkey] = (number, 'aborted')
                self.stats['write_conflicts'] += 1
                raise CmdError(
                    112, 'WriteConflict',
                    'WriteConflict error: this operation conflicted with another operation. '
                    'Please retry your operation or multi-document transaction.',
                    labels=['TransientTransactionError'])
            self.cv.wait(min(remaining, 0.05))
            self._refuse_if_down()
        self.txn = Txn(lkey, number, conn)
        return self.txn

    def _wait_no_txn(self, cmd):
        if self.txn is None:
            return
        lkey = _lsid_key(cmd)
        if self.txn.lkey == lkey and log.isEnabledFor(logging.INFO):
            log.info('non-transactional command on a session whose transaction is open: '
                     'it waits for the transaction to end')
        deadline = time.monotonic() + self.txn_timeout * 2 + 5
        while self.txn is not None:
            self._expire_if_idle()
            if self.txn is None:
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise CmdError(50, 'MaxTimeMSExpired',
                               'operation timed out waiting for an open transaction')
            self.cv.wait(min(remaining, 0.05))
            self._refuse_if_down()

    def _expire_if_idle(self):
        t = self.txn
        if t is not None and time.monotonic() - t.last_active > self.txn_timeout:
            log.warning('transaction %s idle for more than %.1fs: aborted', t.number,
                        self.txn_timeout)
            self._rollback(t, 'timeout')

    def _rollback(self, t, reason):
        for entry in reversed(t.undo):
            kind = entry[0]
            if kind == 'doc':
                _, db, coll, k, old = entry
                store = self.server_store[db][coll]
                cur = store._documents.get(k, _MISSING)
                if old is _MISSING:
                    store._documents.pop(k, None)
                else:
                    store._documents[k] = old
                self._maps_replace(db, coll, k, cur, old)
            elif kind == 'meta':
                _, db, coll, forced, indexes = entry
                store = self.server_store[db][coll]
                store._is_force_created = forced
                store.indexes = indexes
                self.indexes.pop((db, coll), None)
        if self.txn is t:
            self.txn = None
        self.finished[t.lkey] = (t.number, 'aborted')
        self.stats['txn_aborts'] += 1
        log.debug('txn %s aborted (%s), %d undo entries', t.number, reason, len(t.undo))
        self.cv.notify_all()

    def _reaper(self):
        while True:
            time.sleep(0.2)
            with self.cv:
                self._expire_if_idle()
                now = time.monotonic()
                for cid in [c for c, cur in self.cursors.items()
                            if now - cur.last_used > CURSOR_IDLE_SECONDS]:
                    del self.cursors[cid]

    def connection_closed(self, conn):
        with self.cv:
            t = self.txn
            if t is not None and t.conn is conn:
                log.info('connection conn%d closed with transaction %s open: aborted',
                         conn.id, t.number)
                self._rollback(t, 'connection closed')

    # ------------------------------------------------------------ store helpers

    def _store(self, db, coll):
        return self.server_store[db][coll]

    def _mm_coll(self, db, coll):
        return self.client[db][coll]

    def _ensure_created(self, ctx, db, coll):
        store = self._store(db, coll)
        if not store._is_force_created:
            self._log_meta(ctx, db, coll, store)
            store._is_force_created = True
        return store

    def _log_meta(self, ctx, db, coll, store):
        if ctx.txn is not None:
            ctx.txn.undo.append(('meta', db, coll, store._is_force_created, dict(store.indexes)))

    def _indexes(self, db, coll, store):
        key = (db, coll)
        idx = self.indexes.get(key)
        if idx is None:
            idx = []
            for name, spec in store.indexes.items():
                ix = Index(name, spec)
                for k, doc in store._documents.items():
                    ix.add(k, doc)
                idx.append(ix)
            self.indexes[key] = idx
        return idx

    def _maps_replace(self, db, coll, k, old, new):
        idx = self.indexes.get((db, coll))
        if not idx:
            return
        for ix in idx:
            if old is not _MISSING and old is not None:
                ix.discard(k, old)
            if new is not _MISSING and new is not None:
                ix.add(k, new)

    def _check_unique(self, db, coll, store, doc, k):
        for ix in self._indexes(db, coll, store):
            if not ix.unique:
                continue
            for hk, key_value in ix.keys_of(doc):
                for other in ix.map.get(hk, ()):
                    if not _same_key(other, k):
                        raise dup_key_error(db, coll, ix.name, ix.key, key_value)

    def _put(self, ctx, db, coll, store, k, new):
        old = store._documents.get(k, _MISSING)
        if ctx.txn is not None:
            ctx.txn.undo.append(('doc', db, coll, k, old))
            ctx.txn.orig.setdefault((db, coll), {}).setdefault(k, old)
        store._documents[k] = new
        self._maps_replace(db, coll, k, old, new)

    def _remove(self, ctx, db, coll, store, k):
        old = store._documents.get(k, _MISSING)
        if old is _MISSING:
            return
        if ctx.txn is not None:
            ctx.txn.undo.append(('doc', db, coll, k, old))
            ctx.txn.orig.setdefault((db, coll), {}).setdefault(k, old)
        del store._documents[k]
        self._maps_replace(db, coll, k, old, _MISSING)

    def _match(self, db, coll, store, flt, ctx=None):
        """Stored documents matching flt (never mutate them: copy first).

        With ctx.outside set (a read outside another session's open transaction), the
        committed state is read: the transaction's touched documents in their original form.
        """
        flt = flt or {}
        view = None
        if ctx is not None and ctx.outside is not None:
            view = ctx.outside.orig.get((db, coll))
        if view:
            return self._match_view(store, flt, view)
        docs = store._documents
        candidates = None
        if '_id' in flt:
            v = flt['_id']
            if _is_plain(v):
                d = docs.get(_skey(v))
                candidates = [d] if d is not None else []
            elif isinstance(v, dict) and len(v) == 1 and '$eq' in v and _is_plain(v['$eq']):
                d = docs.get(_skey(v['$eq']))
                candidates = [d] if d is not None else []
            elif (isinstance(v, dict) and len(v) == 1 and isinstance(v.get('$in'), list)
                  and all(_is_plain(x) for x in v['$in'])):
                seen = set()
                candidates = []
                for x in v['$in']:
                    sk = _skey(x)
                    try:
                        if sk in seen:
                            continue
                        seen.add(sk)
                    except TypeError:
                        pass
                    d = docs.get(sk)
                    if d is not None:
                        candidates.append(d)
        if candidates is None and store.indexes:
            candidates, exact = self._index_candidates(db, coll, store, flt)
            if exact:
                return candidates
        if candidates is None:
            candidates = list(docs.values())
            if not flt:
                return candidates
        return [d for d in candidates if filtering.filter_applies(flt, d)]

    def _index_candidates(self, db, coll, store, flt):
        """Candidates from an index whose fields all have equality conditions, or None."""
        best = None
        exact = False
        for ix in self._indexes(db, coll, store):
            if ix.pfe is not None:
                continue
            per_field = []
            for f in ix.fields:
                if f not in flt:
                    break
                v = flt[f]
                if isinstance(v, dict) and len(v) == 1 and '$eq' in v:
                    v = v['$eq']
                    vals = [v]
                elif (isinstance(v, dict) and len(v) == 1 and isinstance(v.get('$in'), list)
                      and len(ix.fields) == 1):
                    vals = v['$in']
                else:
                    vals = [v]
                if not all(_is_plain(x) and not isinstance(x, dict) and x is not None
                           for x in vals):
                    break
                per_field.append(vals)
            else:
                keys = {}
                for combo in itertools.product(*per_field):
                    for k in ix.map.get(tuple(_hk(x) for x in combo), ()):
                        keys[k] = None
                if best is None or len(keys) < len(best):
                    best = keys
                    # Hash equality on scalars is MongoDB equality: no need to re-filter.
                    exact = len(flt) == len(ix.fields)
                    if ix.unique or not best:
                        break
        if best is None:
            return None, False
        docs = store._documents
        return [docs[k] for k in best if k in docs], exact

    def _match_view(self, store, flt, view):
        docs = store._documents
        out = None
        if '_id' in flt and _is_plain(flt['_id']):
            k = _skey(flt['_id'])
            d = view[k] if k in view else docs.get(k, _MISSING)
            out = [d] if d is not _MISSING and d is not None else []
        if out is None:
            out = []
            for k, d in docs.items():
                if k in view:
                    d = view[k]
                    if d is _MISSING:
                        continue
                out.append(d)
            for k, d in view.items():
                if d is not _MISSING and k not in docs:
                    out.append(d)
        return [d for d in out if filtering.filter_applies(flt, d)]

    # ------------------------------------------------------------ plain commands

    def cmd_ok(self, cmd, ctx):
        return OrderedDict(ok=1.0)

    def cmd_ping(self, cmd, ctx):
        return OrderedDict(ok=1.0)

    def cmd_build_info(self, cmd, ctx):
        return OrderedDict([
            ('version', SERVER_VERSION), ('gitVersion', 'emulator'),
            ('versionArray', [7, 0, 0, 0]), ('bits', 64), ('debug', False),
            ('maxBsonObjectSize', MAX_BSON_OBJECT_SIZE), ('storageEngines', ['emulator']),
            ('ok', 1.0)])

    def me(self):
        return '%s:%d' % (self.host, self.port)

    def cmd_hello(self, cmd, ctx):
        name = next(iter(cmd))
        r = OrderedDict()
        if name.lower() == 'ismaster':
            r['ismaster'] = True
        if cmd.get('helloOk'):
            r['helloOk'] = True
        r['isWritablePrimary'] = True
        # No topologyVersion: it would make the driver use streaming (exhaust) hellos.
        if self.replset:
            r['setName'] = self.replset
            r['setVersion'] = 1
            r['hosts'] = [self.me()]
            r['primary'] = self.me()
            r['me'] = self.me()
            r['electionId'] = self.election_id
            r['secondary'] = False
        r['maxBsonObjectSize'] = MAX_BSON_OBJECT_SIZE
        r['maxMessageSizeBytes'] = MAX_MESSAGE_SIZE
        r['maxWriteBatchSize'] = MAX_WRITE_BATCH_SIZE
        r['localTime'] = datetime.datetime.now(datetime.timezone.utc)
        r['logicalSessionTimeoutMinutes'] = 30
        r['connectionId'] = ctx.conn.id
        r['minWireVersion'] = 0
        r['maxWireVersion'] = MAX_WIRE_VERSION
        r['readOnly'] = False
        r['ok'] = 1.0
        return r

    def cmd_end_sessions(self, cmd, ctx):
        ids = cmd.get('endSessions') or []
        for lsid in ids:
            lkey = _lsid_key({'lsid': lsid})
            t = self.txn
            if t is not None and t.lkey == lkey:
                self._rollback(t, 'endSessions')
            self.finished.pop(lkey, None)
        return OrderedDict(ok=1.0)

    def cmd_get_parameter(self, cmd, ctx):
        return OrderedDict([('featureCompatibilityVersion', {'version': '7.0'}), ('ok', 1.0)])

    def cmd_whatsmyuri(self, cmd, ctx):
        return OrderedDict([('you', ctx.conn.peer), ('ok', 1.0)])

    def cmd_connection_status(self, cmd, ctx):
        return OrderedDict([('authInfo', {'authenticatedUsers': [],
                                          'authenticatedUserRoles': []}), ('ok', 1.0)])

    def cmd_server_status(self, cmd, ctx):
        return OrderedDict([
            ('host', self.me()), ('version', SERVER_VERSION), ('process', 'mongod'),
            ('uptime', float(time.time() - self.started)),
            ('localTime', datetime.datetime.now(datetime.timezone.utc)),
            ('emulator', {k: Int64(v) for k, v in self.stats.items()}),
            ('ok', 1.0)])

    def cmd_cmdline(self, cmd, ctx):
        return OrderedDict([('argv', ['mongod']), ('parsed', {}), ('ok', 1.0)])

    def cmd_get_log(self, cmd, ctx):
        return OrderedDict([('totalLinesWritten', 0), ('log', []), ('ok', 1.0)])

    def cmd_emulator_outage(self, cmd, ctx):
        """{emulatorOutage: <ms>} on admin: reply ok, then act like a server that is lost for
        <ms> milliseconds and comes back with its data (see EmulatorServer.start_outage)."""
        if ctx.db != 'admin':
            raise CmdError(13, 'Unauthorized',
                           'emulatorOutage may only be run against the admin database.')
        ms = cmd.get('emulatorOutage')
        if (not isinstance(ms, numbers.Number) or isinstance(ms, bool) or ms != ms
                or not 0 <= ms <= 600000):
            raise CmdError(2, 'BadValue',
                           'emulatorOutage takes a duration in milliseconds (0 to 600000), '
                           'not %s' % _fmt(ms))
        if self.outage_hook is None:
            raise CmdError(238, 'NotImplemented', 'no server to take down')
        hook = self.outage_hook
        ctx.conn.after_reply = lambda: hook(float(ms) / 1000.0)
        return OrderedDict([('outageMs', float(ms)), ('ok', 1.0)])

    def cmd_list_commands(self, cmd, ctx):
        return OrderedDict([('commands', {k: {} for k in sorted(self.handlers)}), ('ok', 1.0)])

    # ------------------------------------------------------------ cursors

    def _batch(self, docs, start, batch_size):
        """Return (batch, next_pos)."""
        end = len(docs) if not batch_size else min(len(docs), start + batch_size)
        batch = []
        total = 0
        pos = start
        while pos < end:
            d = docs[pos]
            total += len(bson.encode(d)) if len(docs) > 200 else 0
            if batch and total > BATCH_BYTES:
                break
            batch.append(d)
            pos += 1
        return batch, pos

    def _cursor_reply(self, ns, docs, batch_size, single_batch):
        if batch_size is None:
            batch_size = DEFAULT_BATCH_SIZE
        batch_size = int(batch_size)
        if batch_size < 0:
            raise CmdError(51024, 'BadValue', 'BatchSize value must be non-negative')
        if batch_size == 0 and not single_batch:
            batch, pos = [], 0
        else:
            batch, pos = self._batch(docs, 0, batch_size)
        cid = 0
        if pos < len(docs) and not single_batch:
            cid = random.getrandbits(62) + 1
            cur = Cursor(ns, docs)
            cur.pos = pos
            self.cursors[cid] = cur
        return OrderedDict([
            ('cursor', OrderedDict([('firstBatch', batch), ('id', Int64(cid)), ('ns', ns)])),
            ('ok', 1.0)])

    def cmd_get_more(self, cmd, ctx):
        cid = int(cmd['getMore'])
        coll = cmd.get('collection')
        cur = self.cursors.get(cid)
        if cur is None:
            raise CmdError(43, 'CursorNotFound', 'cursor id %d not found' % cid)
        if coll and cur.ns != '%s.%s' % (ctx.db, coll):
            raise CmdError(13, 'Unauthorized',
                           'Requested getMore on namespace %s.%s, but cursor belongs to %s'
                           % (ctx.db, coll, cur.ns))
        batch, pos = self._batch(cur.docs, cur.pos, cmd.get('batchSize'))
        cur.pos = pos
        cur.last_used = time.monotonic()
        out_id = cid
        if pos >= len(cur.docs):
            del self.cursors[cid]
            out_id = 0
        return OrderedDict([
            ('cursor', OrderedDict([('nextBatch', batch), ('id', Int64(out_id)),
                                    ('ns', cur.ns)])),
            ('ok', 1.0)])

    def cmd_kill_cursors(self, cmd, ctx):
        killed, not_found = [], []
        for cid in cmd.get('cursors') or []:
            if self.cursors.pop(int(cid), None) is not None:
                killed.append(Int64(cid))
            else:
                not_found.append(Int64(cid))
        return OrderedDict([('cursorsKilled', killed), ('cursorsNotFound', not_found),
                            ('cursorsAlive', []), ('cursorsUnknown', []), ('ok', 1.0)])

    # ------------------------------------------------------------ reads

    def _project(self, mcoll, doc, projection):
        if not projection:
            return doc  # stored documents are never mutated in place
        return mcoll._copy_only_fields(doc, projection, OrderedDict)

    def cmd_find(self, cmd, ctx):
        coll = cmd['find']
        db = ctx.db
        store = self._store(db, coll)
        flt = cmd.get('filter') or {}
        docs = self._match(db, coll, store, flt, ctx)
        sort = cmd.get('sort')
        if sort:
            docs = _sort_docs(docs, sort)
        skip = int(cmd.get('skip') or 0)
        if skip < 0:
            raise CmdError(51024, 'BadValue', 'skip value must be non-negative')
        limit = int(cmd.get('limit') or 0)
        single = bool(cmd.get('singleBatch'))
        if limit < 0:
            limit, single = -limit, True
        if skip:
            docs = docs[skip:]
        if limit:
            docs = docs[:limit]
        projection = cmd.get('projection')
        mcoll = self._mm_coll(db, coll)
        docs = [self._project(mcoll, d, projection) for d in docs]
        batch_size = cmd.get('batchSize')
        if limit and (batch_size is None or batch_size > limit):
            batch_size = limit
        return self._cursor_reply('%s.%s' % (db, coll), docs, batch_size, single)

    def _aggregate_docs(self, db, coll, pipeline, ctx):
        store = self._store(db, coll)
        stages = list(pipeline)
        flt = {}
        if stages and len(stages[0]) == 1 and '$match' in stages[0]:
            flt = stages.pop(0)['$match']
        docs = self._match(db, coll, store, flt, ctx)
        # Leading stages that need no copy (count_documents' pipeline ends here).
        while stages and len(stages[0]) == 1:
            op, arg = next(iter(stages[0].items()))
            last = len(stages) == 1
            if op == '$sort' and isinstance(arg, dict):
                docs = _sort_docs(docs, arg)
            elif op == '$skip':
                docs = docs[int(arg):]
            elif op == '$limit':
                docs = docs[:int(arg)]
            elif op == '$count' and last and isinstance(arg, str):
                return [OrderedDict([(arg, len(docs))])] if docs else []
            elif op == '$group' and last and _is_count_group(arg):
                name = [k for k in arg if k != '_id'][0]
                return [OrderedDict([('_id', arg['_id']), (name, len(docs))])] if docs else []
            else:
                break
            stages.pop(0)
        docs = copy.deepcopy(docs)
        for stage in stages:
            for op in stage:
                if op in ('$out', '$merge'):
                    raise CmdError(238, 'NotImplemented', '%s is not supported by the emulator'
                                   % op)
        result = mm_aggregate.process_pipeline(docs, self._mm_coll(db, coll).database, stages,
                                               None)
        out = []
        for d in result:
            if isinstance(d, dict) and '_id' in d and next(iter(d)) != '_id':
                d = OrderedDict([('_id', d['_id'])] + [(k, v) for k, v in d.items() if k != '_id'])
            out.append(d)
        return out

    def cmd_aggregate(self, cmd, ctx):
        coll = cmd['aggregate']
        if not isinstance(coll, str):
            raise CmdError(238, 'NotImplemented', 'database-level aggregate is not supported')
        if 'cursor' not in cmd and not cmd.get('explain'):
            raise CmdError(9, 'FailedToParse',
                           "The 'cursor' option is required, except for aggregate with the "
                           'explain argument')
        docs = self._aggregate_docs(ctx.db, coll, cmd.get('pipeline') or [], ctx)
        batch_size = (cmd.get('cursor') or {}).get('batchSize')
        return self._cursor_reply('%s.%s' % (ctx.db, coll), docs, batch_size, False)

    def cmd_count(self, cmd, ctx):
        coll = cmd['count']
        docs = self._match(ctx.db, coll, self._store(ctx.db, coll), cmd.get('query') or {}, ctx)
        n = len(docs)
        skip = int(cmd.get('skip') or 0)
        n = max(0, n - skip)
        limit = abs(int(cmd.get('limit') or 0))
        if limit:
            n = min(n, limit)
        return OrderedDict([('n', n), ('ok', 1.0)])

    def cmd_distinct(self, cmd, ctx):
        coll = cmd['distinct']
        key = cmd['key']
        docs = self._match(ctx.db, coll, self._store(ctx.db, coll), cmd.get('query') or {}, ctx)
        values = []
        seen = set()
        for d in docs:
            try:
                v = helpers.get_value_by_dot(d, key)
            except (KeyError, IndexError, TypeError, AttributeError):
                continue
            for x in (v if isinstance(v, list) else [v]):
                hk = _hk(x)
                if hk not in seen:
                    seen.add(hk)
                    values.append(x)
        return OrderedDict([('values', values), ('ok', 1.0)])

    # ------------------------------------------------------------ writes

    def cmd_insert(self, cmd, ctx):
        db, coll = ctx.db, cmd['insert']
        docs = cmd.get('documents') or []
        ordered = cmd.get('ordered', True)
        store = self._ensure_created(ctx, db, coll)
        n = 0
        errors = []
        for i, doc in enumerate(docs):
            try:
                self._insert_doc(ctx, db, coll, store, doc)
                n += 1
            except Exception as exc:  # noqa: BLE001
                errors.append(_write_error(i, _convert_exception(exc)))
                if ordered:
                    break
        reply = OrderedDict([('n', n)])
        if errors:
            reply['writeErrors'] = errors
        reply['ok'] = 1.0
        return reply

    def _insert_doc(self, ctx, db, coll, store, doc):
        if not isinstance(doc, dict):
            raise CmdError(2, 'BadValue', 'document must be a document')
        if '_id' not in doc:
            doc = OrderedDict([('_id', ObjectId())] + list(doc.items()))
        elif next(iter(doc)) != '_id':
            doc = OrderedDict([('_id', doc['_id'])] + [(k, v) for k, v in doc.items()
                                                       if k != '_id'])
        _id = doc['_id']
        if isinstance(_id, list):
            raise CmdError(2, 'BadValue', "can't use an array for _id")
        if isinstance(_id, bson.Regex) or isinstance(_id, re.Pattern):
            raise CmdError(2, 'BadValue', "can't use a regex for _id")
        for k in doc:
            if k.startswith('$'):
                raise CmdError(2, 'BadValue', "Document can't have $ prefixed field names: %s"
                               % k)
        k = _skey(_id)
        if k in store._documents:
            raise dup_key_error(db, coll, '_id_', [('_id', 1)], OrderedDict(_id=_id))
        self._check_unique(db, coll, store, doc, k)
        self._put(ctx, db, coll, store, k, doc)
        return doc

    def _apply_update(self, mcoll, old, q, u, was_insert):
        """A new document: old with the update u applied (old is not modified)."""
        if isinstance(u, list):
            new = copy.deepcopy(old)
            mcoll._apply_update_pipeline(new, u, None)
        elif _is_replacement(u):
            new = OrderedDict()
            if '_id' in old:
                new['_id'] = old['_id']
            for k, v in u.items():
                if k == '_id':
                    if '_id' in old and not _same_key(_skey(v), _skey(old['_id'])):
                        raise _immutable_id(v)
                    new['_id'] = copy.deepcopy(v)
                    continue
                if k.startswith('$'):
                    raise CmdError(2, 'BadValue', "The dollar ($) prefixed field '%s' in '%s' "
                                   'is not allowed in the context of an update\'s replacement '
                                   'document.' % (k, k))
                new[k] = copy.deepcopy(v)
            return new
        else:
            for op, spec in u.items():
                if op not in UPDATE_OPERATORS:
                    raise CmdError(9, 'FailedToParse',
                                   'Unknown modifier: %s. Expected a valid update modifier or '
                                   'pipeline-style update specified as an array' % op)
                if not isinstance(spec, dict):
                    raise CmdError(9, 'FailedToParse',
                                   'Modifiers operate on fields but we found type %s instead.'
                                   % type(spec).__name__)
            new = copy.deepcopy(old)
            mcoll._apply_update_document(new, q, u, was_insert)
        if '_id' in old and ('_id' not in new or not _same_key(_skey(new['_id']),
                                                                _skey(old['_id']))):
            raise _immutable_id(new.get('_id'))
        return new

    def _upsert_doc(self, mcoll, q, u):
        if isinstance(u, dict) and _is_replacement(u):
            _id = _MISSING
            if '_id' in u:
                _id = u['_id']
            elif '_id' in q and _is_plain(q['_id']):
                _id = q['_id']
            new = OrderedDict([('_id', ObjectId() if _id is _MISSING else copy.deepcopy(_id))])
            for k, v in u.items():
                if k != '_id':
                    new[k] = copy.deepcopy(v)
            return new
        base = {}
        for k, v in (q or {}).items():
            if k.startswith('$'):
                if k == '$and':
                    for sub in v:
                        for k2, v2 in sub.items():
                            if not k2.startswith('$'):
                                base[k2] = v2
                continue
            base[k] = v
        base = mcoll._expand_dots(base)
        base, _ = mcoll._discard_operators(base)
        base = copy.deepcopy(base)
        _id = base.pop('_id', _MISSING)
        if _id is _MISSING or isinstance(_id, dict) and any(
                str(x).startswith('$') for x in _id):
            _id = _MISSING
        doc = OrderedDict()
        if _id is not _MISSING:
            doc['_id'] = _id
        doc.update(base)
        new = self._apply_update(mcoll, doc, q, u, True)
        if '_id' not in new:
            new = OrderedDict([('_id', ObjectId())] + list(new.items()))
        elif next(iter(new)) != '_id':
            new = OrderedDict([('_id', new['_id'])] + [(k, v) for k, v in new.items()
                                                       if k != '_id'])
        return new

    def _update_one_statement(self, ctx, db, coll, stmt):
        q = stmt.get('q') or {}
        u = stmt.get('u')
        if u is None:
            raise CmdError(9, 'FailedToParse', "BSON field 'update.updates.u' is missing")
        multi = bool(stmt.get('multi'))
        upsert = bool(stmt.get('upsert'))
        if stmt.get('arrayFilters'):
            raise CmdError(238, 'NotImplemented', 'arrayFilters are not supported by the emulator')
        if multi and isinstance(u, dict) and _is_replacement(u) and u:
            raise CmdError(9, 'FailedToParse', 'multi update is not supported for '
                           'replacement-style update')
        store = self._store(db, coll)
        mcoll = self._mm_coll(db, coll)
        matched = self._match(db, coll, store, q)
        if not multi:
            matched = matched[:1]
        n = n_modified = 0
        for old in matched:
            new = self._apply_update(mcoll, old, q, u, False)
            n += 1
            if new != old or _types_differ(new, old):
                k = _skey(old['_id'])
                self._check_unique(db, coll, store, new, k)
                self._put(ctx, db, coll, store, k, new)
                n_modified += 1
        if n == 0 and upsert:
            new = self._upsert_doc(mcoll, q, u)
            store = self._ensure_created(ctx, db, coll)
            self._insert_doc(ctx, db, coll, store, new)
            return 1, 0, new['_id']
        return n, n_modified, _MISSING

    def cmd_update(self, cmd, ctx):
        db, coll = ctx.db, cmd['update']
        ordered = cmd.get('ordered', True)
        n = n_modified = 0
        upserted = []
        errors = []
        for i, stmt in enumerate(cmd.get('updates') or []):
            try:
                m, mod, up_id = self._update_one_statement(ctx, db, coll, stmt)
                n += m
                n_modified += mod
                if up_id is not _MISSING:
                    upserted.append(OrderedDict([('index', i), ('_id', up_id)]))
            except Exception as exc:  # noqa: BLE001
                errors.append(_write_error(i, _convert_exception(exc)))
                if ordered:
                    break
        reply = OrderedDict([('n', n), ('nModified', n_modified)])
        if upserted:
            reply['upserted'] = upserted
        if errors:
            reply['writeErrors'] = errors
        reply['ok'] = 1.0
        return reply

    def cmd_delete(self, cmd, ctx):
        db, coll = ctx.db, cmd['delete']
        ordered = cmd.get('ordered', True)
        store = self._store(db, coll)
        n = 0
        errors = []
        for i, stmt in enumerate(cmd.get('deletes') or []):
            try:
                matched = self._match(db, coll, store, stmt.get('q') or {})
                if int(stmt.get('limit', 0) or 0) == 1:
                    matched = matched[:1]
                for d in matched:
                    self._remove(ctx, db, coll, store, _skey(d['_id']))
                    n += 1
            except Exception as exc:  # noqa: BLE001
                errors.append(_write_error(i, _convert_exception(exc)))
                if ordered:
                    break
        reply = OrderedDict([('n', n)])
        if errors:
            reply['writeErrors'] = errors
        reply['ok'] = 1.0
        return reply

    def cmd_find_and_modify(self, cmd, ctx):
        db = ctx.db
        coll = cmd[next(iter(cmd))]
        q = cmd.get('query') or {}
        sort = cmd.get('sort')
        remove = bool(cmd.get('remove'))
        u = cmd.get('update')
        return_new = bool(cmd.get('new'))
        upsert = bool(cmd.get('upsert'))
        projection = cmd.get('fields')
        if cmd.get('arrayFilters'):
            raise CmdError(238, 'NotImplemented', 'arrayFilters are not supported by the emulator')
        if remove and u is not None:
            raise CmdError(9, 'FailedToParse', 'Cannot specify both an update and remove=true')
        if not remove and u is None:
            raise CmdError(9, 'FailedToParse', 'Either an update or remove=true must be specified')
        if remove and (return_new or upsert):
            raise CmdError(9, 'FailedToParse', 'Cannot specify both new=true and remove=true; '
                           "'remove' always returns the deleted document")
        store = self._store(db, coll)
        mcoll = self._mm_coll(db, coll)
        matched = self._match(db, coll, store, q)
        if sort and len(matched) > 1:
            matched = _sort_docs(matched, sort)
        target = matched[0] if matched else None
        leo = OrderedDict()
        value = None
        if remove:
            if target is not None:
                self._remove(ctx, db, coll, store, _skey(target['_id']))
                value = target
            leo['n'] = 1 if target is not None else 0
        elif target is not None:
            new = self._apply_update(mcoll, target, q, u, False)
            if new != target or _types_differ(new, target):
                k = _skey(target['_id'])
                self._check_unique(db, coll, store, new, k)
                self._put(ctx, db, coll, store, k, new)
            value = new if return_new else target
            leo['n'] = 1
            leo['updatedExisting'] = True
        elif upsert:
            new = self._upsert_doc(mcoll, q, u)
            store = self._ensure_created(ctx, db, coll)
            self._insert_doc(ctx, db, coll, store, new)
            value = new if return_new else None
            leo['n'] = 1
            leo['updatedExisting'] = False
            leo['upserted'] = new['_id']
        else:
            leo['n'] = 0
            leo['updatedExisting'] = False
        if value is not None:
            value = self._project(mcoll, value, projection)
        return OrderedDict([('lastErrorObject', leo), ('value', value), ('ok', 1.0)])

    # ------------------------------------------------------------ DDL / catalog

    def cmd_list_collections(self, cmd, ctx):
        dbs = self.server_store[ctx.db]
        out = []
        for name in sorted(dbs.list_created_collection_names()):
            doc = OrderedDict([
                ('name', name), ('type', 'collection'), ('options', {}),
                ('info', OrderedDict([('readOnly', False)])),
                ('idIndex', OrderedDict([('v', 2), ('key', {'_id': 1}), ('name', '_id_')]))])
            if cmd.get('nameOnly'):
                doc = OrderedDict([('name', name), ('type', 'collection')])
            flt = cmd.get('filter')
            if flt and not filtering.filter_applies(flt, doc):
                continue
            out.append(doc)
        batch = (cmd.get('cursor') or {}).get('batchSize')
        return self._cursor_reply('%s.$cmd.listCollections' % ctx.db, out, batch, False)

    def cmd_list_indexes(self, cmd, ctx):
        coll = cmd['listIndexes']
        store = self._store(ctx.db, coll)
        if not store.is_created:
            raise CmdError(26, 'NamespaceNotFound', 'ns does not exist: %s.%s' % (ctx.db, coll))
        out = [OrderedDict([('v', 2), ('key', OrderedDict(_id=1)), ('name', '_id_')])]
        for name, spec in store.indexes.items():
            doc = OrderedDict([('v', 2), ('key', OrderedDict(spec['key'])), ('name', name)])
            for opt in ('unique', 'sparse', 'partialFilterExpression', 'expireAfterSeconds'):
                if opt in spec:
                    doc[opt] = spec[opt]
            out.append(doc)
        batch = (cmd.get('cursor') or {}).get('batchSize')
        return self._cursor_reply('%s.%s' % (ctx.db, coll), out, batch, False)

    def cmd_list_databases(self, cmd, ctx):
        out = []
        for name in sorted(self.server_store.list_created_database_names()):
            if cmd.get('nameOnly'):
                doc = OrderedDict(name=name)
            else:
                doc = OrderedDict([('name', name), ('sizeOnDisk', Int64(0)), ('empty', False)])
            flt = cmd.get('filter')
            if flt and not filtering.filter_applies(flt, doc):
                continue
            out.append(doc)
        reply = OrderedDict(databases=out)
        if not cmd.get('nameOnly'):
            reply['totalSize'] = Int64(0)
            reply['totalSizeMb'] = Int64(0)
        reply['ok'] = 1.0
        return reply

    def cmd_create(self, cmd, ctx):
        coll = cmd['create']
        store = self._store(ctx.db, coll)
        if store.is_created:
            raise CmdError(48, 'NamespaceExists',
                           'Collection %s.%s already exists.' % (ctx.db, coll))
        self._ensure_created(ctx, ctx.db, coll)
        return OrderedDict(ok=1.0)

    def cmd_drop(self, cmd, ctx):
        coll = cmd['drop']
        store = self._store(ctx.db, coll)
        n_indexes = 1 + len(store.indexes)
        existed = bool(store.is_created)
        store.drop()
        self.indexes.pop((ctx.db, coll), None)
        reply = OrderedDict()
        if existed:
            reply['nIndexesWas'] = n_indexes
            reply['ns'] = '%s.%s' % (ctx.db, coll)
        reply['ok'] = 1.0
        return reply

    def cmd_drop_database(self, cmd, ctx):
        dbs = self.server_store[ctx.db]
        for name in list(dbs._collections):
            dbs._collections[name].drop()
            self.indexes.pop((ctx.db, name), None)
        dbs._collections.clear()
        return OrderedDict([('dropped', ctx.db), ('ok', 1.0)])

    def cmd_create_indexes(self, cmd, ctx):
        db, coll = ctx.db, cmd['createIndexes']
        specs = cmd.get('indexes') or []
        if not specs:
            raise CmdError(2, 'BadValue', 'Must specify at least one index to create')
        store = self._store(db, coll)
        created_automatically = not store.is_created
        before = 1 + len(store.indexes)
        self._log_meta(ctx, db, coll, store)
        new_indexes = dict(store.indexes)
        to_add = []
        for spec in specs:
            key = spec.get('key')
            name = spec.get('name')
            if not isinstance(key, dict) or not key:
                raise CmdError(67, 'CannotCreateIndex', "Index keys cannot be empty.")
            key_list = [(f, d) for f, d in key.items()]
            if not name:
                name = helpers.gen_index_name(key_list)
            norm = OrderedDict([('key', key_list)])
            for opt in ('unique', 'sparse'):
                if spec.get(opt):
                    norm[opt] = True
            for opt in ('partialFilterExpression', 'expireAfterSeconds'):
                if spec.get(opt) is not None:
                    norm[opt] = spec[opt]
            if name == '_id_' or key_list == [('_id', 1)]:
                continue
            existing = new_indexes.get(name)
            if existing is not None:
                if _same_index(existing, norm):
                    continue
                if list(existing['key']) != key_list:
                    raise CmdError(86, 'IndexKeySpecsConflict',
                                   'An existing index has the same name as the requested index '
                                   'but different key specs. Requested index: %s, existing '
                                   'index: %s' % (_fmt(dict(norm)), _fmt(dict(existing))))
                raise CmdError(85, 'IndexOptionsConflict',
                               'An equivalent index already exists with the same name but '
                               'different options. Requested index: %s, existing index: %s'
                               % (_fmt(dict(norm)), _fmt(dict(existing))))
            same_key = [n for n, s in new_indexes.items() if list(s['key']) == key_list]
            if same_key:
                other = new_indexes[same_key[0]]
                if _same_index(other, norm):
                    raise CmdError(85, 'IndexOptionsConflict',
                                   'Index already exists with a different name: %s'
                                   % same_key[0])
                raise CmdError(85, 'IndexOptionsConflict',
                               'An equivalent index already exists with a different name and '
                               'options. Requested index: %s, existing index: %s'
                               % (_fmt(dict(norm)), _fmt(dict(other))))
            if norm.get('unique'):
                ix = Index(name, norm)
                for k, doc in store._documents.items():
                    for hk, kv in ix.keys_of(doc):
                        if hk in ix.map:
                            raise dup_key_error(db, coll, name, key_list, kv)
                        ix.map[hk] = {k: None}
            new_indexes[name] = norm
            to_add.append(name)
        if not store._is_force_created:
            store._is_force_created = True
        store.indexes = new_indexes
        self.indexes.pop((db, coll), None)
        reply = OrderedDict([
            ('numIndexesBefore', before), ('numIndexesAfter', 1 + len(new_indexes)),
            ('createdCollectionAutomatically', bool(created_automatically))])
        if not to_add:
            reply['note'] = 'all indexes already exist'
        reply['ok'] = 1.0
        return reply

    def cmd_drop_indexes(self, cmd, ctx):
        db, coll = ctx.db, cmd['dropIndexes']
        store = self._store(db, coll)
        if not store.is_created:
            raise CmdError(26, 'NamespaceNotFound', 'ns not found %s.%s' % (db, coll))
        which = cmd.get('index')
        before = 1 + len(store.indexes)
        if which == '*':
            store.indexes = {}
        else:
            names = which if isinstance(which, list) else [which]
            for w in names:
                if isinstance(w, dict):
                    kl = list(w.items())
                    match = [n for n, s in store.indexes.items() if list(s['key']) == kl]
                    if not match:
                        raise CmdError(27, 'IndexNotFound', "can't find index with key: %s"
                                       % _fmt(w))
                    w = match[0]
                if w == '_id_':
                    raise CmdError(72, 'InvalidOptions', 'cannot drop _id index')
                if w not in store.indexes:
                    raise CmdError(27, 'IndexNotFound', 'index not found with name [%s]' % w)
                new = dict(store.indexes)
                del new[w]
                store.indexes = new
        self.indexes.pop((db, coll), None)
        return OrderedDict([('nIndexesWas', before), ('ok', 1.0)])

    def cmd_rename_collection(self, cmd, ctx):
        src, dst = cmd['renameCollection'], cmd.get('to')
        sdb, sname = src.split('.', 1)
        ddb, dname = dst.split('.', 1)
        if sdb != ddb:
            raise CmdError(238, 'NotImplemented', 'renaming across databases is not supported')
        dbs = self.server_store[sdb]
        if not dbs[sname].is_created:
            raise CmdError(26, 'NamespaceNotFound', 'Source collection %s does not exist' % src)
        if dbs[dname].is_created:
            if not cmd.get('dropTarget'):
                raise CmdError(48, 'NamespaceExists', 'target namespace exists')
            dbs[dname].drop()
        dbs._collections.pop(dname, None)
        dbs.rename(sname, dname)
        self.indexes.pop((sdb, sname), None)
        self.indexes.pop((sdb, dname), None)
        return OrderedDict(ok=1.0)

    def cmd_db_stats(self, cmd, ctx):
        dbs = self.server_store[ctx.db]
        names = dbs.list_created_collection_names()
        objects = sum(len(dbs[n]._documents) for n in names)
        return OrderedDict([('db', ctx.db), ('collections', len(names)), ('objects', objects),
                            ('dataSize', 0.0), ('storageSize', 0.0), ('ok', 1.0)])

    def cmd_coll_stats(self, cmd, ctx):
        coll = cmd['collStats']
        store = self._store(ctx.db, coll)
        return OrderedDict([('ns', '%s.%s' % (ctx.db, coll)), ('count', len(store._documents)),
                            ('size', 0), ('nindexes', 1 + len(store.indexes)), ('ok', 1.0)])


# ------------------------------------------------------------------ helpers

def _write_error(index, err):
    out = OrderedDict([('index', index)])
    out.update(err.fields())
    return out


def _immutable_id(new_id):
    return CmdError(66, 'ImmutableField',
                    "After applying the update, the (immutable) field '_id' was found to have "
                    'been altered to _id: %s' % _fmt(new_id))


def _is_replacement(u):
    return isinstance(u, dict) and not any(k.startswith('$') for k in u)


def _is_plain(v):
    """A value usable for an equality lookup."""
    if isinstance(v, (list, bson.Regex, re.Pattern)):
        return False
    if isinstance(v, dict):
        return not any(str(k).startswith('$') for k in v)
    return True


def _same_key(a, b):
    try:
        return a == b and _hk(a) == _hk(b)
    except Exception:  # noqa: BLE001
        return a == b


def _types_differ(a, b):
    """True when the documents are == but some value changed type (e.g. int32 -> Int64)."""
    if isinstance(a, dict) and isinstance(b, dict):
        if list(a.keys()) != list(b.keys()):
            return True
        return any(_types_differ(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return any(_types_differ(x, y) for x, y in zip(a, b))
    return type(a) is not type(b)


def _same_index(a, b):
    def norm(s):
        return (list(s['key']), bool(s.get('unique')), bool(s.get('sparse')),
                s.get('partialFilterExpression'), s.get('expireAfterSeconds'))
    return norm(a) == norm(b)


def _is_count_group(spec):
    """{_id: <constant>, n: {$sum: 1}}, as count_documents sends."""
    if not isinstance(spec, dict) or '_id' not in spec or len(spec) != 2:
        return False
    gid = spec['_id']
    if isinstance(gid, (dict, list)) or (isinstance(gid, str) and gid.startswith('$')):
        return False
    name = [k for k in spec if k != '_id'][0]
    acc = spec[name]
    return isinstance(acc, dict) and len(acc) == 1 and _is_int(acc.get('$sum')) \
        and acc.get('$sum') == 1


def _sort_docs(docs, sort):
    docs = list(docs)
    for key, direction in reversed(list(sort.items())):
        if isinstance(direction, dict):
            raise CmdError(238, 'NotImplemented', 'sort by %s is not supported' % _fmt(direction))
        if key == '$natural':
            if direction < 0:
                docs.reverse()
            continue
        docs.sort(key=lambda x, k=key: filtering.resolve_sort_key(k, x),
                  reverse=direction < 0)
    return docs


def _lsid_key(cmd):
    lsid = cmd.get('lsid')
    if not lsid:
        return None
    sid = lsid.get('id')
    try:
        return bytes(sid)
    except TypeError:
        return repr(sid)


def _txn_number(cmd):
    n = cmd.get('txnNumber')
    return int(n) if n is not None else None


def _short(cmd, limit=300):
    text = repr({k: v for k, v in cmd.items() if k not in ('lsid', '$clusterTime')})
    return text if len(text) <= limit else text[:limit] + '...'


# ------------------------------------------------------------------ server

def bind_listener(host, port):
    """A non-blocking listening socket on (host, port), with SO_REUSEADDR so that a fixed port
    just released by another process (or by our own outage) can be bound again at once, even
    while connections to it linger in TIME_WAIT."""
    family, socktype, proto, _, addr = socket.getaddrinfo(
        host, port, socket.AF_INET, socket.SOCK_STREAM, 0, socket.AI_PASSIVE)[0]
    sock = socket.socket(family, socktype, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(128)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


def bind_listener_retrying(host, port, patience):
    """bind_listener, retrying a fixed port that is still in use for up to `patience` seconds
    (a previous owner may still be exiting)."""
    deadline = time.monotonic() + patience
    while True:
        try:
            return bind_listener(host, port)
        except OSError as exc:
            if port == 0 or exc.errno != errno.EADDRINUSE or time.monotonic() >= deadline:
                raise
            time.sleep(0.05)


class EmulatorServer(mockupdb.MockupDB):
    """mockupdb's wire framing, with our own accept loop and per-connection loop.

    mockupdb's own _server_loop holds one lock around every request; we replace it so that
    a command waiting for a transaction does not block the other connections. Our accept
    loop can also stop listening for a while: see start_outage.
    """

    def __init__(self, engine, host, port):
        super().__init__(port=port, request_timeout=int(1e6))
        self._address = (host, port)
        self.engine = engine
        engine.outage_hook = self.start_outage
        self._clients = {}  # socket -> ConnState, guarded by engine.cv
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)

    def run(self):
        """Bind and start accepting. Returns the bound port."""
        host, port = self._address
        self._listening_sock = bind_listener_retrying(host, port, 3.0)
        self._address = (host, self._listening_sock.getsockname()[1])
        self._accept_thread = threading.Thread(target=self._accept_loop, name='accept',
                                               daemon=True)
        self._accept_thread.start()
        return self.port

    def close_listener(self):
        sock, self._listening_sock = self._listening_sock, None
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass

    def _wake(self):
        try:
            self._wake_w.send(b'x')
        except OSError:
            pass

    def start_outage(self, seconds):
        """Act like a server that is lost for `seconds` and then comes back with its data:
        every open client connection is closed, the open transaction is aborted and cursors
        are forgotten (as after a failover or restart), and new connections are refused (the
        port stops listening) until the time is up. Stored data is untouched."""
        engine = self.engine
        with engine.cv:
            engine.down_until = max(engine.down_until, time.monotonic() + seconds)
            engine.stats['outages'] += 1
            # No command starts from now on; let the answered ones reach their clients.
            deadline = time.monotonic() + 2.0
            while (any(c.replying for c in self._clients.values())
                   and time.monotonic() < deadline):
                engine.cv.wait(0.02)
            if engine.txn is not None:
                log.info('outage: transaction %s aborted', engine.txn.number)
                engine._rollback(engine.txn, 'server outage')
            engine.cursors.clear()
            clients = list(self._clients)
            for client in clients:
                try:
                    client.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            engine.cv.notify_all()
        log.warning('outage: %d connection(s) closed; refusing connections for %.0f ms',
                    len(clients), seconds * 1000)
        self._wake()

    def _accept_loop(self):
        host, port = self._address
        while not self._stopped:
            remaining = self.engine.down_until - time.monotonic()
            if remaining > 0:
                if self._listening_sock is not None:
                    self.close_listener()
                time.sleep(min(remaining, 0.02))
                continue
            if self._listening_sock is None:
                try:
                    self._listening_sock = bind_listener_retrying(host, port, 10.0)
                except OSError as exc:
                    log.error('outage over but port %d cannot be bound again: %s', port, exc)
                    time.sleep(0.5)
                    continue
                log.warning('outage over: accepting connections on %s:%d again', host, port)
            listening = self._listening_sock
            try:
                ready, _, _ = select.select([listening, self._wake_r], [], [], 0.5)
            except (OSError, ValueError):
                continue  # closed under us (stopping or an outage started)
            if self._wake_r in ready:
                try:
                    while self._wake_r.recv(64):
                        pass
                except OSError:
                    pass
            if listening not in ready:
                continue
            try:
                client, client_addr = listening.accept()
            except OSError:
                continue  # EAGAIN, or closed under us
            client.setblocking(True)
            threading.Thread(target=self._server_loop, args=(client, client_addr),
                             daemon=True).start()

    def _server_loop(self, client, client_addr):
        conn = ConnState('%s:%d' % tuple(client_addr[:2]))
        with self.engine.cv:
            if self.engine.is_down():
                # Accepted just before the listener closed: lost like the others.
                client.close()
                return
            self._clients[client] = conn
        try:
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
        log.debug('conn%d accepted from %s', conn.id, conn.peer)
        try:
            while not self._stopped:
                try:
                    request = mockupdb.mock_server_receive_request(client, self)
                except (OSError, socket.error):
                    break
                except Exception:  # noqa: BLE001 - unparseable message: drop the connection
                    log.exception('conn%d: bad message, closing', conn.id)
                    break
                if isinstance(request, mockupdb.OpMsg):
                    reply = self.engine.handle(request.doc, conn)
                    if reply is None:
                        break  # outage: dropped unanswered
                    if request.flags & mockupdb.OP_MSG_FLAGS['moreToCome']:
                        self.engine.reply_sent(conn)
                        continue  # unacknowledged write: no reply
                    data = mockupdb.OpMsgReply(reply).reply_bytes(request)
                elif isinstance(request, mockupdb.Command):
                    doc = request.doc
                    if '$query' in doc:
                        doc = doc['$query']
                    doc = OrderedDict(doc)
                    doc.setdefault('$db', request.namespace)
                    reply = self.engine.handle(doc, conn)
                    if reply is None:
                        break
                    data = mockupdb.OpReply(reply).reply_bytes(request)
                else:
                    log.warning('conn%d: unsupported legacy opcode %r, closing', conn.id,
                                type(request).__name__)
                    break
                try:
                    client.sendall(data)
                except OSError:
                    break
                finally:
                    self.engine.reply_sent(conn)
                if conn.after_reply is not None:
                    action, conn.after_reply = conn.after_reply, None
                    action()
        finally:
            log.debug('conn%d closed', conn.id)
            with self.engine.cv:
                self._clients.pop(client, None)
                conn.replying = False
                self.engine.cv.notify_all()
            self.engine.connection_closed(conn)
            try:
                client.close()
            except OSError:
                pass


def _stdin_is_pipe():
    import stat
    try:
        mode = os.fstat(0).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--port', type=int, default=0, help='port (0 = ephemeral)')
    ap.add_argument('--host', default='127.0.0.1', help='address to bind (and advertise)')
    ap.add_argument('--replset', default='rs0',
                    help='replica set name reported in hello ("" = standalone-like)')
    ap.add_argument('--txn-timeout', type=float, default=5.0,
                    help='abort a transaction idle for this many seconds')
    ap.add_argument('--txn-wait-ms', type=float, default=50.0,
                    help='how long a second transaction waits for the open one before '
                         'WriteConflict')
    ap.add_argument('--exit-on-stdin-eof', action='store_true',
                    help='exit when stdin is closed (ties the emulator to its parent process); '
                         'the default when stdin is a pipe or socket')
    ap.add_argument('--ignore-stdin', action='store_true',
                    help='never watch stdin, even when it is a pipe')
    ap.add_argument('-v', '--verbose', action='store_true', help='log every command')
    args = ap.parse_args(argv)
    # Decide before any socket is opened (with fd 0 closed, a socket could take it).
    watching = args.exit_on_stdin_eof or (not args.ignore_stdin and _stdin_is_pipe())

    logging.basicConfig(stream=sys.stderr, level=logging.DEBUG if args.verbose else logging.INFO,
                        format='%(asctime)s mongo-emulator %(levelname)s %(message)s')

    engine = Engine(args.host, args.port, args.replset or None, args.txn_timeout,
                    args.txn_wait_ms / 1000.0)
    server = EmulatorServer(engine, args.host, args.port)
    port = server.run()
    engine.port = port

    stop = threading.Event()

    def on_signal(signum, frame):
        stop.set()
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if watching:
        def watch_stdin():
            try:
                while sys.stdin.buffer.read(4096):
                    pass
            except (OSError, ValueError):
                pass
            stop.set()
        threading.Thread(target=watch_stdin, name='stdin', daemon=True).start()

    log.info('listening on %s:%d (replica set %r, pid %d%s)', args.host, port, args.replset,
             os.getpid(), ', exits when stdin closes' if watching else '')
    sys.stdout.write('READY %d\n' % port)
    sys.stdout.flush()
    while not stop.wait(0.2):
        pass
    log.info('stopping (%s)', ', '.join('%s=%s' % kv for kv in engine.stats.items()))
    server._stopped = True
    server.close_listener()
    logging.shutdown()
    sys.stdout.flush()
    # Skip interpreter teardown (mockupdb's atexit hook joins threads for up to 10 s).
    os._exit(0)


if __name__ == '__main__':
    sys.exit(main())
